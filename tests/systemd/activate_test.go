//go:build linux

package systemd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"golang.org/x/sys/unix"

	"toybox/schema"
	"toybox/schema/wire"
	"toybox/tests/testenv"
)

// readyTimeout bounds how long a binary may take from its first connection
// to READY=1.
const readyTimeout = 30 * time.Second

// notifyMsg is one datagram on the notify socket and who sent it.
type notifyMsg struct {
	pid  int32
	text string
}

// notifySocket is a real NOTIFY_SOCKET: a unixgram socket with SO_PASSCRED,
// so each message carries the sender's pid as the kernel saw it (systemd's
// NotifyAccess=main checks exactly that).
type notifySocket struct {
	path string
	msgs chan notifyMsg
}

func listenNotify(t testing.TB, dir string) *notifySocket {
	t.Helper()
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listening on the notify socket: %v", err)
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}); err != nil || serr != nil {
		t.Fatalf("SO_PASSCRED: %v %v", err, serr)
	}
	n := &notifySocket{path: path, msgs: make(chan notifyMsg, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
		for {
			nb, noob, _, _, err := conn.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			m := notifyMsg{pid: -1, text: string(buf[:nb])}
			if cmsgs, err := unix.ParseSocketControlMessage(oob[:noob]); err == nil {
				for _, c := range cmsgs {
					if cred, err := unix.ParseUnixCredentials(&c); err == nil {
						m.pid = cred.Pid
					}
				}
			}
			select {
			case n.msgs <- m:
			default:
			}
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return n
}

// waitReady waits for READY=1 from pid, failing on a timeout, on READY=1
// from any other process, or when the process exits first.
func (n *notifySocket) waitReady(t testing.TB, p *activated) {
	t.Helper()
	deadline := time.After(readyTimeout)
	for {
		select {
		case m := <-n.msgs:
			lines := strings.Split(m.text, "\n")
			for _, l := range lines {
				if l != "READY=1" {
					continue
				}
				if int(m.pid) != p.pid() {
					t.Fatalf("READY=1 came from pid %d; want the main process %d (NotifyAccess=main would ignore it)", m.pid, p.pid())
				}
				return
			}
			t.Logf("%s notified %q", p.name, m.text)
		case <-p.exited:
			t.Fatalf("%s exited before READY=1: %v\n%s", p.name, p.err, p.out.String())
		case <-deadline:
			t.Fatalf("no READY=1 from %s within %v\n%s", p.name, readyTimeout, p.out.String())
		}
	}
}

// listen is one -l of systemd-socket-activate and the name it gets.
type listen struct{ addr, name string }

type lockedBuffer = testenv.Buffer

// activated is a binary started under systemd-socket-activate.
type activated struct {
	name   string
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
	err    error
}

func (a *activated) pid() int { return a.cmd.Process.Pid }

// startActivated runs argv under systemd-socket-activate with one -l and
// --fdname per listen, exactly as a socket unit's ListenStream= and
// FileDescriptorName= pass them, and env set with -E (systemd-socket-activate
// passes nothing else of ours). systemd-socket-activate execs the program in
// place on the first connection, so the program's pid is the one started
// here. The process gets SIGTERM at cleanup.
func startActivated(t testing.TB, name string, ls []listen, env []string, argv ...string) *activated {
	t.Helper()
	sa, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		testenv.Unavailable(t, "systemd-socket-activate is not installed (apt-get install systemd)")
	}
	var args []string
	for _, l := range ls {
		args = append(args, "-l", l.addr, "--fdname="+l.name)
	}
	for _, e := range env {
		args = append(args, "-E", e)
	}
	args = append(args, argv...)
	a := &activated{name: name, cmd: exec.Command(sa, args...), out: &lockedBuffer{}, exited: make(chan struct{})}
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { a.err = a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
		case <-time.After(20 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.exited
			t.Errorf("%s did not stop within 20s of SIGTERM", name)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, a.out.String())
		}
	})
	return a
}

