package manifest

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"toybox/labels"
)

var parseTests = []struct {
	name, in string
	wantErr  string // substring; "" means valid
}{
	{"minimal", `{"command":["./app"]}`, ""},
	{"full", `{"command":["bin/app","-v"],"env":["API_KEY","CFG"],"network":{"hosts":["example.com","http://127.0.0.1:8080","[::1]:9"]},"egress":{"host":"example.org"},"sandbox":{"files":{"read":["CFG"]}},"ownEnvFile":true,"doors":["display"]}`, ""},
	{"internet", `{"command":["./app"],"network":"internet"}`, ""},
	{"inotify", `{"command":["./app"],"sandbox":{"inotify":true}}`, ""},
	{"inotify not a bool", `{"command":["./app"],"sandbox":{"inotify":"yes"}}`, "bad manifest"},
	{"inotify in other case", `{"command":["./app"],"sandbox":{"inotify":false,"Inotify":true}}`, "case-sensitive"},
	{"none", `{"command":["./app"],"network":"none"}`, ""},
	{"absolute host program", `{"command":["/bin/sh","run.sh"]}`, ""},
	{"unknown key", `{"command":["./app"],"colour":"red"}`, "unknown field"},
	{"unknown nested key", `{"command":["./app"],"sandbox":{"files":{"exec":["X"]}}}`, "unknown field"},
	{"no command", `{"env":["A"]}`, "command is missing"},
	{"empty command", `{"command":[]}`, "command is missing"},
	{"command climbs out", `{"command":["../../bin/sh"]}`, "leaves the bundle"},
	{"command dot", `{"command":["."]}`, "leaves the bundle"},
	{"bad env key", `{"command":["./a"],"env":["A-B"]}`, "not a valid name"},
	{"reserved env", `{"command":["./a"],"env":["TOYBOX_LISTEN"]}`, "reserved"},
	{"reserved proxy", `{"command":["./a"],"env":["HTTPS_PROXY"]}`, "reserved"},
	{"ld preload", `{"command":["./a"],"env":["LD_PRELOAD"]}`, "reserved"},
	{"dup env", `{"command":["./a"],"env":["A","A"]}`, "twice"},
	{"files undeclared", `{"command":["./a"],"sandbox":{"files":{"write":["OUT"]}}}`, "does not declare"},
	{"bad network word", `{"command":["./a"],"network":"everything"}`, "network"},
	{"empty hosts", `{"command":["./a"],"network":{"hosts":[]}}`, "empty"},
	{"host with path", `{"command":["./a"],"network":{"hosts":["example.com/x"]}}`, "network host"},
	{"host bad port", `{"command":["./a"],"network":{"hosts":["example.com:99999"]}}`, "out of range"},
	{"host bad scheme", `{"command":["./a"],"network":{"hosts":["ftp://example.com"]}}`, "scheme"},
	{"bad door", `{"command":["./a"],"doors":["Display!"]}`, "door"},
	{"trailing", `{"command":["./a"]} {}`, "trailing"},
	{"grant names vat", `{"command":["./a"],"egress":{"vat":"bob"}}`, "grant"},
	{"grant null", `{"command":["./a"],"egress":null}`, "egress is null"},
	{"not json", `command: ./a`, "bad manifest"},
	// What encoding/json alone would take, and another reader would read
	// otherwise: the last of two keys, or a key in other letter case.
	{"duplicate key", `{"command":["./a"],"network":"none","network":"internet"}`, "appears twice"},
	{"key in other case", `{"command":["./a"],"network":"none","NetWork":"internet"}`, "case-sensitive"},
	{"nested key in other case", `{"command":["./a"],"env":["P"],"Sandbox":{"Files":{"Write":["P"]}}}`, "case-sensitive"},
	{"nested duplicate", `{"command":["./a"],"env":["P"],"sandbox":{"files":{"read":["P"],"read":["P"]}}}`, "appears twice"},
}

// TestManifestKeysAreTheFields: exactKeys knows every key the manifest's
// structs have, spelled as their tags spell them.
func TestManifestKeysAreTheFields(t *testing.T) {
	known := map[string]bool{}
	for _, k := range manifestKeys {
		known[k] = true
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[Manifest](), reflect.TypeFor[Sandbox](), reflect.TypeFor[Files](), reflect.TypeFor[MCP]()} {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" && !known[name] {
				t.Errorf("%s.%s (json %q) is not in manifestKeys", typ.Name(), f.Name, name)
			}
		}
	}
}

