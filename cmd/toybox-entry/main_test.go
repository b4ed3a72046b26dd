//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"capnproto.org/go/capnp/v3"
	"golang.org/x/sys/unix"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/switchboard"
	"toybox/tests/testenv"
	"toybox/vat/grant"
	"toybox/vat/wall"
	"toybox/vat/wall/entry"
)

// probeEnv names what the re-executed test binary does inside the wall.
const probeEnv = "ENTRY_PROBE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(probeEnv); mode != "" {
		os.Exit(probe(mode, os.Getenv("PROBE_ARG")))
	}
	var mu sync.Mutex
	var leaks []string
	capnp.SetClientLeakFunc(func(msg string) {
		mu.Lock()
		leaks = append(leaks, msg)
		mu.Unlock()
	})
	code := m.Run()
	runtime.GC()
	time.Sleep(300 * time.Millisecond) // go-capnp finishes calls 250ms late
	runtime.GC()
	mu.Lock()
	if len(leaks) > 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "capability leaks:\n%s\n", strings.Join(leaks, "\n"))
		code = 1
	}
	mu.Unlock()
	os.Exit(code)
}

// probe is the app inside the wall. It speaks to the proxy by hand (Go's
// own proxy support skips loopback targets) and prints what it saw.
func probe(mode, arg string) int {
	proxy := os.Getenv("HTTP_PROXY")
	switch mode {
	case "lock":
		// The entry's own filter (lockSelf, as the launcher installs it):
		// a socket it already holds still carries bytes, but it can be
		// neither disconnected and connected again, nor connected by a
		// send (MSG_FASTOPEN), nor bound, nor made to listen, and no
		// socket can be made.
		c, err := net.Dial("tcp4", arg)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		raw, _ := c.(*net.TCPConn).SyscallConn()
		// lockSelf filters the calling thread alone (the launcher locks
		// the entry before its runtime starts any other): every call
		// below must be made on this thread.
		runtime.LockOSThread()
		// A socket made before the lock and never connected: a send
		// with MSG_FASTOPEN would connect it without connect().
		fresh, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		ap, err := netip.ParseAddrPort(arg)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		to := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
		if err := lockSelf(); err != nil {
			fmt.Println("LOCK-ERR", err)
			return 1
		}
		_ = raw.Control(func(fd uintptr) {
			var unspec [16]byte
			_, _, e := unix.Syscall(unix.SYS_CONNECT, fd, uintptr(unsafe.Pointer(&unspec[0])), uintptr(len(unspec)))
			fmt.Println("CONNECT-UNSPEC", e)
			fmt.Println("BIND", unix.Bind(int(fd), &unix.SockaddrInet4{}))
			fmt.Println("LISTEN", unix.Listen(int(fd), 1))
		})
		fmt.Println("FASTOPEN-SENDTO", unix.Sendto(fresh, []byte("x"), unix.MSG_FASTOPEN|unix.MSG_DONTWAIT, to))
		_, err = unix.SendmsgN(fresh, []byte("x"), nil, to, unix.MSG_FASTOPEN|unix.MSG_DONTWAIT)
		fmt.Println("FASTOPEN-SENDMSG", err)
		fmt.Println("FASTOPEN-SENDMMSG", sendmmsgFastOpen(fresh, to))
		st, _ := unix.GetsockoptTCPInfo(fresh, unix.IPPROTO_TCP, unix.TCP_INFO)
		fmt.Println("FASTOPEN-STATE", st.State) // 7: TCP_CLOSE, never connected
		_, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
		fmt.Println("SOCKET", err)
		_, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		fmt.Println("SOCKETPAIR", err)
		var params [120]byte
		_, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
		fmt.Println("IO_URING", e)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, "still carries")
		got := make([]byte, len("still carries"))
		_, err = io.ReadFull(c, got)
		fmt.Printf("ECHO %s %v\n", got, err)
	case "filters":
		// How many seccomp filters pid 1 (the entry) and the app have.
		// The entry locks itself once the app has started, so its count
		// is read until it is no longer the app's (for at most 5 s).
		filters := func(who string) string {
			b, err := os.ReadFile("/proc/" + who + "/status")
			if err != nil {
				return "ERROR " + err.Error()
			}
			for _, line := range strings.Split(string(b), "\n") {
				if n, ok := strings.CutPrefix(line, "Seccomp_filters:"); ok {
					return strings.TrimSpace(n)
				}
			}
			return "none"
		}
		self := filters("self")
		entry := filters("1")
		for deadline := time.Now().Add(5 * time.Second); entry == self && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			entry = filters("1")
		}
		fmt.Printf("FILTERS 1 %s\nFILTERS self %s\n", entry, self)
	case "signal1":
		// Once the entry serves (a refused CONNECT answered), signal it
		// as the runtime would crash on, then check it still serves.
		ask := func() string {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(wall.DefaultProxyPort), time.Second)
			if err != nil {
				return "DIAL-ERR " + err.Error()
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			return strings.TrimSpace(line)
		}
		fmt.Println("BEFORE", ask())
		time.Sleep(100 * time.Millisecond)
		for _, s := range []syscall.Signal{syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGSYS, syscall.SIGILL, syscall.SIGSTKFLT, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE} {
			fmt.Println("KILL", s, syscall.Kill(1, s))
		}
		time.Sleep(200 * time.Millisecond)
		fmt.Println("AFTER", ask())
	case "env":
		fmt.Printf("HTTP_PROXY=%q\n", proxy)
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(wall.DefaultProxyPort), time.Second)
		if err != nil {
			fmt.Println("DIAL-ERR", err)
		} else {
			c.Close()
			fmt.Println("DIAL-OK")
		}
	case "connect":
		target, msg, _ := strings.Cut(arg, "|")
		c, err := proxyConn(proxy)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		if resp.StatusCode != 200 {
			report(resp)
			return 0
		}
		// A 200 to CONNECT has no body: the tunnel follows.
		fmt.Printf("STATUS %d\n", resp.StatusCode)
		io.WriteString(c, msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil {
			fmt.Println("ERROR reading the echo:", err)
			return 1
		}
		fmt.Printf("ECHO %s\n", got)
	case "forward":
		target, msg, _ := strings.Cut(arg, "|")
		c, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		defer c.Close()
		io.WriteString(c, msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			fmt.Println("ERROR reading the echo:", err)
			return 1
		}
		fmt.Printf("ECHO %s\n", got)
	case "forwardget":
		// A GET of path straight to addr (a forwarded port), not through
		// the proxy: how a client reaches a loopback host NO_PROXY names.
		addr, path, _ := strings.Cut(arg, "|")
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		report(resp)
	case "forwardtls":
		// TLS straight to addr (a forwarded port), with SNI sni.
		addr, sni, _ := strings.Cut(arg, "|")
		tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		if err != nil {
			fmt.Println("TLS-ERROR", err)
			return 0
		}
		defer tc.Close()
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(tc, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
		b, _ := io.ReadAll(tc)
		if i := strings.Index(string(b), "\r\n\r\n"); i >= 0 {
			fmt.Printf("TLS-BODY %s\n", b[i+4:])
		}
	case "tls":
		// CONNECT to a TLS port, then speak TLS through the tunnel.
		target, sni, _ := strings.Cut(arg, "|")
		c, err := proxyConn(proxy)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		if resp.StatusCode != 200 {
			report(resp)
			return 0
		}
		fmt.Printf("STATUS %d\n", resp.StatusCode)
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			fmt.Println("TLS-ERROR", err)
			return 0
		}
		io.WriteString(tc, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
		b, _ := io.ReadAll(tc)
		if i := strings.Index(string(b), "\r\n\r\n"); i >= 0 {
			fmt.Printf("TLS-BODY %s\n", b[i+4:])
		}
	case "get", "raw", "rawclose":
		// get: a GET of the URL arg. raw: the request arg as given (\r\n
		// spelled out), for the proxy's parsing: bodies, framing, Host;
		// rawclose: the same, then the client's half of the connection
		// ends (a body cut short).
		req := strings.ReplaceAll(arg, `\r\n`, "\r\n")
		if mode == "get" {
			u, _ := url.Parse(arg)
			req = fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: probe\r\n\r\n", arg, u.Host)
		}
		c, err := proxyConn(proxy)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		defer c.Close()
		_, _ = io.WriteString(c, req)
		if mode == "rawclose" {
			_ = c.(*net.TCPConn).CloseWrite()
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		report(resp)
		fmt.Printf("CLOSE %v\n", resp.Close)
	case "rawfull":
		// The request arg as given (\r\n spelled out; "+64k" at its end
		// sends 64 KiB more after it, unread by the proxy); then the
		// whole answer: its head as it came, and its body's length.
		req := strings.ReplaceAll(arg, `\r\n`, "\r\n")
		extra := 0
		if r, ok := strings.CutSuffix(req, "+64k"); ok {
			req, extra = r, 64<<10
		}
		c, err := proxyConn(proxy)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		_, _ = io.WriteString(c, req)
		if extra > 0 {
			_, _ = c.Write(make([]byte, extra))
		}
		all, err := io.ReadAll(c)
		head, body, _ := strings.Cut(string(all), "\r\n\r\n")
		fmt.Printf("RAWHEAD %q\n", head)
		fmt.Printf("LEN %d %v\n", len(body), err)
	case "bulk", "bulkraw":
		// Upload n bytes (through a CONNECT tunnel, or straight for
		// bulkraw) to a sink that answers with the count; print the time.
		target, ns, _ := strings.Cut(arg, "|")
		n, _ := strconv.ParseInt(ns, 10, 64)
		var c net.Conn
		var err error
		if mode == "bulk" {
			c, err = proxyConn(proxy)
		} else {
			c, err = net.Dial("tcp", target)
		}
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		defer c.Close()
		secs, err := upload(c, target, n, mode == "bulk")
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		fmt.Printf("SECONDS %f\n", secs)
	default:
		fmt.Println("unknown probe", mode)
		return 2
	}
	return 0
}

// bufConn reads through a bufio.Reader that may hold bytes already read.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func proxyConn(proxy string) (net.Conn, error) {
	u, err := url.Parse(proxy)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("no proxy in HTTP_PROXY=%q", proxy)
	}
	return net.DialTimeout("tcp", u.Host, 5*time.Second)
}

