package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"golang.org/x/net/websocket"

	"toybox/bench"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/switchboard/dnstest"
	"toybox/tests/amplify"
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

// activated starts the switchboard the way systemd does: the sockets as
// fds 3.., LISTEN_PID set to the child's own pid (the shell execs it),
// LISTEN_FDS and LISTEN_FDNAMES, and NOTIFY_SOCKET.
func activated(t *testing.T, files []*os.File, names string, notify string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0"`, filepath.Join(binDir, "switchboard"))
	cmd.ExtraFiles = files
	cmd.Env = append(os.Environ(), "LISTEN_FDS="+itoa(len(files)), "LISTEN_FDNAMES="+names, "NOTIFY_SOCKET="+notify)
	return cmd
}

func itoa(n int) string { return string(rune('0' + n)) }

func unixListenerFile(t *testing.T, path string) *os.File {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.File()
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestSocketActivationAndReady(t *testing.T) {
	dir := t.TempDir()
	notifyPath := filepath.Join(dir, "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	pub, loc := filepath.Join(dir, "public.sock"), filepath.Join(dir, "local.sock")
	cmd := activated(t, []*os.File{unixListenerFile(t, pub), unixListenerFile(t, loc)}, "public:local", notifyPath)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	_ = notify.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 256)
	n, err := notify.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), "READY=1") {
		t.Fatalf("notify = %q, %v; want READY=1 (stderr %s)", buf[:n], err, stderr.String())
	}
	code, _, errs := egress(t, "", "--socket", pub, "check", "127.0.0.1:80")
	if code != 3 || !strings.HasPrefix(errs, "egress refused: 127.0.0.1 is a loopback address") {
		t.Errorf("public activated socket: exit %d, %q", code, errs)
	}
	// The local handle gets past the address class and meets the
	// listener-owner rule: none is configured, so loopback stays closed.
	code, _, errs = egress(t, "", "--socket", loc, "check", "127.0.0.1:80")
	if code != 3 || !strings.Contains(errs, "no listener-owner check is configured") {
		t.Errorf("local activated socket: exit %d, %q; want refused by the unconfigured listener-owner check", code, errs)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM = %v; want clean (stderr %s)", err, stderr.String())
	}
	if _, err := os.Stat(pub); err != nil {
		t.Errorf("activated socket path removed by the switchboard: %v (systemd owns it)", err)
	}
}

func TestActivationRefusesWhatIsNotAUnixListener(t *testing.T) {
	dir := t.TempDir()
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tcpFile, _ := tcp.File()
	defer tcpFile.Close()
	defer tcp.Close()
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	regular, err := os.Open(filepath.Join(dir, "plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	conn1, conn2, err := socketpair()
	if err != nil {
		t.Fatal(err)
	}
	defer conn1.Close()
	defer conn2.Close()
	tests := []struct {
		name  string
		file  *os.File
		names string
		want  string
	}{
		{"tcp listener", tcpFile, "public", "not a unix socket"},
		{"regular file", regular, "public", "not a socket"},
		{"connected unix socket", conn1, "local", "not listening"},
		{"bad name", unixListenerFile(t, filepath.Join(dir, "x.sock")), "lan", "FileDescriptorName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := activated(t, []*os.File{tt.file}, tt.names, "")
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tt.want) {
				t.Errorf("switchboard with %s: %v %s; want a startup error containing %q", tt.name, err, out, tt.want)
			}
		})
	}
}

func socketpair() (*os.File, *os.File, error) {
	fds, err := testenv.SocketPair()
	if err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b"), nil
}

// cost runs f and reports what it cost process pid: the growth of its
// peak RSS and the CPU time it used.
func cost(t *testing.T, pid int, f func()) (peak int64, cpu time.Duration) {
	t.Helper()
	m0, err := bench.ProcMem(pid)
	if err != nil {
		t.Fatal(err)
	}
	c0, err := bench.ProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	f()
	m1, _ := bench.ProcMem(pid)
	c1, _ := bench.ProcCPU(pid)
	return m1.HWM - m0.HWM, c1 - c0
}