// trigger makes the first connection, which is what makes
// systemd-socket-activate exec the program, and closes it.
func trigger(t testing.TB, a *activated, network, addr string) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, func() error {
		c, err := net.Dial(network, addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-a.exited:
			t.Fatalf("%s exited: %v\n%s", a.name, a.err, a.out.String())
		default:
		}
		return fmt.Errorf("systemd-socket-activate never listened on %s %s: %w\n%s", network, addr, err, a.out.String())
	})
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// unitArgs returns a service's ExecStart arguments (after the binary) with
// each of the unit's paths replaced by a test path.
func unitArgs(t testing.TB, unitName string, replace map[string]string) []string {
	t.Helper()
	fields := strings.Fields(readUnit(t, unitName).get("Service", "ExecStart"))
	if len(fields) == 0 {
		t.Fatalf("%s has no ExecStart", unitName)
	}
	args := fields[1:]
	for i, a := range args {
		for from, to := range replace {
			a = strings.ReplaceAll(a, from, to)
		}
		args[i] = a
	}
	return args
}

// switchboardRig is a switchboard started the way switchboard.socket and
// switchboard.service start it, with paths moved into a test directory.
type switchboardRig struct {
	proc          *activated
	public, local string
}

func startSwitchboard(t testing.TB, notify *notifySocket) *switchboardRig {
	t.Helper()
	bin := binaries(t)
	dir := t.TempDir()
	sock := readUnit(t, "switchboard.socket")
	svc := readUnit(t, "switchboard.service")
	runtimeDir := "/run/" + svc.get("Service", "RuntimeDirectory")
	testRuntime := filepath.Join(dir, "runtime")
	if err := os.Mkdir(testRuntime, 0o700); err != nil {
		t.Fatal(err)
	}
	public := filepath.Join(dir, "public.sock")
	args := unitArgs(t, "switchboard.service", map[string]string{runtimeDir: testRuntime})
	local := strings.TrimPrefix(flagValue(args, "--listen"), "local=")
	if !strings.HasPrefix(local, testRuntime+"/") {
		t.Fatalf("switchboard.service --listen %q is not inside its RuntimeDirectory %s", flagValue(args, "--listen"), runtimeDir)
	}
	env := []string{}
	if notify != nil {
		env = append(env, "NOTIFY_SOCKET="+notify.path)
	}
	// The quickstart round's echo server is a root process on loopback,
	// which the listener-owner check rightly refuses to every vat; the
	// units' own (checked) behaviour is run in the systemd container test.
	args = append(args, "--loopback", "unchecked")
	p := startActivated(t, "switchboard",
		[]listen{{public, sock.get("Socket", "FileDescriptorName")}}, env,
		append([]string{filepath.Join(bin, "switchboard")}, args...)...)
	trigger(t, p, "unix", public)
	return &switchboardRig{proc: p, public: public, local: local}
}

// handleAt bootstraps the Handle served on a switchboard socket. The caller
// must call the returned release.
func handleAt(t testing.TB, path string) (schema.Handle, func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := wire.Dial(ctx, path, true)
	if err != nil {
		t.Fatalf("dialling %s: %v", path, err)
	}
	conn := c.RPC(capnp.Client{}, nil)
	// The bootstrap outlives ctx: cancelling the context given to
	// Bootstrap abandons the capability.
	h := schema.Handle(conn.Bootstrap(context.Background()))
	if err := h.Resolve(ctx); err != nil {
		h.Release()
		conn.Close()
		t.Fatalf("bootstrapping the handle at %s: %v", path, err)
	}
	return h, func() { h.Release(); conn.Close() }
}