func report(resp *http.Response) {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Printf("STATUS %d\n", resp.StatusCode)
	if ps := resp.Header.Get("Proxy-Status"); ps != "" {
		fmt.Printf("PROXY-STATUS %s\n", ps)
	}
	if len(body) > 0 {
		fmt.Printf("BODY %s\n", strings.TrimSpace(string(body)))
	}
}

// upload CONNECTs through c to target, sends n bytes, half-closes and
// waits for the sink's count. It returns the seconds the transfer took.
func upload(c net.Conn, target string, n int64, connect bool) (float64, error) {
	br := bufio.NewReader(c)
	if connect {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("CONNECT answered %s", resp.Status)
		}
	}
	buf := make([]byte, 256<<10)
	began := time.Now()
	for left := n; left > 0; {
		chunk := buf[:min(int64(len(buf)), left)]
		w, err := c.Write(chunk)
		if err != nil {
			return 0, err
		}
		left -= int64(w)
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("reading the sink's count: %w", err)
	}
	if got := strings.TrimSpace(line); got != strconv.FormatInt(n, 10) {
		return 0, fmt.Errorf("the sink counted %s bytes; sent %d", got, n)
	}
	return time.Since(began).Seconds(), nil
}

// --- the host side ---

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func binaries(t testing.TB) (entryPath, probePath string) {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "toybox-entry-test-")
		if buildErr != nil {
			return
		}
		_ = os.Chmod(buildDir, 0o755)
		out, err := exec.Command("go", append(append([]string{"build"}, testenv.EntryBuildFlags...), "-o", filepath.Join(buildDir, "toybox-entry"), "toybox/cmd/toybox-entry")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building toybox-entry: %w\n%s", err, out)
			return
		}
		self, err := os.Executable()
		if err != nil {
			buildErr = err
			return
		}
		buildErr = copyFile(self, filepath.Join(buildDir, "probe"))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "toybox-entry"), filepath.Join(buildDir, "probe")
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// startSwitchboard serves a real switchboard (network local, loopback not
// further judged) on a unix socket in dir.
func startSwitchboard(t testing.TB, dir string) string {
	t.Helper()
	srv, err := switchboard.New(switchboard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "switchboard.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ctx, "local", l, labels.Set{Network: labels.NetworkLocal})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = srv.Close()
	})
	return sock
}

