package supervisor

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"toybox/tests/testenv"
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

// TestPrepareRemovesDeepFolders: a prepare step's folders are written by
// code in its wall (npm, an allowed install script, a uv build), which
// may leave a chain of folders deeper than the supervisor's descriptor
// limit. os.RemoveAll holds a descriptor a level: it ran the supervisor
// out of them (every accept, dial and spawn failing meanwhile) and then
// failed, so the folder stayed, at each install's end and at each start.
func TestPrepareRemovesDeepFolders(t *testing.T) {
	s, st := testSupervisorWith(t, func(c *Config) {
		c.Launch = func(_ context.Context, spec wall.Spec, _ *slog.Logger) (Process, error) {
			testenv.DeepChain(t, spec.DataDir, 1000)
			return nil, errors.New("no wall in this test")
		}
		c.Upstream = grant.NewUpstream(grant.UpstreamConfig{Path: filepath.Join(t.TempDir(), "switchboard.sock")})
		c.Packages = PackagesConfig{Registry: "http://127.0.0.1:9/", Node: "/usr/bin/node", NodeVersion: "20.0.0", NPM: "/usr/lib/node_modules/npm/bin/npm-cli.js"}
	})
	base := filepath.Join(st.StateDir(), "prepare")
	// Whatever happens, the chains go (t.TempDir's os.RemoveAll could not).
	t.Cleanup(func() { _ = exec.Command("rm", "-rf", base).Run() })
	sp, err := packages.ParsePackage("npm:tb-mcp-hello@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	testenv.LowNoFile(t, 256)
	if _, err := s.PreparePackage(context.Background(), PackageRequest{InstallRequest: InstallRequest{ID: "pkg"}, Package: packages.Request{Spec: sp}}); err == nil {
		t.Fatal("PreparePackage with no wall succeeded")
	}
	if ents, err := os.ReadDir(base); err != nil || len(ents) != 0 {
		t.Fatalf("the prepare folders after a failed install: %d left (%v); want none", len(ents), err)
	}
	// One a killed supervisor left: the next start removes it.
	left := filepath.Join(base, "pkg-123456")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	testenv.DeepChain(t, left, 1000)
	s.removePrepareFolders()
	if _, err := os.Lstat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a deep leftover prepare folder after start: %v; want it removed", err)
	}
}

// TestPackageEnvRefusesVariables: toybox expands no variable in an env
// value, and must never fill one from the supervisor's own environment.
// A value like ${API_KEY} (as a client's config or a shell line in single
// quotes has it) would reach the server as those characters. A package
// install refuses it before anything is prepared, naming the key and the
// variable, never the rest of the value.
func TestPackageEnvRefusesVariables(t *testing.T) {
	s := newTestSupervisor(t)
	h := s.AdminHandler()
	tests := []struct {
		name, env, want, hide string
	}{
		{"a variable", `{"API_KEY":"${API_KEY}"}`, "env API_KEY names ${API_KEY}", ""},
		{"with a default", `{"API_KEY":"${API_KEY:-sk-hunter2}"}`, "env API_KEY names ${API_KEY}", "hunter2"},
		{"inside a value", `{"URL":"https://me:hunter2@${HOST}/x"}`, "env URL names ${HOST}", "hunter2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("PUT", "http://toybox/envy?package=npm:tb-mcp-hello@1.0.0&env="+url.QueryEscape(tt.env), nil))
			body := rec.Body.String()
			if rec.Code != http.StatusBadRequest || !strings.Contains(body, tt.want) || (tt.hide != "" && strings.Contains(body, tt.hide)) {
				t.Errorf("PUT ?env=%s = %d %s; want 400 %q, without %q", tt.env, rec.Code, body, tt.want, tt.hide)
			}
		})
	}
	// A value with a $ that names no variable is a value.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("PUT", "http://toybox/envy?package=npm:tb-mcp-hello@1.0.0&env="+url.QueryEscape(`{"PASSWORD":"pa$$word","PRICE":"$5 {x}"}`), nil))
	if strings.Contains(rec.Body.String(), "names $") {
		t.Errorf("PUT with a $ in a value = %d %s; want no refusal of a variable", rec.Code, rec.Body)
	}
}
