//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
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
	"toybox/schema/wire"
	"toybox/switchboard"
	"toybox/tests/testenv"
	"toybox/vat/grant"
	"toybox/vat/wall"
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
		// neither disconnected and connected again, nor bound, nor made
		// to listen, and no socket can be made.
		c, err := net.Dial("tcp4", arg)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		raw, _ := c.(*net.TCPConn).SyscallConn()
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
	return serve(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

func sinkServer(t testing.TB) int {
	t.Helper()
	return serve(t, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "%d\n", n)
	})
}

func serve(t testing.TB, h func(net.Conn)) int {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); h(c) }()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
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