// echoServer echoes every connection; sinkServer counts what it receives
// and answers with the count when the client half-closes.
func echoServer(t testing.TB) int {
	t.Helper()
	return testenv.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

func sinkServer(t testing.TB) int {
	t.Helper()
	return testenv.ServeTCP(t, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "%d\n", n)
	})
}

// walled is one vat in a real wall with a real grant.Vat over a real
// switchboard.
type walled struct {
	spec wall.Spec
	sock string
}

func newWalled(t testing.TB, id string, net wall.Net) *walled {
	t.Helper()
	testenv.RequireBwrap(t)
	entry, probeBin := binaries(t)
	root := t.TempDir()
	_ = os.Chmod(root, 0o755)
	_ = os.Chmod(filepath.Dir(root), 0o711)
	state := filepath.Join(root, "state")
	w := &walled{spec: wall.Spec{
		ID:         labels.VatID(id),
		Host:       wall.NewHost(),
		InstallDir: filepath.Join(state, "code", "abc"),
		DataDir:    filepath.Join(state, "data", id),
		RunDir:     filepath.Join(state, "run", id),
		StateDir:   state,
		Command:    []string{"./probe"},
		EntryPath:  entry,
		Net:        net,
		HostEnv:    []string{"PATH=/usr/bin:/bin"},
	}}
	for _, d := range []string{w.spec.InstallDir, w.spec.DataDir, w.spec.RunDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyFile(probeBin, filepath.Join(w.spec.InstallDir, "probe")); err != nil {
		t.Fatal(err)
	}
	w.sock = startSwitchboard(t, root)
	return w
}

// run starts the wall with grants, runs the probe in mode and returns its
// output.
func (w *walled) run(t testing.TB, grants []labels.Set, mode, arg string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u := grant.NewUpstream(grant.UpstreamConfig{Path: w.sock})
	defer u.Close()
	v, err := grant.NewVat(grant.VatConfig{ID: w.spec.ID, Grants: grants, Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Revoke()
	spec := w.spec
	spec.Env = map[string]string{probeEnv: mode, "PROBE_ARG": arg}
	spec.AppCap = serveVat(t, ctx, v.Serve)
	if !spec.Net.None {
		spec.EntryCap = serveVat(t, ctx, v.ServeEntry)
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	spec.Stdout, spec.Stderr = out, out
	p, err := wall.Start(ctx, spec, nil)
	if err != nil {
		t.Fatalf("wall.Start: %v", err)
	}
	werr := make(chan error, 1)
	go func() { werr <- p.Wait() }()
	select {
	case err = <-werr:
	case <-ctx.Done():
		_ = p.Stop(time.Second)
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("the probe did not finish; output:\n%s", b)
	}
	b, _ := os.ReadFile(out.Name())
	if err != nil {
		t.Logf("the wall ended with %v", err)
	}
	return string(b)
}

// serveVat serves a Vat (serve: its Serve, or ServeEntry for the entry's
// own connection) on one end of a socketpair and returns the other, for
// the wall.
func serveVat(t testing.TB, ctx context.Context, serve func(context.Context, *wire.Conn) error) *os.File {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine := os.NewFile(uintptr(fds[0]), "vat-server")
	nc, err := net.FileConn(mine)
	_ = mine.Close()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = serve(ctx, wire.NewConn(nc.(*net.UnixConn), false)) }()
	return os.NewFile(uintptr(fds[1]), "vat-client")
}

func want(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q; output:\n%s", w, out)
		}
	}
}

func TestShapeNone(t *testing.T) {
	w := newWalled(t, "none", wall.Net{None: true})
	out := w.run(t, nil, "env", "")
	want(t, out, `HTTP_PROXY=""`, "DIAL-ERR")
}

func TestShapeListedHost(t *testing.T) {
	echo := echoServer(t)
	other := echoServer(t)
	w := newWalled(t, "listed", wall.Net{})
	grants := []labels.Set{{Host: "127.0.0.1", Port: uint16(echo)}}
	tests := []struct {
		name  string
		arg   string
		wants []string
	}{
		{"the listed host:port", fmt.Sprintf("127.0.0.1:%d|hello through the wall", echo), []string{"STATUS 200", "ECHO hello through the wall"}},
		{"another port of the same host", fmt.Sprintf("127.0.0.1:%d|nope", other), []string{
			"STATUS 403", "PROXY-STATUS toybox-entry; error=destination_ip_prohibited; details=\"egress refused:", "BODY egress refused:",
		}},
		{"another host", fmt.Sprintf("127.0.0.2:%d|nope", echo), []string{"STATUS 403", "BODY egress refused:"}},
		{"a name that is not the listed address", fmt.Sprintf("localhost:%d|nope", echo), []string{"STATUS 403", "BODY egress refused:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want(t, w.run(t, grants, "connect", tt.arg), tt.wants...)
		})
	}
}

func TestShapeNoGrantRefusesWithReason(t *testing.T) {
	echo := echoServer(t)
	w := newWalled(t, "nogrant", wall.Net{})
	out := w.run(t, nil, "connect", fmt.Sprintf("127.0.0.1:%d|x", echo))
	want(t, out, "STATUS 403", "BODY egress refused: this vat has no egress grant", "error=destination_ip_prohibited")
}

func TestShapeInternet(t *testing.T) {
	echo := echoServer(t)
	w := newWalled(t, "internet", wall.Net{})
	internet := []labels.Set{{Scheme: "https", Port: 443, Network: labels.NetworkPublic}}
	tests := []struct {
		name string
		arg  string
	}{
		{"a loopback port", fmt.Sprintf("127.0.0.1:%d|x", echo)},
		{"loopback on 443", "127.0.0.1:443|x"},
		{"a private address on 443", "10.1.2.3:443|x"},
		{"the metadata address", "169.254.169.254:443|x"},
		{"a public address on port 80", "1.1.1.1:80|x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := w.run(t, internet, "connect", tt.arg)
			want(t, out, "STATUS 403", "BODY egress refused:", "PROXY-STATUS toybox-entry; error=destination_ip_prohibited")
		})
	}
}

