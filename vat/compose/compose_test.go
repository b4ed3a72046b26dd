package compose

import (
	"errors"
	"strings"
	"testing"
)

var composeTests = []struct {
	name string
	yaml string
	port uint16
	want bool
}{
	{"a service with profiles does not run by default", "services:\n  bait:\n    ports:\n      - \"127.0.0.1:631:80\"\n    profiles: [\"never\"]\n", 631, false},
	{"profiles before ports", "services:\n  bait:\n    profiles:\n      - never\n    ports:\n      - \"127.0.0.1:631:80\"\n", 631, false},
	{"scale 0", "services:\n  bait:\n    scale: 0\n    ports:\n      - \"127.0.0.1:631:80\"\n", 631, false},
	// Compose starts no container for these either: every spelling of 0.
	{"deploy replicas 0 (block)", "services:\n  db:\n    deploy:\n      resources: {}\n      replicas: 0\n    ports:\n    - 127.0.0.1:6379:6379\n", 6379, false},
	{"deploy replicas 0 (flow)", "services:\n  db:\n    deploy: {replicas: 0}\n    ports: [\"127.0.0.1:6379:6379\"]\n", 6379, false},
	{"scale '0'", "services:\n  db:\n    scale: '0'\n    ports: [\"127.0.0.1:6379:6379\"]\n", 6379, false},
	{"scale 00", "services:\n  db:\n    scale: 00\n    ports: [\"127.0.0.1:6379:6379\"]\n", 6379, false},
	{"scale 0x0", "services:\n  db:\n    scale: 0x0\n    ports: [\"127.0.0.1:6379:6379\"]\n", 6379, false},
	{"deploy replicas 2 runs", "services:\n  db:\n    deploy:\n      replicas: 2\n    ports: [\"127.0.0.1:6379:6379\"]\n", 6379, true},
	{"a nested replicas 0 is not the service's", "services:\n  db:\n    deploy:\n      update_config:\n        replicas: 0\n    ports: [\"127.0.0.1:6379:6379\"]\n", 6379, true},
	{"another service that runs still counts", "services:\n  bait:\n    profiles: [\"never\"]\n    ports:\n      - \"127.0.0.1:631:80\"\n  db:\n    ports:\n      - \"127.0.0.1:631:80\"\n", 631, true},
	{"short quoted", `
services:
  db:
    image: postgres:16
    ports:
      - "127.0.0.1:5432:5432"
`, 5432, true},
	{"short plain with /tcp", `
services:
  db:
    ports:
      - 127.0.0.1:5432:5432/tcp
`, 5432, true},
	{"other port", `
services:
  db:
    ports:
      - "127.0.0.1:5432:5432"
`, 5433, false},
	{"udp only", `
services:
  dns:
    ports:
      - "127.0.0.1:5353:53/udp"
`, 5353, false},
	{"every address is not 127.0.0.1", `
services:
  db:
    ports:
      - "5432:5432"
`, 5432, false},
	{"0.0.0.0 is not 127.0.0.1", `
services:
  db:
    ports: ["0.0.0.0:5432:5432"]
`, 5432, false},
	{"container port only", `
services:
  db:
    ports:
      - "5432"
`, 5432, false},
	{"random host port on loopback", `
services:
  db:
    ports:
      - "127.0.0.1::5432"
`, 5432, false},
	{"ipv6 loopback is not 127.0.0.1", `
services:
  db:
    ports:
      - "[::1]:5432:5432"
`, 5432, false},
	{"range", `
services:
  app:
    ports:
      - "127.0.0.1:5000-5010:5000-5010"
`, 5004, true},
	{"flow list", `
services:
  db: # the database
    ports: ['8080', "127.0.0.1:5432:5432" ]   # published
`, 5432, true},
	{"sequence at the key's indent", `
services:
  db:
    ports:
    - 127.0.0.1:5432:5432
    image: postgres
`, 5432, true},
	{"long syntax", `
services:
  db:
    ports:
      - target: 5432
        published: "5432"
        host_ip: 127.0.0.1
        protocol: tcp
        mode: host
`, 5432, true},
	{"long syntax, numbers, default protocol", `
services:
  db:
    ports:
      - host_ip: "127.0.0.1"
        target: 5432
        published: 15432
`, 15432, true},
	{"long syntax, dash alone", `
services:
  db:
    ports:
      -
        target: 5432
        published: 5432
        host_ip: 127.0.0.1
`, 5432, true},
	{"long syntax without host_ip", `
services:
  db:
    ports:
      - target: 5432
        published: 5432
`, 5432, false},
	{"long syntax udp", `
services:
  db:
    ports:
      - target: 53
        published: 5353
        host_ip: 127.0.0.1
        protocol: udp
`, 5353, false},
	{"long syntax without published", `
services:
  db:
    ports:
      - target: 5432
        host_ip: 127.0.0.1
`, 5432, false},
	{"second service publishes", `
version: "3.8"
services:
  web:
    image: nginx
    command: ["nginx", "-g", "daemon off;"]
    environment:
      A: "1"
  db:
    image: postgres
    ports:
      - "127.0.0.1:5432:5432"
volumes:
  data: {}
`, 5432, true},
	{"ports outside services do not count", `
x-defaults:
  ports:
    - "127.0.0.1:5432:5432"
services:
  db:
    image: postgres
`, 5432, false},
	{"a ports line inside a block scalar does not count", `
services:
  db:
    command: |
      ports:
        - "127.0.0.1:5432:5432"
    image: postgres
`, 5432, false},
	{"expose is not publish", `
services:
  db:
    expose:
      - "5432"
`, 5432, false},
	{"leading document marker and comments", `---
# a comment
services:
  db:
    ports:
      # the db
      - "127.0.0.1:5432:5432" # here
`, 5432, true},
	{"hash inside quotes is not a comment", `
services:
  db:
    command: "echo #notacomment"
    ports:
      - "127.0.0.1:5432:5432"
`, 5432, true},
	{"no services", `
volumes:
  data:
`, 5432, false},
	{"empty services", `
services: {}
`, 5432, false},
}

