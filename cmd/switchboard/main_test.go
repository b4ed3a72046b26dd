package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"toybox/switchboard/dnstest"
	"toybox/tests/testenv"
)

var binDir string

// TestMain builds the switchboard and toybox binaries once; the tests drive
// them as black boxes.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "switchboard-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	for _, pkg := range []string{"toybox/cmd/switchboard", "toybox/cmd/toybox"} {
		out, err := exec.Command("go", "build", "-o", dir, pkg).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type lockedBuffer = testenv.Buffer

type running struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	public string
	local  string
	dns    *dnstest.Server
}

// startSwitchboard runs the binary with both sockets and a config naming
// a test DNS server; it waits until both sockets answer.
//
// flags are extra command-line flags; when there are none and extra has no
// "owner" section, the switchboard runs with --loopback unchecked, so that
// tests reach their own loopback servers.
func startSwitchboard(t *testing.T, extra map[string]any, flags ...string) *running {
	t.Helper()
	if _, ok := extra["owner"]; !ok && len(flags) == 0 {
		flags = []string{"--loopback", "unchecked"}
	}
	dns, err := dnstest.New("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dns.Close() })
	dir := t.TempDir()
	cfg := map[string]any{"resolver": dns.Addr()}
	for k, v := range extra {
		cfg[k] = v
	}
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := &running{public: filepath.Join(dir, "public.sock"), local: filepath.Join(dir, "local.sock"), dns: dns, stderr: &lockedBuffer{}}
	r.cmd = exec.Command(filepath.Join(binDir, "switchboard"), append([]string{"--config", cfgPath, "--listen", "public=" + r.public, "--listen", "local=" + r.local}, flags...)...)
	r.cmd.Stderr = r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		_ = r.cmd.Wait()
	})
	waitSocket(t, r.public)
	waitSocket(t, r.local)
	return r
}

func waitSocket(t *testing.T, path string) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, func() error {
		c, err := net.Dial("unix", path)
		if err != nil {
			return fmt.Errorf("socket %s never came up", path)
		}
		_ = c.Close()
		return nil
	})
}