func TestForwardedPort(t *testing.T) {
	echo := echoServer(t)
	w := newWalled(t, "forward", wall.Net{Forwards: []wall.Forward{{Port: 5432, Host: "127.0.0.1", TargetPort: uint16(echo)}}})
	out := w.run(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(echo)}}, "forward", "127.0.0.1:5432|through a forwarded port")
	want(t, out, "ECHO through a forwarded port")
}

// TestForwardedSchemes: a loopback host the owner listed with a scheme
// (http://127.0.0.1:port, https://localhost) is granted in that scheme
// alone, yet a client inside the wall reaches it straight at its forwarded
// port (NO_PROXY names loopback): plain HTTP goes out one request at a
// time, TLS with its ClientHello checked, as through the proxy.
func TestForwardedSchemes(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "forwarded answer for %s", r.URL.Path)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	t.Run("http", func(t *testing.T) {
		w := newWalled(t, "fwdhttp", wall.Net{Forwards: []wall.Forward{{Port: 8080, Host: "127.0.0.1", TargetPort: port}}})
		out := w.run(t, []labels.Set{{Scheme: "http", Host: "127.0.0.1", Port: port}}, "forwardget", "127.0.0.1:8080|/through-a-forward")
		want(t, out, "STATUS 200", "BODY forwarded answer for /through-a-forward")
	})
	t.Run("https", func(t *testing.T) {
		tlsServer(t)
		w := newWalled(t, "fwdtls", wall.Net{Forwards: []wall.Forward{{Port: 8443, Host: "localhost", TargetPort: 443}}})
		grant := []labels.Set{{Scheme: "https", Host: "localhost", Port: 443}}
		want(t, w.run(t, grant, "forwardtls", "127.0.0.1:8443|localhost"), "TLS-BODY secret over tls")
		out := w.run(t, grant, "forwardtls", "127.0.0.1:8443|evil.example")
		want(t, out, "TLS-ERROR")
		if strings.Contains(out, "TLS-BODY") {
			t.Errorf("a ClientHello naming another server got through a forward; output:\n%s", out)
		}
		// Plain HTTP to a host granted as https only is refused, with why.
		out = w.run(t, grant, "forwardget", "127.0.0.1:8443|/")
		want(t, out, "STATUS 403", "BODY egress refused:")
	})
}