func TestPublishes(t *testing.T) {
	for _, tt := range composeTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Publishes([]byte(tt.yaml), tt.port)
			if err != nil {
				t.Fatalf("Publishes(port %d) error: %v", tt.port, err)
			}
			if got != tt.want {
				t.Errorf("Publishes(port %d) = %v; want %v", tt.port, got, tt.want)
			}
		})
	}
}

var composeRefusals = []struct {
	name string
	yaml string
}{
	{"tab indentation", "services:\n\tdb:\n"},
	{"anchor", "services:\n  db: &db\n    ports:\n      - \"127.0.0.1:5432:5432\"\n"},
	{"alias", "x: &p\n  - 1\nservices:\n  db:\n    ports: *p\n"},
	{"merge key", "services:\n  db:\n    <<: {}\n"},
	{"tag", "services:\n  db:\n    ports: !reset []\n"},
	{"alias in a flow list", "services:\n  db:\n    ports: [*p]\n"},
	{"two documents", "services: {}\n---\nservices: {}\n"},
	{"multi-line quoted string", "services:\n  db:\n    command: \"a\n      b\"\n"},
	{"service as flow mapping", "services:\n  db: {ports: [\"127.0.0.1:5432:5432\"]}\n"},
	{"service misaligned", "services:\n  db:\n    image: x\n   web:\n"},
	{"interpolation short", "services:\n  db:\n    ports:\n      - \"127.0.0.1:${PORT:-5432}:5432\"\n"},
	{"interpolation long", "services:\n  db:\n    ports:\n      - target: 5432\n        published: ${P}\n        host_ip: 127.0.0.1\n"},
	{"unknown long key", "services:\n  db:\n    ports:\n      - target: 5432\n        publish: 5432\n"},
	{"long without target", "services:\n  db:\n    ports:\n      - published: 5432\n        host_ip: 127.0.0.1\n"},
	{"flow mapping port", "services:\n  db:\n    ports:\n      - {target: 5432, published: 5432, host_ip: 127.0.0.1}\n"},
	{"bad port number", "services:\n  db:\n    ports:\n      - \"127.0.0.1:99999:5432\"\n"},
	{"bad protocol", "services:\n  db:\n    ports:\n      - \"127.0.0.1:5432:5432/quic\"\n"},
	{"bad host address", "services:\n  db:\n    ports:\n      - \"localhost:5432:5432\"\n"},
	{"unbracketed ipv6", "services:\n  db:\n    ports:\n      - \"::1:5432:5432\"\n"},
	{"ports not a list", "services:\n  db:\n    ports: 5432\n"},
	{"top level not a mapping", "- a\n- b\n"},
	{"flow list spans lines", "services:\n  db:\n    ports: [\"127.0.0.1:5432:5432\",\n      \"1\"]\n"},
	{"escape in double quotes", "services:\n  db:\n    ports:\n      - \"127.0.0.1:5432:54\\x32\"\n"},
	{"long value spans lines", "services:\n  db:\n    ports:\n      - target: 5432\n          published: 5432\n"},
	{"directive", "%YAML 1.2\nservices: {}\n"},
	{"services twice", "services:\n  db:\n    ports:\n      - \"127.0.0.1:5432:5432\"\nservices: {}\n"},
	{"service twice", "services:\n  db:\n    ports:\n      - \"127.0.0.1:5432:5432\"\n  db:\n    image: x\n"},
	{"ports twice", "services:\n  db:\n    ports:\n      - \"127.0.0.1:5432:5432\"\n    ports: []\n"},
}

func TestPublishesRefuses(t *testing.T) {
	for _, tt := range composeRefusals {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Publishes([]byte(tt.yaml), 5432)
			if !errors.Is(err, ErrCompose) {
				t.Errorf("Publishes = %v, %v; want an error wrapping ErrCompose", got, err)
			}
		})
	}
}

func FuzzPublishes(f *testing.F) {
	for _, tt := range composeTests {
		f.Add(tt.yaml, tt.port)
	}
	for _, tt := range composeRefusals {
		f.Add(tt.yaml, uint16(5432))
	}
	f.Fuzz(func(t *testing.T, yaml string, port uint16) {
		got, err := Publishes([]byte(yaml), port)
		if err != nil {
			if !errors.Is(err, ErrCompose) {
				t.Fatalf("error %v does not wrap ErrCompose", err)
			}
			if got {
				t.Fatalf("true together with an error")
			}
			return
		}
		if got && !strings.Contains(yaml, "127.0.0.1") {
			t.Fatalf("publishes on 127.0.0.1 according to a file that never names it")
		}
	})
}
