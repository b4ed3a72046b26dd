package wall

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toybox/tests/testenv"
	"toybox/vat/wall/seccomp"
)

// planSpec is a Spec over a fresh state dir, with no bwrap needed.
func planSpec(t testing.TB) Spec {
	t.Helper()
	root := t.TempDir()
	state := filepath.Join(root, "state")
	s := Spec{
		ID:         "planned",
		Host:       NewHost(),
		StateDir:   state,
		InstallDir: filepath.Join(state, "code", "c0de"),
		DataDir:    filepath.Join(state, "data", "planned"),
		RunDir:     filepath.Join(state, "run", "planned"),
		EntryPath:  filepath.Join(root, "toybox-entry"),
		Command:    []string{"./app", "--flag"},
		HostEnv:    []string{"PATH=/usr/bin", "LC_ALL=C", "TZ=UTC", "AWS_SECRET_ACCESS_KEY=x", "HOME=/root"},
		Net:        Net{None: true},
	}
	for _, d := range []string{s.InstallDir, s.DataDir, s.RunDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(s.InstallDir, "app"), s.EntryPath} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestPlanEnv(t *testing.T) {
	if seccomp.Supported() != nil {
		testenv.Unavailable(t, "no seccomp table here")
	}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr error
		want    []string
		notWant []string
	}{
		{"allowlist only", nil, nil, []string{"PATH=/usr/bin", "LC_ALL=C", "TZ=UTC"}, []string{"AWS_SECRET_ACCESS_KEY=x", "HOME=/root"}},
		{"declared keys", map[string]string{"API_KEY": "v", "url": "http://x"}, nil, []string{"API_KEY=v", "url=http://x"}, nil},
		{"reserved keys overridden", map[string]string{"TOYBOX_VAT": "spoof", "TOYBOX_CAP_FD": "9"}, nil, []string{"TOYBOX_VAT=planned", "TOYBOX_CAP_FD=3"}, []string{"TOYBOX_VAT=spoof"}},
		{"proxy keys dropped without a network", map[string]string{"HTTP_PROXY": "http://evil"}, nil, nil, []string{"HTTP_PROXY=http://evil"}},
		{"key with equals", map[string]string{"A=B": "x"}, ErrSpec, nil, nil},
		{"key with dash", map[string]string{"A-B": "x"}, ErrSpec, nil, nil},
		{"empty key", map[string]string{"": "x"}, ErrSpec, nil, nil},
		{"NUL in a value", map[string]string{"A": "x\x00y"}, ErrSpec, nil, nil},
		{"for common runtimes", nil, nil, []string{"PYTHONUNBUFFERED=1", "PYTHONPYCACHEPREFIX=" + filepath.Join("DATA", ".cache", "python")}, nil},
		{"the owner's value over the runtimes'", map[string]string{"PYTHONUNBUFFERED": ""}, nil, []string{"PYTHONUNBUFFERED="}, []string{"PYTHONUNBUFFERED=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := planSpec(t)
			s.Env = tt.env
			p, err := BuildPlan(s)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("BuildPlan = %v; want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(p.Env, "\n")
			data, err := filepath.EvalSymlinks(s.DataDir)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				w = strings.ReplaceAll(w, "DATA", data)
				if !strings.Contains("\n"+got+"\n", "\n"+w+"\n") {
					t.Errorf("Env lacks %q; Env:\n%s", w, got)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("Env has %q", w)
				}
			}
		})
	}
}

func TestPlanProxyPortBump(t *testing.T) {
	if seccomp.Supported() != nil {
		testenv.Unavailable(t, "no seccomp table here")
	}
	tests := []struct {
		name     string
		net      Net
		wantPort int
		wantErr  error
	}{
		{"default", Net{}, DefaultProxyPort, nil},
		{"chosen", Net{ProxyPort: 8888}, 8888, nil},
		{"bumped past forwards", Net{Forwards: []Forward{{Port: 39080, Host: "h", TargetPort: 1}, {Port: 39081, Host: "h", TargetPort: 2}}}, 39082, nil},
		{"forward twice", Net{Forwards: []Forward{{Port: 1, Host: "h", TargetPort: 1}, {Port: 1, Host: "g", TargetPort: 2}}}, 0, ErrSpec},
		{"forward without host", Net{Forwards: []Forward{{Port: 1, TargetPort: 1}}}, 0, ErrSpec},
		{"forward host with a newline", Net{Forwards: []Forward{{Port: 1, Host: "h\n--x", TargetPort: 1}}}, 0, ErrSpec},
		{"none with forwards", Net{None: true, Forwards: []Forward{{Port: 1, Host: "h", TargetPort: 1}}}, 0, ErrSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := planSpec(t)
			s.Net = tt.net
			p, err := BuildPlan(s)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("BuildPlan = %v; want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.ProxyPort != tt.wantPort {
				t.Errorf("ProxyPort = %d; want %d", p.ProxyPort, tt.wantPort)
			}
		})
	}
}

