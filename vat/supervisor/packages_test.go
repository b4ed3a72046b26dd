package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"toybox/vat/grant"
	"toybox/vat/packages"
	"toybox/vat/wall"
	"toybox/vat/wall/cgroup"
)

// TestParsePackageParam: ?package= takes a spec or a launcher line as a
// JSON list, read by the one parser (its refusals included).
func TestParsePackageParam(t *testing.T) {
	tests := []struct {
		name, in   string
		pkg        string
		args       []string
		wantRefuse bool
	}{
		{"spec", "npm:tb-mcp-hello@^1", "npm:tb-mcp-hello@^1", nil, false},
		{"launcher", `["npx","-y","@scope/srv@1.2.3","/data","--flag"]`, "npm:@scope/srv@1.2.3", []string{"/data", "--flag"}, false},
		{"uvx launcher", `["uvx","mcp-server-fetch==1.0"]`, "pypi:mcp-server-fetch==1.0", nil, false},
		{"launcher --package", `["npx","--package","evil","srv"]`, "", nil, true},
		{"not a list of strings", `["npx",1]`, "", nil, true},
		{"two lists", `["npx","a"]["b"]`, "", nil, true},
		{"not a launcher", `["node","x.js"]`, "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp, err := parsePackageParam(tt.in)
			if tt.wantRefuse {
				if !errors.Is(err, packages.ErrBadSpec) {
					t.Fatalf("parsePackageParam(%s) = %v, %v; want ErrBadSpec", tt.in, sp, err)
				}
				return
			}
			if err != nil || sp.String() != tt.pkg || !slices.Equal(sp.Args, tt.args) {
				t.Errorf("parsePackageParam(%s) = %s %q, %v; want %s %q", tt.in, sp, sp.Args, err, tt.pkg, tt.args)
			}
		})
	}
}

// TestPrepareWallLimits: a prepare step runs npm on the registry's
// answers, and an allowed install script's code. Its wall was started
// with no cgroup, so with no memory or CPU limit: a huge registry answer
// or a script could take the host's memory (under systemd, the
// supervisor's own service's). It gets the operator's limits, as a vat's
// wall does.
func TestPrepareWallLimits(t *testing.T) {
	var specs []wall.Spec
	cg := cgroup.Open(cgroup.Config{})
	op := Limits{MemoryBytes: 256 << 20, CPUs: 0.5}
	s, _ := testSupervisorWith(t, func(c *Config) {
		c.Launch = func(_ context.Context, spec wall.Spec, _ *slog.Logger) (Process, error) {
			specs = append(specs, spec)
			return nil, errors.New("no wall in this test")
		}
		c.Upstream = grant.NewUpstream(grant.UpstreamConfig{Path: filepath.Join(t.TempDir(), "switchboard.sock")})
		c.Cgroups = cg
		c.Limits = op
		c.Packages = PackagesConfig{Registry: "http://127.0.0.1:9/", Node: "/usr/bin/node", NodeVersion: "20.0.0", NPM: "/usr/lib/node_modules/npm/bin/npm-cli.js"}
	})
	sp, err := packages.ParsePackage("npm:tb-mcp-hello@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PreparePackage(context.Background(), PackageRequest{InstallRequest: InstallRequest{ID: "pkg"}, Package: packages.Request{Spec: sp}}); err == nil {
		t.Fatal("PreparePackage with no wall succeeded")
	}
	if len(specs) != 1 {
		t.Fatalf("%d prepare walls launched; want the resolve step's", len(specs))
	}
	if got, want := specs[0].Limits, wallLimits(op); specs[0].Cgroups != cg || got != want {
		t.Errorf("the prepare wall's cgroups %p limits %+v; want %p %+v, a vat's", specs[0].Cgroups, got, cg, want)
	}
}