// rootHandle dials the switchboard's socket path and returns its root
// Handle; the connection closes with the test.
func rootHandle(t *testing.T, path string) schema.Handle {
	t.Helper()
	wc, err := wire.Dial(context.Background(), path, true)
	if err != nil {
		t.Fatal(err)
	}
	rc := wc.RPC(capnp.Client{}, nil)
	t.Cleanup(func() { _ = rc.Close() })
	h := schema.Handle(rc.Bootstrap(context.Background()))
	t.Cleanup(h.Release)
	return h
}

// stillServes checks that a new client of the switchboard is answered.
func stillServes(t *testing.T, r *running, url string) {
	t.Helper()
	h := rootHandle(t, r.local)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	port := url[strings.LastIndexByte(url, ':')+1:]
	f, release := h.Check(ctx, func(p schema.Handle_check_Params) error {
		tg, err := p.NewTarget()
		if err != nil {
			return err
		}
		_ = tg.SetScheme("http")
		_ = tg.SetHost("127.0.0.1")
		var n int
		for _, c := range port {
			n = 10*n + int(c-'0')
		}
		tg.SetPort(uint16(n))
		return nil
	})
	defer release()
	res, err := f.Struct()
	if err != nil {
		t.Fatalf("another client after the attack: %v", err)
	}
	if d, _ := res.Decision(); !d.Allow() {
		reason, _ := d.Reason()
		t.Fatalf("another client after the attack was refused: %s", reason)
	}
}