func TestPlainHTTP(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	complete := map[string]string{} // path: a body the server read to its end
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("X-Seen-Path", r.URL.Path)
		if r.URL.Path == "/big" {
			_, _ = rw.Write(make([]byte, 4<<20))
			return
		}
		if r.URL.Path == "/framing" {
			fmt.Fprintf(rw, "te=%q cl=%d secret=%q keep=%q", r.TransferEncoding, r.ContentLength, r.Header.Get("X-Secret"), r.Header.Get("X-Keep"))
			return
		}
		if r.Method == http.MethodPost {
			b, err := io.ReadAll(r.Body)
			if err == nil {
				mu.Lock()
				complete[r.URL.Path] = string(b)
				mu.Unlock()
			}
			fmt.Fprintf(rw, "plain answer for %s: %d bytes %s, host %s", r.URL.Path, len(b), b, r.Host)
			return
		}
		fmt.Fprintf(rw, "plain answer for %s", r.URL.Path)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := l.Addr().(*net.TCPAddr).Port
	w := newWalled(t, "plain", wall.Net{})
	grants := []labels.Set{{Scheme: "http", Host: "127.0.0.1", Port: uint16(port)}}
	t.Run("listed http address", func(t *testing.T) {
		out := w.run(t, grants, "get", "http://127.0.0.1:"+strconv.Itoa(port)+"/hello")
		want(t, out, "STATUS 200", "BODY plain answer for /hello", "CLOSE true")
	})
	t.Run("unlisted http address", func(t *testing.T) {
		out := w.run(t, grants, "get", "http://127.0.0.1:"+strconv.Itoa(port+1)+"/x")
		want(t, out, "STATUS 403", "BODY egress refused:", "PROXY-STATUS toybox-entry; error=destination_ip_prohibited")
	})
	t.Run("a body by length, Host from the URL", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/post"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nHost: intranet.example\r\nContent-Length: 11\r\n\r\nhello world`)
		want(t, out, "STATUS 200", "BODY plain answer for /post: 11 bytes hello world, host 127.0.0.1:"+strconv.Itoa(port))
	})
	t.Run("a chunked body", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/chunked"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n`)
		want(t, out, "STATUS 200", "BODY plain answer for /chunked: 11 bytes hello world")
	})
	// A request with no body reaches the server with Content-Length 0,
	// not as an empty chunked body (which some servers refuse).
	t.Run("an empty body by length", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/framing"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nContent-Length: 0\r\n\r\n`)
		want(t, out, "STATUS 200", `BODY te=[] cl=0`)
	})
	t.Run("a POST without framing", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/framing"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nX-Keep: k\r\n\r\n`)
		want(t, out, "STATUS 200", `BODY te=[] cl=0 secret="" keep="k"`)
	})
	// Fields the client's Connection header names are for this hop only
	// (RFC 9110 section 7.6.1): a credential meant for the proxy is not
	// sent on to the remote.
	t.Run("fields the Connection header names", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/framing"
		out := w.run(t, grants, "raw", "GET "+u+` HTTP/1.1\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nX-Keep: k\r\n\r\n`)
		want(t, out, "STATUS 200", `BODY te=[] cl=0 secret="" keep="k"`)
	})
	t.Run("ambiguous framing", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/smuggle"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`)
		want(t, out, "STATUS 400", "BODY bad proxy request: both Transfer-Encoding and Content-Length")
	})
	// A body the client framed badly, or cut short, must not reach the
	// server as a shorter complete one.
	reached := func(t *testing.T, path string) {
		t.Helper()
		time.Sleep(200 * time.Millisecond) // an aborted upload reaches the server late, if at all
		mu.Lock()
		defer mu.Unlock()
		if b, ok := complete[path]; ok {
			t.Errorf("the server read a complete body %q for %s", b, path)
		}
	}
	t.Run("a malformed chunk", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/badchunk"
		out := w.run(t, grants, "raw", "POST "+u+` HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n world\r\n0\r\n\r\n`)
		want(t, out, "STATUS 400", `BODY bad proxy request: the request body: malformed chunk size "zz"`)
		reached(t, "/badchunk")
	})
	t.Run("a chunked body cut short", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/shortchunk"
		out := w.run(t, grants, "rawclose", "POST "+u+` HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n`)
		want(t, out, "STATUS 400", "BODY bad proxy request: the request body: unexpected EOF")
		reached(t, "/shortchunk")
	})
	t.Run("a body shorter than its length", func(t *testing.T) {
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/short"
		out := w.run(t, grants, "rawclose", "POST "+u+` HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello`)
		want(t, out, "STATUS 400", "BODY bad proxy request: the request body: unexpected EOF")
		reached(t, "/short")
	})
	t.Run("the whole answer, with the client still sending", func(t *testing.T) {
		// A close with unread input resets the connection and loses the
		// answer's tail.
		u := "http://127.0.0.1:" + strconv.Itoa(port) + "/big"
		out := w.run(t, grants, "rawfull", "GET "+u+` HTTP/1.1\r\nHost: x\r\n\r\n+64k`)
		want(t, out, fmt.Sprintf("LEN %d <nil>", 4<<20))
	})
	t.Run("https target in absolute form", func(t *testing.T) {
		out := w.run(t, grants, "get", "https://127.0.0.1:"+strconv.Itoa(port)+"/x")
		want(t, out, "STATUS 400")
	})
}