// FuzzBuildPlan feeds arbitrary declared env and forward hosts to the plan:
// whatever it accepts keeps the wall's own variables and carries nothing
// that could be read as another bwrap option.
func FuzzBuildPlan(f *testing.F) {
	if seccomp.Supported() != nil {
		testenv.Unavailable(f, "no seccomp table in this build")
	}
	f.Add("API_KEY", "value", "127.0.0.1", uint16(5432))
	f.Add("TOYBOX_VAT", "spoof", "db.lan", uint16(39080))
	f.Add("A=B", "x\x00", "h\n--bind / /", uint16(1))
	f.Fuzz(func(t *testing.T, key, value, host string, port uint16) {
		s := planSpec(t)
		s.Env = map[string]string{key: value}
		s.Net = Net{Forwards: []Forward{{Port: port, Host: host, TargetPort: 80}}}
		p, err := BuildPlan(s)
		if err != nil {
			return
		}
		env := map[string]string{}
		for _, kv := range p.Env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || !validEnvKey(k) || strings.ContainsRune(v, 0) {
				t.Fatalf("bad env entry %q", kv)
			}
			env[k] = v
		}
		if env["TOYBOX_VAT"] != "planned" || env["TOYBOX_CAP_FD"] != "3" || env["TOYBOX_LISTEN"] != ListenPath {
			t.Fatalf("the wall's own variables were overridden: %v", p.Env)
		}
		if _, ok := env["AWS_SECRET_ACCESS_KEY"]; ok {
			t.Fatal("a host variable outside the allowlist reached the plan")
		}
		for _, fw := range p.Forwards {
			if strings.ContainsAny(fw.Host, " \t\r\n\x00=") {
				t.Fatalf("forward host %q accepted", fw.Host)
			}
		}
		if p.ProxyPort == int(port) {
			t.Fatalf("proxy port %d collides with a forward", port)
		}
	})
}

// TestBuildPlanNeedsHost: a Spec without the supervisor's Host is refused.
// A Host of its own would not know which views the other walls bind.
func TestBuildPlanNeedsHost(t *testing.T) {
	s := planSpec(t)
	s.Host = nil
	if _, err := BuildPlan(s); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "no Host") {
		t.Errorf("BuildPlan(no Host) = %v; want ErrSpec naming the Host", err)
	}
}

// TestBuildPlanRefusesForgedID: an id made by a conversion, not by
// labels.ParseVatID, is refused before anything is bound: "../x" would bind
// a folder above the vat's own into its wall.
func TestBuildPlanRefusesForgedID(t *testing.T) {
	s := planSpec(t)
	s.ID = "../x"
	if _, err := BuildPlan(s); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), `"../x" is not a vat id`) {
		t.Errorf("BuildPlan(ID ../x) = %v; want ErrSpec with the one message", err)
	}
}

// TestEtcViewDirNamesContent: the view's folder is named by its content,
// also when the last answer is given again (EtcViewDir keeps it): other
// content, or the same caller's bytes changed after the call, is another
// folder; the same content in new slices is the same one.
func TestEtcViewDirNamesContent(t *testing.T) {
	h := NewHost()
	state := t.TempDir()
	entries := func(hosts string) []EtcEntry {
		return []EtcEntry{{Path: "hostname", Data: []byte("toybox\n")}, {Path: "hosts", Data: []byte(hosts)}}
	}
	a := entries("127.0.0.1 localhost\n")
	dirA := h.EtcViewDir(state, a)
	if got := h.EtcViewDir(state, entries("127.0.0.1 localhost\n")); got != dirA {
		t.Errorf("the same content in new slices: %s, then %s", dirA, got)
	}
	dirB := h.EtcViewDir(state, entries("127.0.0.1 elsewhere\n"))
	if dirB == dirA {
		t.Errorf("other content, the same folder %s", dirA)
	}
	if got := h.EtcViewDir(state, a); got != dirA {
		t.Errorf("the first content again: %s, want %s", got, dirA)
	}
	copy(a[1].Data, "127.0.0.2")
	if got := h.EtcViewDir(state, a); got == dirA {
		t.Errorf("the caller's bytes changed in place: still %s", got)
	}
	if got := h.EtcViewDir(t.TempDir(), entries("127.0.0.1 localhost\n")); filepath.Base(got) != filepath.Base(dirA) || got == dirA {
		t.Errorf("another state dir: %s; want the same name below it (%s)", got, filepath.Base(dirA))
	}
	for _, e := range [][]EtcEntry{a, entries("127.0.0.1 localhost\n"), entries("127.0.0.1 elsewhere\n")} {
		if got, want := h.EtcViewDir(state, e), etcViewDir(state, e); got != want {
			t.Errorf("EtcViewDir = %s; the hash says %s", got, want)
		}
	}
}