func TestParse(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(strings.NewReader(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Parse(%s) = %v; want ok", tt.in, err)
				}
				if m == nil || len(m.Command) == 0 {
					t.Fatalf("Parse(%s) returned no command", tt.in)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Parse(%s) err = %v; want one containing %q", tt.in, err, tt.wantErr)
			}
			if !errors.Is(err, ErrBadManifest) && !errors.Is(err, ErrBadGrant) {
				t.Errorf("Parse(%s) err = %v; want ErrBadManifest or ErrBadGrant", tt.in, err)
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	big := `{"command":["./a"],"env":["` + strings.Repeat("A", MaxSize) + `"]}`
	if _, err := Parse(strings.NewReader(big)); !errors.Is(err, ErrBadManifest) {
		t.Errorf("Parse(huge) err = %v; want ErrBadManifest", err)
	}
}

func TestGrantAndNet(t *testing.T) {
	tests := []struct {
		name, manifest, param string
		wantSets              int
		wantNone              bool
		wantForwards          int
	}{
		{"no grant", `{"command":["./a"]}`, "", 0, true, 0},
		{"param only", `{"command":["./a"]}`, `{"host":"example.com"}`, 1, false, 0},
		{"param list", `{"command":["./a"]}`, `[{"host":"a.example"},{"host":"b.example","port":8443}]`, 2, false, 0},
		{"legacy param", `{"command":["./a"]}`, `example.com:8443`, 1, false, 0},
		{"internet", `{"command":["./a"],"network":"internet"}`, "", 1, false, 0},
		{"hosts with loopback", `{"command":["./a"],"network":{"hosts":["127.0.0.1:5432","example.com","http://localhost:8080"]}}`, "", 3, false, 2},
		{"everything", `{"command":["./a"],"network":"internet","egress":[{"host":"x.example"}]}`, `{"host":"y.example"}`, 3, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(strings.NewReader(tt.manifest))
			if err != nil {
				t.Fatal(err)
			}
			g, err := m.Grant(tt.param)
			if err != nil {
				t.Fatalf("Grant(%q) = %v", tt.param, err)
			}
			if len(g) != tt.wantSets {
				t.Errorf("Grant(%q) = %v (%d sets); want %d", tt.param, g, len(g), tt.wantSets)
			}
			n := m.Net(g)
			if n.None != tt.wantNone || len(n.Forwards) != tt.wantForwards {
				t.Errorf("Net = %+v; want None=%v and %d forwards", n, tt.wantNone, tt.wantForwards)
			}
		})
	}
}

// TestGrantSchemeHost: a listed https://host (or http://host) without a
// port grants that scheme on its default port, not on every port.
func TestGrantSchemeHost(t *testing.T) {
	m, err := Parse(strings.NewReader(`{"command":["./a"],"network":{"hosts":["https://api.example.com","http://web.example.com","https://alt.example.com:8443","db.example.com"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Grant("")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range g {
		got = append(got, s.String())
	}
	want := []string{
		`{"host":"api.example.com","origin":"manifest","port":443,"scheme":"https"}`,
		`{"host":"web.example.com","origin":"manifest","port":80,"scheme":"http"}`,
		`{"host":"alt.example.com","origin":"manifest","port":8443,"scheme":"https"}`,
		`{"host":"db.example.com","origin":"manifest"}`,
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Grant = %v; want %v", got, want)
	}
	if d := g[0].Admit(labels.Request{Scheme: "https", Host: "api.example.com", Port: 6379}); d.Allow {
		t.Errorf("https://api.example.com admits https on port 6379: %s", d.Reason)
	}
}

func TestGrantRefusals(t *testing.T) {
	m, _ := Parse(strings.NewReader(`{"command":["./a"]}`))
	for _, p := range []string{`{"vat":"bob"}`, `{"host":"*.example.com"}`, `{"port":0}`, `{"colour":"red"}`, `http://user@example.com/`, `{`} {
		if _, err := m.Grant(p); !errors.Is(err, ErrBadGrant) {
			t.Errorf("Grant(%q) err = %v; want ErrBadGrant", p, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, tt := range parseTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		if len(m.Command) == 0 {
			t.Fatalf("Parse(%q) accepted a manifest without a command", s)
		}
		p, err := m.CommandPath()
		if err != nil {
			t.Fatalf("accepted manifest has a bad command path: %v", err)
		}
		if strings.HasPrefix(p, "../") || p == ".." {
			t.Fatalf("accepted command %q leaves the bundle", p)
		}
	})
}

func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"example.com", "example.com:80", "http://[::1]:8080", "https://x", "[::1]", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHost(s)
		if err != nil {
			return
		}
		if h.Host == "" {
			t.Fatalf("ParseHost(%q) accepted an empty host", s)
		}
		h2, err := ParseHost(h.String())
		if err != nil || h2 != h {
			t.Fatalf("ParseHost(%q) = %+v; round trip via %q = %+v, %v", s, h, h.String(), h2, err)
		}
	})
}

// TestGrantOrigin: what the owner typed (?egress=) carries no origin; what
// the manifest's author wrote carries origin "manifest", which the
// switchboard's listener-owner check reads.
func TestGrantOrigin(t *testing.T) {
	m, err := Parse(strings.NewReader(`{"command":["./a"],"egress":[{"host":"x.example"}],"network":{"hosts":["127.0.0.1:5432"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Grant(`{"host":"127.0.0.1","port":6379}`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"host":"127.0.0.1","port":6379}`,
		`{"host":"x.example","origin":"manifest"}`,
		`{"host":"127.0.0.1","origin":"manifest","port":5432}`,
	}
	if len(g) != len(want) {
		t.Fatalf("Grant = %v; want %v", g, want)
	}
	for i, s := range g {
		if s.String() != want[i] {
			t.Errorf("Grant[%d] = %s; want %s", i, s, want[i])
		}
	}
	if _, err := m.Grant(`{"host":"a.example","origin":"manifest"}`); err == nil {
		t.Error("an ?egress= grant naming origin was accepted; only the supervisor sets it")
	}
}
