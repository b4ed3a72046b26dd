// Package testenv decides whether a test that needs a real component can run
// here.
//
// It decides whether a test that needs a real component (bubblewrap, user
// namespaces, docker, root) can run here. Where it cannot, the test skips —
// unless TOYBOX_REQUIRE_WALLS=1 (as in CI), where the same condition fails
// the test, so a suite can never pass by skipping.
package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Required reports whether TOYBOX_REQUIRE_WALLS asks for every sandbox and
// docker test to run.
func Required() bool { return os.Getenv("TOYBOX_REQUIRE_WALLS") == "1" }

// Unavailable skips t (or fails it when Required) saying why.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("TOYBOX_REQUIRE_WALLS=1 but this test cannot run: %s", why)
	}
	t.Skipf("skipping: %s (set TOYBOX_REQUIRE_WALLS=1 to make this a failure)", why)
}

// RequireBwrap needs a bubblewrap that can start a sandbox with a new user
// and network namespace.
func RequireBwrap(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("bwrap")
	if err != nil {
		Unavailable(t, "bubblewrap is not installed")
	}
	out, err := exec.Command(path, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true").CombinedOutput()
	if err != nil {
		Unavailable(t, "bubblewrap cannot start a sandbox here: "+string(out))
	}
	return path
}

// RequireRoot needs uid 0.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root")
	}
}

// RequireChromium needs a headless Chromium (Debian's chromium package,
// which make deps installs) and returns its path.
func RequireChromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	Unavailable(t, "chromium is not installed (apt-get install chromium)")
	return ""
}

// EntryBuildFlags are the go build flags toybox-entry is built with (the
// Makefile's ENTRY_FLAGS): static, its C launcher and glibc linked in,
// without the cgo resolver and user lookups.
var EntryBuildFlags = []string{"-tags", "netgo,osusergo", "-ldflags=-extldflags=-static"}

// ListenAs starts a TCP service on 127.0.0.1 that runs as uid (and gid):
// busybox nc, from /bin (outside toybox's tree), accepting connection after
// connection until the test ends. It returns the port, once the service
// answers. Needs root (to switch uid) and /bin/busybox.
func ListenAs(t testing.TB, uid int) uint16 {
	t.Helper()
	RequireRoot(t)
	if _, err := os.Stat("/bin/busybox"); err != nil {
		Unavailable(t, "/bin/busybox is not installed (busybox-static)")
	}
	var last error
	for range 5 {
		// A free port, taken by nc a moment later: should another process
		// take it first, nc fails and the next round picks another.
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		cmd := exec.Command("/bin/busybox", "nc", "-ll", "-p", strconv.Itoa(port), "-e", "/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}},
			Setpgid:    true,
		}
		if err := cmd.Start(); err != nil {
			Unavailable(t, "busybox nc cannot run as uid "+strconv.Itoa(uid)+": "+err.Error())
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() { _ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL); <-exited }
		deadline := time.Now().Add(5 * time.Second)
		for {
			if c, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				_ = c.Close()
				t.Cleanup(stop)
				return uint16(port)
			}
			select {
			case err := <-exited:
				last = fmt.Errorf("busybox nc on port %d ended: %w", port, err)
				exited <- err
			case <-time.After(10 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				last = fmt.Errorf("busybox nc never answered on port %d", port)
				stop()
			}
			break
		}
	}
	t.Fatalf("no service as uid %d: %v", uid, last)
	return 0
}

// Buffer is a bytes.Buffer that goroutines may write while the test reads
// it: a child's output, a logger's sink.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Dial connects to addr over TCP, with a deadline of 30 seconds for
// everything on the connection; it is closed when the test ends.
func Dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

// Smuggle sends, on a new connection to addr, a POST to path carrying
// both Content-Length and Transfer-Encoding: a proxy in front that reads
// the Content-Length sees one request, where a server that reads the
// chunked body sees a second one, smuggled: a GET of smuggled (a path).
// It returns the first answer (its body read) and whether the connection
// closed after it.
func Smuggle(t testing.TB, addr, path, smuggled string) (resp *http.Response, closed bool) {
	t.Helper()
	c := Dial(t, addr)
	defer c.Close()
	get := "GET " + smuggled + " HTTP/1.1\r\nHost: localhost\r\n\r\n"
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", path, 5+len(get), get)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_, err = br.ReadByte()
	return resp, errors.Is(err, io.EOF)
}

// HostNode returns the host's node, its version (without the "v") and
// the npm-cli.js its npm runs; a host without node or npm is unavailable
// (Unavailable).
func HostNode(t testing.TB) (node, version, npm string) {
	t.Helper()
	n, err := exec.LookPath("node")
	if err != nil {
		Unavailable(t, "node is not installed")
	}
	m, err := exec.LookPath("npm")
	if err != nil {
		Unavailable(t, "npm is not installed")
	}
	m, _ = filepath.EvalSymlinks(m)
	out, err := exec.Command(n, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	return n, strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), m
}

// WaitStopped waits until every thread of process pid is stopped, after
// a SIGSTOP: kill returns before a running thread has stopped, and that
// thread could still answer.
func WaitStopped(t testing.TB, pid int) {
	t.Helper()
	WaitFor(t, 5*time.Second, func() error {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				return err
			}
			// The state follows the command's closing parenthesis.
			i := bytes.LastIndexByte(b, ')')
			if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				return fmt.Errorf("thread %s of %d is not stopped yet", task.Name(), pid)
			}
		}
		return nil
	})
}