// tlsServer serves HTTPS on 127.0.0.1:443 (a self-signed certificate).
func tlsServer(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:443")
	if err != nil {
		testenv.Unavailable(t, "cannot listen on 127.0.0.1:443: "+err.Error())
	}
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { fmt.Fprint(rw, "secret over tls") }),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
	}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
}

func TestConnectTLS(t *testing.T) {
	tlsServer(t)
	w := newWalled(t, "tls", wall.Net{})
	byIP := []labels.Set{{Scheme: "https", Host: "127.0.0.1", Port: 443}}
	byName := []labels.Set{{Scheme: "https", Host: "localhost", Port: 443}}
	t.Run("address target, no SNI", func(t *testing.T) {
		want(t, w.run(t, byIP, "tls", "127.0.0.1:443|"), "STATUS 200", "TLS-BODY secret over tls")
	})
	t.Run("name target, matching SNI", func(t *testing.T) {
		want(t, w.run(t, byName, "tls", "localhost:443|localhost"), "STATUS 200", "TLS-BODY secret over tls")
	})
	t.Run("name target, another SNI", func(t *testing.T) {
		out := w.run(t, byName, "tls", "localhost:443|evil.example")
		want(t, out, "STATUS 200", "TLS-ERROR")
		if strings.Contains(out, "TLS-BODY") {
			t.Errorf("a ClientHello naming another server got through; output:\n%s", out)
		}
	})
	t.Run("ungranted TLS target", func(t *testing.T) {
		want(t, w.run(t, byIP, "tls", "localhost:443|localhost"), "STATUS 403", "BODY egress refused:")
	})
}

