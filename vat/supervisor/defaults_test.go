package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toybox/vat/manifest"
	"toybox/vat/store"
)

// TestManifestDefaults: a loopback address the manifest wrote is granted
// only when the vat's own compose file publishes that port on 127.0.0.1 over
// TCP; otherwise it is dropped with a reason and the vat starts without it.
// Any other set the manifest wrote reaches public addresses only: the local
// network (the LAN, a container's bridge address) is the owner's to grant.
// What the owner typed is kept; the supervisor's own port is refused.
func TestManifestDefaults(t *testing.T) {
	const publishes = "services:\n  db:\n    image: postgres\n    ports:\n      - \"127.0.0.1:5432:5432\"\n"
	tests := []struct {
		name        string
		compose     string // "" = no compose file
		hosts       string
		egress      string
		wantGrant   []string
		wantDropped []string
		mEgress     string // the manifest's own egress, if any
	}{
		{
			"published by its own compose file", publishes, `["127.0.0.1:5432"]`, "",
			[]string{`{"host":"127.0.0.1","origin":"manifest","port":5432}`},
			nil, "",
		},
		{
			"not published", publishes, `["127.0.0.1:6379"]`, "",
			nil,
			[]string{"does not publish port 6379 on 127.0.0.1 over TCP"},
			"",
		},
		{
			"no compose file", "", `["localhost:5432"]`, "",
			nil,
			[]string{"no compose file publishing port 5432"},
			"",
		},
		{
			"published on every address only", "services:\n  db:\n    ports:\n      - \"5432:5432\"\n", `["127.0.0.1:5432"]`, "",
			nil,
			[]string{"does not publish port 5432"},
			"",
		},
		{
			"loopback without a port", publishes, `["127.0.0.1"]`, "",
			nil,
			[]string{"without a port"},
			"",
		},
		{
			"http://localhost is on port 80", publishes, `["http://localhost"]`, "",
			nil,
			[]string{"does not publish port 80 on 127.0.0.1"},
			"",
		},
		{
			"a name below localhost is loopback too", "", `["db.localhost:5432"]`, "",
			nil,
			[]string{"no compose file publishing port 5432"},
			"",
		},
		{
			"an IPv4-mapped loopback address too", "", `["[::ffff:127.0.0.1]:5432"]`, "",
			nil,
			[]string{"no compose file publishing port 5432"},
			"",
		},
		{
			"a public host is no default, and stays public", "", `["example.com:443"]`, "",
			[]string{`{"host":"example.com","network":"public","origin":"manifest","port":443}`},
			nil, "",
		},
		{
			"a private address the manifest wrote reaches nothing", "", `["10.99.0.7:8080"]`, "",
			[]string{`{"host":"10.99.0.7","network":"public","origin":"manifest","port":8080}`},
			nil, "",
		},
		{
			"the manifest cannot ask for the local network", "", `["example.com:443"]`, "",
			[]string{`{"host":"example.com","network":"public","origin":"manifest","port":443}`},
			[]string{"the manifest asks for the local network; only the owner can grant that"},
			`{"network":"local"}`,
		},
		{
			"nor a private address on it", "", `["example.com:443"]`, "",
			[]string{`{"host":"example.com","network":"public","origin":"manifest","port":443}`},
			[]string{"the manifest asks for the local network"},
			`{"host":"10.99.0.7","network":"local"}`,
		},
		{
			"what the owner typed is kept", "", `["example.com:443"]`, `{"host":"127.0.0.1","port":6379}`,
			[]string{`{"host":"127.0.0.1","port":6379}`, `{"host":"example.com","network":"public","origin":"manifest","port":443}`},
			nil, "",
		},
		{
			"the owner may grant the local network", "", `["example.com:443"]`, `{"network":"local"}`,
			[]string{`{"network":"local"}`, `{"host":"example.com","network":"public","origin":"manifest","port":443}`},
			nil, "",
		},
	}
	s := &Supervisor{cfg: Config{OwnPorts: []uint16{8787}}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.compose != "" {
				if err := os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(tt.compose), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			egress := ""
			if tt.mEgress != "" {
				egress = `,"egress":` + tt.mEgress
			}
			m, err := manifest.Parse(strings.NewReader(`{"command":["./a"],"network":{"hosts":` + tt.hosts + `}` + egress + `}`))
			if err != nil {
				t.Fatal(err)
			}
			g, dropped, err := s.grantFor(store.Code{Dir: dir, Manifest: m}, tt.egress)
			if err != nil {
				t.Fatalf("grantFor: %v", err)
			}
			var got []string
			for _, set := range g {
				got = append(got, set.String())
			}
			if strings.Join(got, " ") != strings.Join(tt.wantGrant, " ") {
				t.Errorf("grant = %v; want %v", got, tt.wantGrant)
			}
			if len(dropped) != len(tt.wantDropped) {
				t.Fatalf("dropped = %q; want %d entries like %q", dropped, len(tt.wantDropped), tt.wantDropped)
			}
			for i, d := range dropped {
				if !strings.Contains(d.String(), tt.wantDropped[i]) {
					t.Errorf("dropped[%d] = %q; want it to say %q", i, d, tt.wantDropped[i])
				}
			}
		})
	}

	t.Run("the supervisor's own port is refused", func(t *testing.T) {
		m, err := manifest.Parse(strings.NewReader(`{"command":["./a"],"network":{"hosts":["127.0.0.1:8787"]}}`))
		if err != nil {
			t.Fatal(err)
		}
		g, err := m.Grant("")
		if err != nil {
			t.Fatal(err)
		}
		err = s.checkOwnPorts(g)
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "the supervisor's own port") {
			t.Fatalf("checkOwnPorts = %v; want a refusal naming the supervisor's own port", err)
		}
	})

	t.Run("a compose file too large to read is refused before it is read", func(t *testing.T) {
		// A few MiB of "a: 1" lines used to cost the supervisor tens of
		// times their size, at install and at every start.
		dir := t.TempDir()
		big := strings.Repeat("a: 1\n", (maxComposeBytes/5)+1)
		if err := os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(big), 0o644); err != nil {
			t.Fatal(err)
		}
		m, _ := manifest.Parse(strings.NewReader(`{"command":["./a"],"network":{"hosts":["127.0.0.1:5432"]}}`))
		_, _, err := s.grantFor(store.Code{Dir: dir, Manifest: m}, "")
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "compose.yaml is") {
			t.Fatalf("grantFor = %v; want a refusal naming the compose file's size", err)
		}
	})

	t.Run("a compose file that is a link is refused", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink("/etc/hostname", filepath.Join(dir, "compose.yaml")); err != nil {
			t.Fatal(err)
		}
		m, _ := manifest.Parse(strings.NewReader(`{"command":["./a"],"network":{"hosts":["127.0.0.1:5432"]}}`))
		if _, _, err := s.grantFor(store.Code{Dir: dir, Manifest: m}, ""); err == nil {
			t.Fatal("grantFor followed a symlinked compose file")
		}
	})
}