func describeNetwork(t testing.TB, h schema.Handle) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, release := h.Describe(ctx, nil)
	defer release()
	res, err := f.Struct()
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	l, err := res.Labels()
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.Network()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func check(t testing.TB, h schema.Handle, host string, port uint16) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, release := h.Check(ctx, func(p schema.Handle_check_Params) error {
		tg, err := p.NewTarget()
		if err != nil {
			return err
		}
		if err := tg.SetScheme("tcp"); err != nil {
			return err
		}
		if err := tg.SetHost(host); err != nil {
			return err
		}
		tg.SetPort(port)
		return nil
	})
	defer release()
	res, err := f.Struct()
	if err != nil {
		t.Fatalf("check %s:%d: %v", host, port, err)
	}
	d, err := res.Decision()
	if err != nil {
		t.Fatal(err)
	}
	reason, _ := d.Reason()
	return d.Allow(), reason
}

// TestSwitchboardActivated starts the switchboard as its units do: the
// public socket activated with the name "public", the local one bound by the
// service in its 0700 runtime directory. It must send READY=1 from its main
// process, then serve a public Handle on the activated fd and a local one on
// the socket it bound, with the mode the unit asks for.
func TestSwitchboardActivated(t *testing.T) {
	notify := listenNotify(t, t.TempDir())
	sb := startSwitchboard(t, notify)
	notify.waitReady(t, sb.proc)

	pub, releasePub := handleAt(t, sb.public)
	defer releasePub()
	if got := describeNetwork(t, pub); got != "public" {
		t.Errorf("the fd named public serves network %q; want public", got)
	}
	loc, releaseLoc := handleAt(t, sb.local)
	defer releaseLoc()
	if got := describeNetwork(t, loc); got != "local" {
		t.Errorf("the socket bound by --listen local= serves network %q; want local", got)
	}
	fi, err := os.Stat(sb.local)
	if err != nil {
		t.Fatal(err)
	}
	args := unitArgs(t, "switchboard.service", nil)
	if want := flagValue(args, "--mode"); want != "" && fmt.Sprintf("%04o", fi.Mode().Perm()) != want {
		t.Errorf("local socket mode = %04o; want %s (switchboard.service --mode)", fi.Mode().Perm(), want)
	}
	// The public handle never reaches this host's loopback.
	if ok, reason := check(t, pub, "127.0.0.1", 22); ok {
		t.Errorf("public handle admits 127.0.0.1:22 (%s); want refused", reason)
	} else if reason == "" {
		t.Errorf("public handle refused 127.0.0.1:22 without a reason")
	}
}

// toyboxRig is a supervisor started the way toybox.socket,
// toybox-admin.socket and toybox.service start it.
type toyboxRig struct {
	proc        *activated
	http, admin string // 127.0.0.1:port and the admin socket path
	state       string
}

// startToybox starts toybox serve with the unit's arguments, its state in
// a test directory, holding the switchboard socket at sbPath.
func startToybox(t testing.TB, notify *notifySocket, sbPath string) *toyboxRig {
	t.Helper()
	tb := launchToybox(t, notify, sbPath, "")
	trigger(t, tb.proc, "unix", tb.admin)
	return tb
}

// launchToybox is startToybox before the first connection. adminAddr, when
// set, is where the socket named as toybox-admin.socket names it listens
// instead of a unix socket in the test directory (a TCP address: what toybox
// must refuse).
func launchToybox(t testing.TB, notify *notifySocket, sbPath, adminAddr string) *toyboxRig {
	t.Helper()
	bin := binaries(t)
	dir := t.TempDir()
	// A root supervisor runs its walls as uid 65534, which must be able to
	// traverse to the state directory; t.TempDir's directories are 0700.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(dir, "state")
	admin := filepath.Join(dir, "admin.sock")
	if adminAddr != "" {
		admin = adminAddr
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	svc := readUnit(t, "toybox.service")
	unitArgsRaw := strings.Fields(svc.get("Service", "ExecStart"))[1:]
	args := unitArgs(t, "toybox.service", map[string]string{
		flagValue(unitArgsRaw, "--state"):       state,
		flagValue(unitArgsRaw, "--switchboard"): sbPath,
		flagValue(unitArgsRaw, "--entry"):       filepath.Join(bin, "toybox-entry"),
	})
	env := []string{}
	if notify != nil {
		env = append(env, "NOTIFY_SOCKET="+notify.path)
	}
	httpName := readUnit(t, "toybox.socket").get("Socket", "FileDescriptorName")
	adminName := readUnit(t, "toybox-admin.socket").get("Socket", "FileDescriptorName")
	p := startActivated(t, "toybox",
		[]listen{{httpAddr, httpName}, {admin, adminName}}, env,
		append([]string{filepath.Join(bin, "toybox")}, args...)...)
	return &toyboxRig{proc: p, http: httpAddr, admin: admin, state: state}
}

// adminClient talks HTTP over the admin unix socket.
func adminClient(path string) *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}
}

