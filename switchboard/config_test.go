package switchboard

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"toybox/labels"
)

func TestParseFile(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"empty object", `{}`, ""},
		{"full", `{"sockets":{"public":{},"local":{"scheme":"tcp"}},"deny":["10.9.0.0/16","1.2.3.4","bad.example"],"publicNames":["me.example"],"resolver":"127.0.0.1:53","limits":{"calls":10,"bytes":1000000,"conns":5,"window":262144}}`, ""},
		{"unknown key", `{"sokets":{}}`, "unknown field"},
		{"unknown label", `{"sockets":{"public":{"hots":"x"}}}`, "socket \"public\""},
		{"bad socket name", `{"sockets":{"lan":{}}}`, "public or local"},
		{"contradicting network", `{"sockets":{"public":{"network":"local"}}}`, "contradicts"},
		{"vat in config", `{"sockets":{"local":{"vat":"a"}}}`, "supervisor"},
		{"bad cidr", `{"deny":["10.0.0.0/33"]}`, "deny"},
		{"mapped cidr", `{"deny":["::ffff:10.20.0.0/112"]}`, ""},
		{"mapped cidr shorter than /96", `{"deny":["::ffff:10.20.0.0/80"]}`, `deny "::ffff:10.20.0.0/80": an IPv4-mapped prefix must be /96 or longer`},
		{"bad name", `{"deny":["exa mple.com"]}`, "deny"},
		{"bad resolver", `{"resolver":"dns.example:53"}`, "resolver"},
		{"negative limit", `{"limits":{"calls":-1}}`, "negative"},
		{"trailing", `{} {}`, "trailing"},
		{"threads", `{"threads":4}`, ""},
		{"negative threads", `{"threads":-1}`, "threads"},
		{"too many threads", `{"threads":100000}`, "threads"},
		{"owner", `{"owner":{"toyboxUID":999,"ownRoots":["/var/lib/toybox"],"stateDir":"/var/lib/toybox","cacheTTL":"1s"}}`, ""},
		{"owner without roots", `{"owner":{"toyboxUID":999}}`, "ownRoots"},
		{"owner negative uid", `{"owner":{"toyboxUID":-1,"ownRoots":["/x"]}}`, "negative"},
		{"owner bad ttl", `{"owner":{"toyboxUID":1,"ownRoots":["/x"],"cacheTTL":"soon"}}`, "cacheTTL"},
		{"owner unknown key", `{"owner":{"toyboxUID":1,"ownRoots":["/x"],"uid":3}}`, "unknown field"},
		{"not json", `sockets: {}`, "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseFile([]byte(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseFile(%s) = %v", tt.in, err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseFile(%s) = %v; want ErrConfig containing %q", tt.in, err, tt.wantErr)
			}
			_ = f
		})
	}
	f, err := ParseFile([]byte(tests[1].in))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Deny) != 2 || cfg.Deny[1] != netip.MustParsePrefix("1.2.3.4/32") || len(cfg.DenyNames) != 1 || cfg.DenyNames[0] != "bad.example" {
		t.Errorf("deny = %v %v", cfg.Deny, cfg.DenyNames)
	}
	root, err := f.Root("local")
	if err != nil || root != (labels.Set{Scheme: "tcp", Network: "local"}) {
		t.Errorf("Root(local) = %v, %v", root, err)
	}
	if root, err := f.Root("public"); err != nil || root != (labels.Set{Network: "public"}) {
		t.Errorf("Root(public) = %v, %v", root, err)
	}
	if _, err := f.Config(nil, []byte("not pem")); err == nil {
		t.Error("Config accepted rootCAs without a certificate")
	}
}

// TestDenyMappedPrefix: a deny CIDR in IPv4-mapped form is read as the IPv4
// prefix it maps, since every address is unmapped before it is matched.
func TestDenyMappedPrefix(t *testing.T) {
	f, err := ParseFile([]byte(`{"deny":["::ffff:10.20.0.0/112","::ffff:0:0/96","::ffff:10.30.0.7/128","::ffff:10.40.0.7","fd00::/8"]}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range cfg.Deny {
		got = append(got, p.String())
	}
	if want := "10.20.0.0/16 0.0.0.0/0 10.30.0.7/32 10.40.0.7/32 fd00::/8"; strings.Join(got, " ") != want {
		t.Errorf("deny = %v; want %s", got, want)
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte(`{"sockets":{"public":{"host":"a.b"}},"deny":["1.2.3.0/24"]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := ParseFile(b)
		if err != nil {
			return
		}
		for _, n := range []string{"public", "local"} {
			r, err := file.Root(n)
			if err != nil || r.Network != n || r.Vat != "" {
				t.Fatalf("Root(%s) = %v, %v", n, r, err)
			}
		}
	})
}

func TestThreadsFor(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOMAXPROCS" {
				return v
			}
			return ""
		}
	}
	four, err := ParseFile([]byte(`{"threads":4}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		f    *File
		env  string
		want int
	}{
		{"default", &File{}, "", DefaultThreads},
		{"no file", nil, "", DefaultThreads},
		{"environment", &File{}, "3", 0},
		{"config", four, "", 4},
		{"config over environment", four, "3", 4},
	} {
		if got := tt.f.ThreadsFor(env(tt.env)); got != tt.want {
			t.Errorf("%s: ThreadsFor = %d; want %d", tt.name, got, tt.want)
		}
	}
}