// TestCarryEnvKeepsMeaning: an upgrade without env carries a value over
// only where the new manifest uses it as the old one did, or for less.
func TestCarryEnvKeepsMeaning(t *testing.T) {
	mk := func(files string) *manifest.Manifest {
		m, err := manifest.Parse(strings.NewReader(`{"command":["./a"],"env":["K"],"sandbox":{"files":` + files + `}}`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	plain, read, write, oauth := mk(`{}`), mk(`{"read":["K"]}`), mk(`{"write":["K"]}`), mk(`{"oauthDir":["K"]}`)
	tests := []struct {
		name     string
		old, new *manifest.Manifest
		ok       bool
	}{
		{"same", read, read, true},
		{"a bind dropped", write, plain, true},
		{"write made read-only", write, read, true},
		{"oauthDir made read-only", oauth, read, true},
		{"text becomes a read bind", plain, read, false},
		{"text becomes a write bind", plain, write, false},
		{"read becomes write", read, write, false},
		{"read becomes oauthDir", read, oauth, false},
		{"write becomes oauthDir", write, oauth, false},
		{"no old manifest: text", nil, read, false},
	}
	for _, tt := range tests {
		env, err := carryEnv(tt.new, tt.old, map[string]string{"K": "/srv/docs"})
		if tt.ok && (err != nil || env["K"] != "/srv/docs") {
			t.Errorf("%s: %v %v; want the value carried", tt.name, env, err)
		}
		if !tt.ok && (err == nil || !strings.Contains(err.Error(), "K: the old version")) {
			t.Errorf("%s: %v %v; want a refusal naming K", tt.name, env, err)
		}
	}
}