func do(t testing.TB, c *http.Client, method, url string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}

// TestToyboxActivated starts the supervisor with its http and admin fds
// named as toybox.socket and toybox-admin.socket name them. It must send
// READY=1 from its main process, then answer on both.
func TestToyboxActivated(t *testing.T) {
	sb := startSwitchboard(t, nil)
	notify := listenNotify(t, t.TempDir())
	tb := startToybox(t, notify, sb.public)
	notify.waitReady(t, tb.proc)

	if code, body := do(t, adminClient(tb.admin), http.MethodGet, "http://toybox/", nil); code != http.StatusOK {
		t.Errorf("GET / on the admin fd = %d %q; want 200 (the list of vats)", code, body)
	}
	if code, body := do(t, http.DefaultClient, http.MethodGet, "http://"+tb.http+"/nosuchvat/", nil); code != http.StatusNotFound || !strings.Contains(body, "nosuchvat") {
		t.Errorf("GET /nosuchvat/ on the http fd = %d %q; want 404 naming the vat", code, body)
	}
	// The http fd is the public side: it must not serve the admin API.
	if code, _ := do(t, http.DefaultClient, http.MethodPut, "http://"+tb.http+"/alice", strings.NewReader("#!/bin/sh\n")); code == http.StatusCreated || code == http.StatusOK {
		t.Errorf("PUT /alice on the http fd = %d; the public socket must never install", code)
	}
}

// TestToyboxRefusesTCPAdmin: the fd named "admin" must be a unix socket.
// Started with it on TCP (systemd-socket-activate -l 127.0.0.1:PORT
// --fdname=admin, or a ListenStream= edited to a port), toybox served the
// admin API, installing code, to every local user; it must refuse to start,
// naming the fd, its name and what it is.
func TestToyboxRefusesTCPAdmin(t *testing.T) {
	notify := listenNotify(t, t.TempDir())
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tb := launchToybox(t, notify, filepath.Join(t.TempDir(), "switchboard.sock"), admin)
	trigger(t, tb.proc, "tcp", admin)
	deadline := time.After(readyTimeout)
	for {
		select {
		case <-tb.proc.exited:
			want := "activated fd 4 (admin): not a unix socket (domain 2, AF_INET)"
			if tb.proc.err == nil || !strings.Contains(tb.proc.out.String(), want) {
				t.Fatalf("toybox with its admin fd on TCP exited: %v\n%s\nwant a failure saying %q", tb.proc.err, tb.proc.out.String(), want)
			}
			return
		case m := <-notify.msgs:
			if !strings.Contains(m.text, "READY=1") {
				continue
			}
			code, body := do(t, &http.Client{Timeout: 10 * time.Second}, http.MethodGet, "http://"+admin+"/", nil)
			t.Fatalf("toybox started with its admin fd on TCP: GET / on %s = %d %q", admin, code, body)
		case <-deadline:
			t.Fatalf("toybox with its admin fd on TCP neither exited nor became ready within %v\n%s", readyTimeout, tb.proc.out.String())
		}
	}
}