// TestAttackAliasedUnservedMessages: a client sends obsoleteSave messages
// of 536 bytes whose object is a DAG and reads nothing. go-capnp answered
// each with its 24 MiB deep copy, queued for a client that never took it.
// The switchboard ends the connection at the first, with a warning that
// says why, grows by less than 16 MiB, and serves the next client.
func TestAttackAliasedUnservedMessages(t *testing.T) {
	r := startSwitchboard(t, nil)
	web := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer web.Close()
	var msgs []*capnp.Message
	boot, err := amplify.Bootstrap()
	if err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, boot)
	for i := 0; i < 8; i++ {
		m, err := amplify.ObsoleteSave()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	b, err := amplify.Frames(msgs...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", r.local)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ended error
	peak, cpu := cost(t, r.cmd.Process.Pid, func() {
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write(b) // it may end the connection before all is written
		time.Sleep(time.Second)
		// Only now does the client read: the end of the connection,
		// not 8 copies of 24 MiB.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64<<10)
		read := 0
		for {
			n, err := c.Read(buf)
			read += n
			if err != nil {
				ended = err
				break
			}
		}
		if read > 64<<10 {
			t.Errorf("the client was sent %d bytes for its %d", read, len(b))
		}
	})
	t.Logf("the switchboard's peak RSS grew by %d KiB; it used %s of CPU", peak>>10, cpu)
	if errors.Is(ended, os.ErrDeadlineExceeded) {
		t.Errorf("the connection was kept: %v", ended)
	}
	if peak > 16<<20 {
		t.Errorf("the switchboard's peak RSS grew by %d MiB; want under 16 MiB", peak>>20)
	}
	waitLog(t, r, "does not serve")
	stillServes(t, r, web.URL)
}

// waitLog waits for the switchboard's log to hold want.
func waitLog(t *testing.T, r *running, want string) {
	t.Helper()
	testenv.WaitFor(t, 5*time.Second, func() error {
		if !strings.Contains(r.stderr.String(), want) {
			return fmt.Errorf("the switchboard's log does not say %q:\n%s", want, r.stderr.String())
		}
		return nil
	})
}

// TestAttackHeaderLists: request() and webSocket() with headers as a list
// of four million empty structs (a call of 300 bytes) made the switchboard
// loop over every one before deciding anything: 2.3 s of CPU and 450 MiB
// a call. Each is now refused before any loop, with a reason; so is a
// list longer than schema.MaxHeaders. The switchboard grows by less than
// 32 MiB and uses under a second for ten calls, and serves the next
// client.
func TestAttackHeaderLists(t *testing.T) {
	r := startSwitchboard(t, nil)
	web := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer web.Close()
	h := rootHandle(t, r.local)
	tooMany := func(seg *capnp.Segment) (schema.Header_List, error) {
		l, err := schema.NewHeader_List(seg, schema.MaxHeaders+1)
		for i := 0; i < l.Len(); i++ {
			_ = l.At(i).SetName("X-A")
			_ = l.At(i).SetValue("b")
		}
		return l, err
	}
	ws := "ws" + strings.TrimPrefix(web.URL, "http")
	calls := []struct {
		name    string
		call    func(context.Context, schema.Handle, string, amplify.Headers) error
		url     string
		headers amplify.Headers
	}{
		{"request with empty structs", amplify.Request, web.URL, amplify.EmptyHeaders(4 << 20)},
		{"webSocket with empty structs", amplify.WebSocket, ws, amplify.EmptyHeaders(4 << 20)},
		{"request with too many headers", amplify.Request, web.URL, tooMany},
		{"webSocket with too many headers", amplify.WebSocket, ws, tooMany},
	}
	for _, tt := range calls {
		t.Run(tt.name, func(t *testing.T) {
			peak, cpu := cost(t, r.cmd.Process.Pid, func() {
				for i := 0; i < 10; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := tt.call(ctx, h, tt.url, tt.headers)
					cancel()
					if err == nil {
						t.Fatalf("call %d was not refused", i)
					}
					if i == 0 {
						t.Logf("refused: %v", err)
					}
				}
			})
			t.Logf("ten calls: the switchboard's peak RSS grew by %d KiB; it used %s of CPU", peak>>10, cpu)
			if peak > 32<<20 {
				t.Errorf("the switchboard's peak RSS grew by %d MiB; want under 32 MiB", peak>>20)
			}
			if cpu > time.Second {
				t.Errorf("ten calls used %s of the switchboard's CPU; want under a second", cpu)
			}
		})
	}
	waitLog(t, r, "headers")
	stillServes(t, r, web.URL)
}

// TestOriginReachesOwnerCheck: a service of toybox's user, outside toybox's
// tree, is reachable by a vat's handle only for an address its owner typed;
// the same address in a grant its manifest wrote (origin "manifest") is
// refused by the listener-owner check.
func TestOriginReachesOwnerCheck(t *testing.T) {
	testenv.RequireRoot(t)
	const toyboxUID = 65534
	port := testenv.ListenAs(t, toyboxUID) // a service of toybox's user, outside its tree

	r := startSwitchboard(t, map[string]any{"owner": map[string]any{
		"toyboxUID":  toyboxUID,
		"ownRoots":   []string{t.TempDir()},
		"dockerHost": "unix:///nonexistent/docker.sock",
	}})
	target := fmt.Sprintf("127.0.0.1:%d", port)
	tests := []struct {
		name       string
		constrain  []string
		wantCode   int
		wantReason string
	}{
		{"typed by the owner", []string{`{"vat":"alice"}`}, 0, ""},
		{"written by the manifest", []string{`{"vat":"alice","origin":"manifest"}`}, 3, "never a manifest default"},
		{"a vat cannot shed origin", []string{`{"vat":"alice","origin":"manifest"}`, `{"host":"127.0.0.1"}`}, 3, "never a manifest default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var args []string
			for _, c := range tt.constrain {
				args = append(args, "--constrain", c)
			}
			args = append([]string{"--socket", r.local}, append(args, "check", target)...)
			code, out, errs := egress(t, "", args...)
			refusedRight := tt.wantCode == 0 || strings.HasPrefix(errs, "egress refused: ") && strings.Contains(errs, tt.wantReason)
			if code != tt.wantCode || !refusedRight {
				t.Fatalf("check %s with %v: exit %d, stdout %q, stderr %q; want exit %d", target, tt.constrain, code, out, errs, tt.wantCode)
			}
			t.Logf("%s: %s%s", tt.name, strings.TrimSpace(out), strings.TrimSpace(errs))
		})
	}
}

