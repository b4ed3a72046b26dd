package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"toybox/tests/testenv"
)

// asFD returns a descriptor of what file-bearing x holds (a listener, a
// packet conn, a file) as a file named name, the way activation.Files
// names the fds systemd passed; x itself is closed.
func asFD(t *testing.T, x interface {
	File() (*os.File, error)
	Close() error
}, name string,
) *os.File {
	t.Helper()
	if ul, ok := x.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	f, err := x.File()
	if err != nil {
		t.Fatal(err)
	}
	_ = x.Close()
	return renamed(t, f, name)
}

func renamed(t *testing.T, f *os.File, name string) *os.File {
	t.Helper()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	g := os.NewFile(uintptr(fd), name)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// TestActivatedAdminMustBeAUnixListener: the socket named "admin" serves the
// admin API (install code, remove vats), so toybox refuses to start when
// systemd hands it anything but a listening unix stream socket under that
// name: systemd-socket-activate -l 127.0.0.1:8799 --fdname=admin served the
// admin API to every local user over TCP. The error names the fd, its name
// and what it is.
func TestActivatedAdminMustBeAUnixListener(t *testing.T) {
	dir := t.TempDir()
	n := 0
	unixListener := func(name string) *os.File {
		n++
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name+string(rune('0'+n))+".sock"), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		return asFD(t, l, name)
	}
	tcpListener := func(name string) (*os.File, string) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		return asFD(t, l.(*net.TCPListener), name), addr
	}
	udp := func(name string) *os.File {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return asFD(t, c.(*net.UDPConn), name)
	}
	unixgram := func(name string) *os.File {
		n++
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "g"+string(rune('0'+n))), Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		return asFD(t, c, name)
	}
	seqpacket := func(name string) *os.File {
		n++
		l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: filepath.Join(dir, "p"+string(rune('0'+n))), Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		return asFD(t, l, name)
	}
	abstract := func(name string) *os.File {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@toybox-test-admin-" + strconv.Itoa(os.Getpid()), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		return asFD(t, l, name)
	}
	connected := func(name string) *os.File {
		fds, err := testenv.SocketPair()
		if err != nil {
			t.Fatal(err)
		}
		_ = syscall.Close(fds[1])
		return renamed(t, os.NewFile(uintptr(fds[0]), "pair"), name)
	}
	regular := func(name string) *os.File {
		f, err := os.CreateTemp(dir, "plain")
		if err != nil {
			t.Fatal(err)
		}
		return renamed(t, f, name)
	}

	httpTCP, httpAddr := tcpListener("http")
	adminTCP, adminAddr := tcpListener("admin")
	for _, tt := range []struct {
		name  string
		files []*os.File
		want  string
	}{
		{"tcp admin", []*os.File{httpTCP, adminTCP}, "activated fd 4 (admin): not a unix socket (domain 2, AF_INET); the admin API is served only on a unix socket"},
		{"udp admin", []*os.File{udp("admin")}, "activated fd 3 (admin): not a unix socket (domain 2, AF_INET)"},
		{"datagram unix admin", []*os.File{unixgram("admin")}, "activated fd 3 (admin): not a stream socket (type 2, SOCK_DGRAM)"},
		{"seqpacket unix admin", []*os.File{seqpacket("admin")}, "activated fd 3 (admin): not a stream socket (type 5, SOCK_SEQPACKET)"},
		{"abstract unix admin", []*os.File{abstract("admin")}, "activated fd 3 (admin): an abstract unix socket"},
		{"connected unix admin", []*os.File{unixListener("http"), connected("admin")}, "activated fd 4 (admin): not listening"},
		{"regular file admin", []*os.File{regular("admin")}, "activated fd 3 (admin): not a socket"},
		{"second admin on tcp", []*os.File{unixListener("admin"), func() *os.File { f, _ := tcpListener("admin"); return f }()}, "activated fd 4 (admin): not a unix socket (domain 2, AF_INET)"},
		{"http on a file", []*os.File{regular("http"), unixListener("admin")}, "activated fd 3 (http): "},
		{"no admin", []*os.File{unixListener("http")}, `socket-activated without a socket named "admin"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, a, err := activatedListeners(tt.files)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("activatedListeners = %v, %v, %v; want an error starting %q", h, a, err, tt.want)
			}
			if h != nil || a != nil {
				t.Errorf("activatedListeners returned listeners with its error: %v, %v", h, a)
			}
		})
	}
	// Nothing the refused start took stays listening.
	for _, addr := range []string{httpAddr, adminAddr} {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			t.Errorf("%s still accepts after the refused start", addr)
		}
	}

	httpTCP, _ = tcpListener("http")
	h, a, err := activatedListeners([]*os.File{httpTCP, unixListener("other"), unixListener("admin")})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	defer a.Close()
	if h.Addr().Network() != "tcp" || a.Addr().Network() != "unix" || !strings.HasPrefix(a.Addr().String(), filepath.Join(dir, "admin")) {
		t.Errorf("http %s %s, admin %s %s; want the tcp listener and the unix listener named admin", h.Addr().Network(), h.Addr(), a.Addr().Network(), a.Addr())
	}
}

// serveEnv makes a re-executed test binary run `toybox serve` with its
// arguments (TestMain).
const serveEnv = "TOYBOX_TEST_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		os.Exit(serveMain(os.Args[2:])) // os.Args[1] is "serve"
	}
	os.Exit(m.Run())
}

// TestWallMaxTasksAboveTheHardLimit: the supervisor sets each wall's task
// limit as its hard limit too, which only CAP_SYS_RESOURCE may raise above
// the one the wall inherited (this process's). serve took any number up to
// 4194304, and then every walled vat stayed off ("setting the wall's task
// limit (N): prlimit: operation not permitted"); now it refuses to start,
// naming the limit. The serve here runs with a hard limit of 1000 and, as
// root, without CAP_SYS_RESOURCE (as under systemd's User= or in a
// container).
func TestWallMaxTasksAboveTheHardLimit(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	serve := func(tasks string) (int, string) {
		argv := []string{"prlimit", "--nproc=1000:1000", "--", self}
		if os.Geteuid() == 0 {
			argv = append([]string{"setpriv", "--bounding-set=-sys_resource", "--"}, argv...)
		}
		// A state dir that cannot be locked: past the flags, serve ends.
		cmd := exec.Command(argv[0], append(argv[1:], "serve", "--state", "/dev/null/state", "--switchboard", "/nonexistent", "--wall-max-tasks", tasks)...)
		cmd.Env = append(os.Environ(), serveEnv+"=1")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%v: %v", argv, err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, out := serve("1001"); code != 2 || !strings.Contains(out, "hard task limit (RLIMIT_NPROC), 1000") || !strings.Contains(out, "LimitNPROC=") {
		t.Errorf("--wall-max-tasks 1001 under a hard limit of 1000: exit %d %q; want 2 naming the limit and LimitNPROC=", code, out)
	}
	if code, out := serve("1000"); code != 1 || !strings.Contains(out, "creating state dir") {
		t.Errorf("--wall-max-tasks 1000 under a hard limit of 1000: exit %d %q; want it taken (then the state dir refused: exit 1)", code, out)
	}
}

// TestPublicHostFlag: --public-host takes names, repeated or as a comma
// list; a port, a scheme or a wildcard is refused before anything starts,
// naming the flag and the problem.
func TestPublicHostFlag(t *testing.T) {
	serve := serveFlags(t)
	for _, tt := range []struct {
		flags []string
		code  int
		want  string
	}{
		{[]string{"--public-host", "toybox.example.com,Other.Example", "--public-host", "192.0.2.1"}, 1, "creating state dir"},
		{[]string{"--public-host", "toybox.example.com:8787"}, 2, "--public-host: bad public host: public host \"toybox.example.com:8787\": a bare name"},
		{[]string{"--public-host", "https://toybox.example.com"}, 2, "without a scheme"},
		{[]string{"--public-host", "*.example.com"}, 2, "wildcard"},
		{[]string{"--public-host", "a.example,,b.example"}, 2, "an empty name"},
	} {
		if code, out := serve(tt.flags...); code != tt.code || !strings.Contains(out, tt.want) {
			t.Errorf("toybox serve %q: exit %d %q; want %d and %q", tt.flags, code, out, tt.code, tt.want)
		}
	}
}

// TestWallLimitFlags: --wall-cpus Inf was taken (NaN alone was refused).
// Each wall was then held to the kernel's least CPU time (a quota of
// 1 ms in 100 ms, int64(+Inf) clamped to it), while every vat's status
// said +Inf CPUs: JSON has no +Inf, so GET /<vat> and the PUT answer
// came back 200 and 201 with an empty body. A memory or disk limit past
// 2^43 MiB overflowed its bytes to another limit (2^44 MiB: 0, none at
// all). Each is refused before anything starts, naming the flag; the
// largest is an owner's (2^30 MiB).
func TestWallLimitFlags(t *testing.T) {
	serve := serveFlags(t)
	for _, tt := range []struct {
		flags []string
		code  int
		want  string
	}{
		{[]string{"--wall-cpus", "Inf"}, 2, "--wall-cpus +Inf: want 0 (no limit) or a number of CPUs of at least 0.01"},
		{[]string{"--wall-cpus", "NaN"}, 2, "--wall-cpus NaN"},
		{[]string{"--wall-cpus", "0.5"}, 1, "creating state dir"},
		{[]string{"--wall-memory-mib", "17592186044416"}, 2, "--wall-memory-mib 17592186044416: want 0 (no limit) or 16 to 1073741824"},
		{[]string{"--wall-memory-mib", "1073741824"}, 1, "creating state dir"},
		{[]string{"--wall-disk-mib", "17592186044416"}, 2, "--wall-disk-mib 17592186044416: want 0 (no limit) or 16 to 1073741824"},
		{[]string{"--installs", "0"}, 2, "--installs 0: want 1 to 64"},
		{[]string{"--install-queue", "-1"}, 2, "--install-queue -1: want 0 to 1024"},
		{[]string{"--installs", "1", "--install-queue", "0"}, 1, "creating state dir"},
	} {
		if code, out := serve(tt.flags...); code != tt.code || !strings.Contains(out, tt.want) {
			t.Errorf("toybox serve %q: exit %d %q; want %d and %q", tt.flags, code, out, tt.code, tt.want)
		}
	}
}

// TestPublicURL: --public-url is scheme://host[:port] and nothing more;
// without it a loopback TCP listener gives http://localhost:PORT, anything
// else no URL (a guess could name a resource no client uses).
func TestPublicURL(t *testing.T) {
	for _, tt := range []struct {
		v  string
		ok bool
	}{
		{"", true},
		{"https://mcp.example", true},
		{"http://127.0.0.1:8787/", true},
		{"ftp://mcp.example", false},
		{"https://mcp.example/base", false},
		{"https://u@mcp.example", false},
		{"https://mcp.example?x=1", false},
		{"mcp.example", false},
		{"https://", false},
	} {
		if err := checkPublicURL(tt.v); (err == nil) != tt.ok {
			t.Errorf("checkPublicURL(%q) = %v; want ok %v", tt.v, err, tt.ok)
		}
	}
	loop, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Close()
	port := loop.Addr().(*net.TCPAddr).Port
	if got, want := publicURL("", loop), fmt.Sprintf("http://localhost:%d", port); got != want {
		t.Errorf("publicURL of a loopback listener = %q; want %q", got, want)
	}
	if got := publicURL("https://mcp.example/", loop); got != "https://mcp.example" {
		t.Errorf("publicURL with --public-url = %q; want it, without the slash", got)
	}
	unix, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close()
	if got := publicURL("", unix); got != "" {
		t.Errorf("publicURL of a unix listener = %q; want none", got)
	}
}

// serveFlags returns a func that runs toybox serve with flags and a state
// dir that cannot be locked (past the flags, serve ends), and returns its
// exit code and output.
func serveFlags(t *testing.T) func(flags ...string) (int, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return func(flags ...string) (int, string) {
		cmd := exec.Command(self, append([]string{"serve", "--state", "/dev/null/state"}, flags...)...)
		cmd.Env = append(os.Environ(), serveEnv+"=1")
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
}