// TestAppCannotCrashTheEntry: the app shares the entry's uid and may
// signal pid 1. The signals the Go runtime answers with a crash and a stack
// dump (SIGABRT, SIGTRAP, SIGSYS, SIGILL, SIGSTKFLT, SIGSEGV, SIGBUS,
// SIGFPE, sent with kill) are ignored: the
// proxy serves on.
func TestAppCannotCrashTheEntry(t *testing.T) {
	echo := echoServer(t)
	w := newWalled(t, "signals", wall.Net{})
	out := w.run(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(echo)}}, "signal1", "")
	want(t, out, "BEFORE HTTP/1.1 403", "AFTER HTTP/1.1 403")
	if strings.Contains(out, "goroutine ") || strings.Contains(out, "SIGABRT: abort") {
		t.Errorf("the entry crashed:\n%s", out)
	}
}

// TestPlainHTTPAnswerHeaders: an answer's header whose name is not a valid
// field name (a space before the colon, which Go's client takes as part of
// the name) does not reach the app, where a lenient client would read
// "Transfer-Encoding :" as framing; nor does a remote's Proxy-Status,
// which would pass for the proxy's own.
func TestPlainHTTPAnswerHeaders(t *testing.T) {
	port := testenv.ServeTCP(t, func(c net.Conn) {
		_, _ = http.ReadRequest(bufio.NewReader(c))
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding : chunked\r\nX A: 1\r\nProxy-Status: fake; error=destination_ip_prohibited\r\nConnection: x-hop\r\nX-Hop: 1\r\nX-Fine: yes\r\nContent-Length: 2\r\n\r\nok")
	})
	w := newWalled(t, "answerhdr", wall.Net{})
	grants := []labels.Set{{Scheme: "http", Host: "127.0.0.1", Port: uint16(port)}}
	out := w.run(t, grants, "rawfull", "GET http://127.0.0.1:"+strconv.Itoa(port)+`/ HTTP/1.1\r\nHost: x\r\n\r\n`)
	want(t, out, "X-Fine: yes", "LEN 2 <nil>")
	for _, bad := range []string{"Transfer-Encoding :", "X A:", "Proxy-Status", "X-Hop"} {
		if strings.Contains(out, bad) {
			t.Errorf("the answer to the app carried %q:\n%s", bad, out)
		}
	}
}