// TestPlanListen: an app's own TCP port (Spec.ListenPort) is $PORT, the
// app has no $TOYBOX_LISTEN (the entry's), the proxy moves past the port,
// and a port the entry serves, one out of range, or one beside a stdio MCP
// bridge is refused.
func TestPlanListen(t *testing.T) {
	if seccomp.Supported() != nil {
		testenv.Unavailable(t, "no seccomp table here")
	}
	tests := []struct {
		name      string
		port      int
		net       Net
		mcp       bool
		wantProxy int
		wantErr   bool
	}{
		{"no way out", 3001, Net{None: true}, false, 0, false},
		{"with a way out", 3001, Net{}, false, DefaultProxyPort, false},
		{"the proxy's default port", DefaultProxyPort, Net{}, false, DefaultProxyPort + 1, false},
		{"a forwarded port", 5432, Net{Forwards: []Forward{{Port: 5432, Host: "db", TargetPort: 5432}}}, false, 0, true},
		{"out of range", 65536, Net{}, false, 0, true},
		{"negative", -1, Net{None: true}, false, 0, true},
		{"beside a stdio MCP bridge", 3001, Net{None: true}, true, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := planSpec(t)
			s.Net, s.ListenPort = tt.net, tt.port
			if tt.mcp {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				defer w.Close()
				s.MCP = &MCP{Listener: r}
			}
			p, err := BuildPlan(s)
			if tt.wantErr {
				if !errors.Is(err, ErrSpec) {
					t.Fatalf("BuildPlan(ListenPort %d) = %v; want ErrSpec", tt.port, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			env := "\n" + strings.Join(p.Env, "\n") + "\n"
			if !strings.Contains(env, "\nPORT=3001\n") && !strings.Contains(env, "\nPORT=39080\n") {
				t.Errorf("Env has no PORT=%d:%s", tt.port, env)
			}
			if strings.Contains(env, "\nTOYBOX_LISTEN=") {
				t.Errorf("Env has TOYBOX_LISTEN, the entry's socket:%s", env)
			}
			if p.ListenPort != tt.port || p.ProxyPort != tt.wantProxy || p.EntryPath == "" {
				t.Errorf("ListenPort %d, ProxyPort %d, EntryPath %q; want %d, %d and the entry", p.ListenPort, p.ProxyPort, p.EntryPath, tt.port, tt.wantProxy)
			}
		})
	}
}

// TestPlanTransparent: a vat with a way out gets transparent egress where
// the kernel can give it (the filter lets the entry read the app, the
// entry is told); a stdio MCP vat and a vat with no way out do not, and a
// vat with a way out that does not says why.
func TestPlanTransparent(t *testing.T) {
	if seccomp.Supported() != nil {
		testenv.Unavailable(t, "no seccomp table here")
	}
	kernel := seccomp.NotifierSupported()
	tests := []struct {
		name            string
		net             Net
		mcp             bool
		wantWhy         string
		wantTransparent bool
	}{
		{name: "a way out", net: Net{}, wantTransparent: kernel == nil},
		{name: "no way out", net: Net{None: true}},
		{name: "stdio MCP", net: Net{}, mcp: true, wantTransparent: kernel == nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := planSpec(t)
			s.Net = tt.net
			if tt.mcp {
				r, w, err := os.Pipe() // the plan only needs one to be given
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close(); w.Close() })
				s.MCP = &MCP{Listener: r}
			}
			p, err := BuildPlan(s)
			if err != nil {
				t.Fatal(err)
			}
			if p.Transparent != tt.wantTransparent {
				t.Errorf("Transparent = %v; want %v (kernel: %v)", p.Transparent, tt.wantTransparent, kernel)
			}
			why := tt.wantWhy
			if !tt.net.None && kernel != nil {
				why = kernel.Error()
			}
			if p.ProxyOnly != why {
				t.Errorf("ProxyOnly = %q; want %q", p.ProxyOnly, why)
			}
		})
	}
}