// egress runs toybox egress and returns its exit code, stdout and stderr.
func egress(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "toybox"), append([]string{"egress"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = strings.NewReader(stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("toybox egress %q timed out; stderr %s", args, errb.String())
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

func TestEgressBlackBox(t *testing.T) {
	r := startSwitchboard(t, nil)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	echoPort := echo.Addr().(*net.TCPAddr).Port
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "hello from %s", r.URL.Path)
	}))
	defer web.Close()
	webPort := web.Listener.Addr().(*net.TCPAddr).Port
	r.dns.Set("web.test", netip.MustParseAddr("127.0.0.1"))
	r.dns.Set("meta.test", netip.MustParseAddr("169.254.169.254"))

	tests := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"check public loopback", "", []string{"--socket", r.public, "check", "127.0.0.1:22"}, 3, "", "egress refused: 127.0.0.1 is a loopback address"},
		{"check public metadata", "", []string{"--socket", r.public, "check", "http://169.254.169.254/latest/"}, 3, "", "egress refused: 169.254.169.254 is a cloud metadata address"},
		{"check local loopback", "", []string{"--socket", r.local, "check", fmt.Sprintf("127.0.0.1:%d", echoPort)}, 0, "allowed", ""},
		{"check local metadata name", "", []string{"--socket", r.local, "check", "meta.test:80"}, 3, "", "egress refused: meta.test resolves to 169.254.169.254, a cloud metadata address"},
		{"check not granted", "", []string{"--socket", r.local, "--constrain", `{"host":"example.org"}`, "check", "web.test:80"}, 3, "", "egress refused: egress to web.test not granted"},
		{"check port not granted", "", []string{"--socket", r.local, "--constrain", `web.test:443`, "check", "web.test:80"}, 3, "", "egress refused: port 80 not granted"},
		{"constrain widens", "", []string{"--socket", r.public, "--constrain", `{"network":"local"}`, "check", "web.test:80"}, 1, "", "widen"},
		{"bad constrain", "", []string{"--socket", r.public, "--constrain", `{"hots":"x"}`, "check", "web.test:80"}, 2, "", "hots"},
		{"bad legacy constrain", "", []string{"--socket", r.public, "--constrain", "web.test:99999", "check", "web.test:80"}, 2, "", "port 99999 out of range"},
		{"fetch local", "", []string{"--socket", r.local, "fetch", fmt.Sprintf("http://web.test:%d/x", webPort)}, 0, "hello from /x", ""},
		{"fetch public", "", []string{"--socket", r.public, "fetch", fmt.Sprintf("http://web.test:%d/x", webPort)}, 3, "", "egress refused: web.test resolves to 127.0.0.1, a loopback address"},
		{"connect echo", "ping\n", []string{"--socket", r.local, "connect", fmt.Sprintf("localhost:%d", echoPort)}, 0, "ping\n", ""},
		{"connect public", "ping\n", []string{"--socket", r.public, "connect", fmt.Sprintf("localhost:%d", echoPort)}, 3, "", "egress refused: localhost resolves to 127.0.0.1, a loopback address"},
		{"octal spelling", "", []string{"--socket", r.local, "check", "0177.0.0.1:80"}, 3, "", "egress refused: "},
		{"no args", "", []string{"--socket", r.local}, 2, "", "usage"},
		{"unknown op", "", []string{"--socket", r.local, "frob", "a.test:1"}, 2, "", "unknown operation"},
		{"no socket", "", []string{"--socket", filepath.Join(t.TempDir(), "none"), "check", "a.test:1"}, 1, "", "connecting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := egress(t, tt.stdin, tt.args...)
			if code != tt.code {
				t.Errorf("exit = %d; want %d (stdout %q, stderr %q)", code, tt.code, out, errs)
			}
			if tt.stdout != "" && !strings.Contains(out, tt.stdout) {
				t.Errorf("stdout = %q; want %q", out, tt.stdout)
			}
			if tt.stderr != "" && !strings.Contains(errs, tt.stderr) {
				t.Errorf("stderr = %q; want %q", errs, tt.stderr)
			}
			if tt.code == 3 && !strings.HasPrefix(errs, "egress refused: ") {
				t.Errorf("refusal stderr %q does not start with \"egress refused: \"", errs)
			}
		})
	}
	// One JSON record per decision on the switchboard's stderr.
	logs := r.stderr.String()
	for _, want := range []string{`"op":"check"`, `"socket":"public"`, `"reason":"169.254.169.254 is a cloud metadata address"`, `"allow":false`} {
		if !strings.Contains(logs, want) {
			t.Errorf("switchboard log lacks %s", want)
		}
	}
}

func TestListenRefusesLiveSocketAndReplacesStale(t *testing.T) {
	r := startSwitchboard(t, nil)
	out, err := exec.Command(filepath.Join(binDir, "switchboard"), "--listen", "public="+r.public).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "live socket") {
		t.Errorf("second switchboard on a live socket: %v %s; want a refusal", err, out)
	}
	fi, err := os.Stat(r.public)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, %v; want 0600", fi.Mode(), err)
	}
	// A stale socket (nobody listening) is replaced.
	stale := filepath.Join(t.TempDir(), "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
	cmd := exec.Command(filepath.Join(binDir, "switchboard"), "--listen", "local="+stale, "--mode", "0660")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitSocket(t, stale)
	if fi, err := os.Stat(stale); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("--mode 0660 socket mode = %v, %v", fi.Mode(), err)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("SIGTERM exit: %v; want a clean exit", err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket left behind after shutdown: %v", err)
	}
	for _, bad := range [][]string{{"--mode", "0666", "--listen", "public=" + stale}, {"--listen", "lan=" + stale}, {}} {
		if err := exec.Command(filepath.Join(binDir, "switchboard"), bad...).Run(); err == nil {
			t.Errorf("switchboard %q started", bad)
		}
	}
	regular := filepath.Join(t.TempDir(), "file")
	_ = os.WriteFile(regular, nil, 0o600)
	if out, err := exec.Command(filepath.Join(binDir, "switchboard"), "--listen", "public="+regular).CombinedOutput(); err == nil || !strings.Contains(string(out), "not a socket") {
		t.Errorf("--listen over a regular file: %v %s", err, out)
	}
}

func TestBadConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.json")
	_ = os.WriteFile(p, []byte(`{"sockets":{"public":{}},"dney":[]}`), 0o600)
	out, err := exec.Command(filepath.Join(binDir, "switchboard"), "--config", p, "--listen", "public="+filepath.Join(dir, "s")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "dney") {
		t.Errorf("unknown config key: %v %s; want an error naming it", err, out)
	}
}

// TestOwnerCheckWired: with an "owner" section the listener-owner check
// judges loopback targets of local handles (a root-owned listener that no
// container publishes is refused); without it every such target is refused,
// unless --loopback unchecked says so (with a warning).
func TestOwnerCheckWired(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	r := startSwitchboard(t, map[string]any{"owner": map[string]any{
		"toyboxUID":  65534,
		"ownRoots":   []string{t.TempDir()},
		"dockerHost": "unix://" + filepath.Join(t.TempDir(), "no-docker.sock"),
	}})
	code, _, errs := egress(t, "", "--socket", r.local, "check", fmt.Sprintf("127.0.0.1:%d", port))
	if code != 3 || !strings.HasPrefix(errs, "egress refused: ") {
		t.Errorf("check of a root-owned loopback listener: exit %d, stderr %q; want refused by the owner check", code, errs)
	}
	t.Logf("owner check said: %s", strings.TrimSpace(errs))
	closed := startSwitchboard(t, nil, "--loopback", "owner")
	code, _, errs = egress(t, "", "--socket", closed.local, "check", fmt.Sprintf("127.0.0.1:%d", port))
	if code != 3 || !strings.Contains(errs, "no listener-owner check is configured") {
		t.Errorf("without an owner section: exit %d, %q; want refused: no listener-owner check is configured", code, errs)
	}
	plain := startSwitchboard(t, nil, "--loopback", "unchecked")
	code, _, errs = egress(t, "", "--socket", plain.local, "check", fmt.Sprintf("127.0.0.1:%d", port))
	if code != 0 {
		t.Errorf("--loopback unchecked: exit %d, %q; want allowed", code, errs)
	}
	if !strings.Contains(plain.stderr.String(), "--loopback unchecked") {
		t.Error("no warning that the listener-owner check is off")
	}
	if out, err := exec.Command(filepath.Join(binDir, "switchboard"), "--loopback", "sometimes", "--listen", "local="+filepath.Join(t.TempDir(), "s")).CombinedOutput(); err == nil || !strings.Contains(string(out), "want owner or unchecked") {
		t.Errorf("--loopback sometimes: %v %s; want a usage error", err, out)
	}
	bad := filepath.Join(t.TempDir(), "c.json")
	_ = os.WriteFile(bad, []byte(`{"owner":{"toyboxUID":1}}`), 0o600)
	if out, err := exec.Command(filepath.Join(binDir, "switchboard"), "--config", bad, "--listen", "local="+filepath.Join(t.TempDir(), "s")).CombinedOutput(); err == nil || !strings.Contains(string(out), "ownRoots") {
		t.Errorf("owner section without ownRoots: %v %s", err, out)
	}
}

// TestThreads: the switchboard runs on one thread unless its config or
// $GOMAXPROCS says otherwise, and says so in its first record.
func TestThreads(t *testing.T) {
	threads := func(r *running) string {
		var n string
		testenv.WaitFor(t, 5*time.Second, func() error {
			for _, l := range strings.Split(r.stderr.String(), "\n") {
				if strings.Contains(l, `"msg":"starting"`) {
					_, after, _ := strings.Cut(l, `"threads":`)
					n, _, _ = strings.Cut(after, "}")
					return nil
				}
			}
			return fmt.Errorf("no starting record in %s", r.stderr.String())
		})
		return n
	}
	t.Setenv("GOMAXPROCS", "")
	os.Unsetenv("GOMAXPROCS")
	if got := threads(startSwitchboard(t, nil)); got != "1" {
		t.Errorf("default threads = %s; want 1", got)
	}
	if got := threads(startSwitchboard(t, map[string]any{"threads": 3})); got != "3" {
		t.Errorf("config threads 3 = %s", got)
	}
	t.Setenv("GOMAXPROCS", "2")
	if got := threads(startSwitchboard(t, nil)); got != "2" {
		t.Errorf("with GOMAXPROCS=2 threads = %s; want 2", got)
	}
}