// TestTenThousandConnectionsRSS holds 10,000 granted connections open in
// the switchboard (the client takes each handed-over socket, then drops its
// copy; the switchboard's duplicate keeps the connection up) and checks the
// switchboard's resident memory stays within 64 MiB.
func TestTenThousandConnectionsRSS(t *testing.T) {
	r := startSwitchboard(t, map[string]any{"limits": map[string]any{"conns": 20000}})
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted []net.Conn
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted = append(accepted, c)
		}
	}()
	defer func() {
		_ = l.Close()
		<-acceptDone
		for _, c := range accepted {
			_ = c.Close()
		}
	}()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	ctx := context.Background()
	wc, err := wire.Dial(ctx, r.local, true)
	if err != nil {
		t.Fatal(err)
	}
	conn := wc.RPC(capnp.Client{}, nil)
	defer conn.Close()
	root := schema.Handle(conn.Bootstrap(ctx))
	defer root.Release()
	const n = 10000
	for i := 0; i < n; i++ {
		f, release := root.Connect(ctx, func(p schema.Handle_connect_Params) error {
			tg, err := p.NewTarget()
			if err != nil {
				return err
			}
			_ = tg.SetScheme("tcp")
			_ = tg.SetHost("127.0.0.1")
			tg.SetPort(port)
			p.SetWantFd(true)
			return nil
		})
		res, err := f.Struct()
		if err != nil {
			release()
			t.Fatalf("connect %d: %v", i, err)
		}
		file, err := wc.TakeFD(res.Fd())
		release()
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		_ = file.Close()
	}
	rss := vmRSS(t, r.cmd.Process.Pid)
	t.Logf("switchboard RSS with %d connections held: %.1f MiB", n, float64(rss)/(1<<20))
	if rss > 64<<20 {
		t.Errorf("RSS = %d bytes; want <= 64 MiB", rss)
	}
}

func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

func TestEgressWebSocketAndHTTPS(t *testing.T) {
	ws := httptest.NewServer(websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil }, // no Origin check
		Handler:   func(c *websocket.Conn) { _, _ = io.Copy(c, c) },
	})
	defer ws.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "over tls")
	}))
	defer tlsSrv.Close()
	caPath := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startSwitchboard(t, map[string]any{"rootCAs": caPath})
	r.dns.Set("ws.test", netip.MustParseAddr("127.0.0.1"))
	r.dns.Set("example.com", netip.MustParseAddr("127.0.0.1"))
	wsPort := ws.Listener.Addr().(*net.TCPAddr).Port
	tlsPort := tlsSrv.Listener.Addr().(*net.TCPAddr).Port

	code, out, errs := egress(t, "one\ntwo\n", "--socket", r.local, "connect", fmt.Sprintf("ws://ws.test:%d/", wsPort))
	if code != 0 || !strings.Contains(out, "one\n") || !strings.Contains(out, "two\n") {
		t.Errorf("ws connect: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = egress(t, "x\n", "--socket", r.public, "connect", fmt.Sprintf("ws://ws.test:%d/", wsPort))
	if code != 3 || !strings.HasPrefix(errs, "egress refused: ws.test resolves to 127.0.0.1") {
		t.Errorf("public ws connect: exit %d, stderr %q", code, errs)
	}
	code, out, errs = egress(t, "", "--socket", r.local, "fetch", fmt.Sprintf("https://example.com:%d/", tlsPort))
	if code != 0 || out != "over tls" {
		t.Errorf("https fetch with rootCAs: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