// inProcessProxy runs the entry's proxy in this process (no wall) over a
// real grant.Vat and switchboard, and returns its address.
func inProcessProxy(t testing.TB, grants []labels.Set, opts ...func(*entry.Proxy)) string {
	t.Helper()
	dir := t.TempDir()
	sock := startSwitchboard(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	u := grant.NewUpstream(grant.UpstreamConfig{Path: sock})
	t.Cleanup(func() { _ = u.Close() })
	v, err := grant.NewVat(grant.VatConfig{ID: "inproc", Grants: grants, Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Revoke)
	f := serveVat(t, ctx, v.ServeEntry) // this process plays the entry
	conn, err := wire.FromFile(f, true)
	if err != nil {
		t.Fatal(err)
	}
	rc := conn.RPC(capnp.Client{}, nil)
	t.Cleanup(func() { _ = rc.Close() })
	vc := schema.Vat(rc.Bootstrap(ctx))
	defer vc.Release()
	fut, rel := vc.Egress(ctx, nil)
	defer rel()
	res, err := fut.Struct()
	if err != nil {
		t.Fatal(err)
	}
	p := entry.NewProxy("inproc", res.Handle().AddRef(), conn, nil)
	t.Cleanup(p.Close)
	for _, o := range opts {
		o(p)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() { _ = p.ServeProxy(ctx, l) }()
	return l.Addr().String()
}

// TestProbeAgainstInProcessProxy runs the in-wall probe program (as a
// separate process, outside any wall) against the in-process proxy: the
// probe's own checks, without bubblewrap.
func TestProbeAgainstInProcessProxy(t *testing.T) {
	echo := echoServer(t)
	addr := inProcessProxy(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(echo)}})
	_, probeBin := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, probeBin)
	cmd.Env = []string{probeEnv + "=connect", fmt.Sprintf("PROBE_ARG=127.0.0.1:%d|hello", echo), "HTTP_PROXY=http://" + addr}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v; output:\n%s", err, out)
	}
	want(t, string(out), "STATUS 200", "ECHO hello")
}

// sendmmsgFastOpen sends one byte to to on fd with sendmmsg(2) and
// MSG_FASTOPEN (x/sys has no sendmmsg), and says how it went.
func sendmmsgFastOpen(fd int, to *unix.SockaddrInet4) error {
	var sa unix.RawSockaddrInet4
	sa.Family = unix.AF_INET
	sa.Port = uint16(to.Port>>8 | to.Port&0xff<<8) // network order
	sa.Addr = to.Addr
	b := []byte("x")
	iov := unix.Iovec{Base: &b[0]}
	iov.SetLen(1)
	var m struct {
		hdr unix.Msghdr
		n   uint32
	}
	m.hdr.Name = (*byte)(unsafe.Pointer(&sa))
	m.hdr.Namelen = unix.SizeofSockaddrInet4
	m.hdr.Iov = &iov
	m.hdr.SetIovlen(1)
	_, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&m)), 1, unix.MSG_FASTOPEN|unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