// echoServer accepts TCP connections on addr and answers each line with
// "pong LINE". It returns its port.
func echoServer(t testing.TB, host string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("echo server on %s: %v", host, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				buf := make([]byte, 256)
				n, err := c.Read(buf)
				if err != nil {
					return
				}
				fmt.Fprintf(c, "pong %s\n", strings.TrimSpace(string(buf[:n])))
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

var (
	probeOnce sync.Once
	probeData []byte
	probeErr  error
)

// buildProbeVat builds tests/systemd/probevat as a static binary, once per
// test process.
func buildProbeVat(t testing.TB) []byte {
	t.Helper()
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "toybox-probevat-")
		if err != nil {
			probeErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "probevat")
		cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", out, "./tests/systemd/probevat")
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			probeErr = fmt.Errorf("building probevat: %w\n%s", err, b)
			return
		}
		probeData, probeErr = os.ReadFile(out)
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return probeData
}

// TestQuickstartActivated is the README's quickstart round against both
// binaries started as the units start them: install a vat over the admin
// socket, reach it over http, and see its egress allowed within its grant
// and refused outside it — through its wall, toybox-entry's proxy, the
// supervisor's constrained handle and the switchboard.
//
// The toybox here holds the switchboard's local socket, not the public one
// the units give it: this machine has no internet, so the allowed target is
// an echo server on this host, which only a local handle may reach (the JS
// original's tests did the same). TestSwitchboardActivated shows the public
// fd refusing loopback.
func TestQuickstartActivated(t *testing.T) {
	testenv.RequireBwrap(t)
	sb := startSwitchboard(t, nil)
	notify := listenNotify(t, t.TempDir())
	tb := startToybox(t, notify, sb.local)
	notify.waitReady(t, tb.proc)
	quickstart(t, tb.admin, "http://"+tb.http, egressHost)
}

// egressHost is where the quickstart's echo server listens.
const egressHost = "127.0.0.1"

// quickstart runs the round against an admin socket and an http base URL.
func quickstart(t *testing.T, adminPath, base, host string) {
	t.Helper()
	port := echoServer(t, host)
	other := echoServer(t, host)
	admin := adminClient(adminPath)
	probe := buildProbeVat(t)

	grant := fmt.Sprintf(`{"host":%q,"port":%d}`, host, port)
	code, body := do(t, admin, http.MethodPut, "http://toybox/probe?egress="+url.QueryEscape(grant), bytes.NewReader(probe))
	if code != http.StatusCreated {
		_, logs := do(t, admin, http.MethodGet, "http://toybox/probe/logs", nil)
		t.Fatalf("PUT /probe?egress=%s = %d %s; want 201\nthe vat's logs:\n%s", grant, code, body, logs)
	}
	t.Logf("installed: %s", body)

	var hello string
	testenv.WaitFor(t, 30*time.Second, func() error {
		c, b := do(t, http.DefaultClient, http.MethodGet, base+"/probe/", nil)
		if c != http.StatusOK {
			return fmt.Errorf("GET /probe/ = %d %q; want 200 within 30s", c, b)
		}
		hello = b
		return nil
	})
	if !strings.Contains(hello, "probevat: hello") {
		t.Errorf("GET /probe/ = %q; want the probe's hello", hello)
	}

	tests := []struct {
		name     string
		target   string
		wantCode int
		want     string
	}{
		{"granted target", fmt.Sprintf("%s:%d", host, port), http.StatusOK, "got: pong ping"},
		{"other port", fmt.Sprintf("%s:%d", host, other), http.StatusBadGateway, "egress refused: port " + strconv.Itoa(other) + " not granted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, b := do(t, http.DefaultClient, http.MethodGet, base+"/probe/?connect="+url.QueryEscape(tt.target), nil)
			t.Logf("GET /probe/?connect=%s = %d %s", tt.target, c, strings.TrimSpace(b))
			if c != tt.wantCode || !strings.Contains(b, tt.want) {
				t.Errorf("GET /probe/?connect=%s = %d %q; want %d containing %q", tt.target, c, b, tt.wantCode, tt.want)
			}
		})
	}
}
