//go:build linux

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// bins holds the binaries TestMain built: toybox, toybox-entry, switchboard,
// and examples/<name>.
var bins string

var examples = []string{"counter-v1", "counter-v2", "egress-probe", "capnp-probe", "hog", "mcp-http", "mcp-stdio", "port-app"}

func TestMain(m *testing.M) {
	code, err := buildAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests: building the binaries:", err)
		os.Exit(1)
	}
	if code == 0 {
		code = m.Run()
	}
	_ = os.RemoveAll(bins)
	os.Exit(code)
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

func buildAll() (int, error) {
	root, err := repoRoot()
	if err != nil {
		return 1, err
	}
	bins, err = os.MkdirTemp("", "tbx-bin-")
	if err != nil {
		return 1, err
	}
	if err := os.Chmod(bins, 0o755); err != nil {
		return 1, err
	}
	build := func(out string, pkgs ...string) error {
		args := append([]string{"build", "-o", out}, pkgs...)
		if len(pkgs) == 1 && pkgs[0] == "./cmd/toybox-entry" {
			args = append(append([]string{"build"}, testenv.EntryBuildFlags...), "-o", out, pkgs[0])
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
		}
		return nil
	}
	if err := build(bins+"/", "./cmd/toybox", "./cmd/switchboard"); err != nil {
		return 1, err
	}
	if err := build(bins+"/", "./cmd/toybox-entry"); err != nil {
		return 1, err
	}
	for _, e := range examples {
		if err := build(filepath.Join(bins, "examples", e), "./examples/"+e); err != nil {
			return 1, err
		}
	}
	for _, fixture := range []string{"snoop", "pagevat", "netclient", "nested", "mcpfetch", "mcplist", "mcpecho"} {
		if err := build(filepath.Join(bins, "examples", fixture), "./tests/"+fixture); err != nil {
			return 1, err
		}
	}
	return 0, nil
}

// example returns the path of a built example (or the shell script vat).
func example(t testing.TB, name string) string {
	t.Helper()
	if name == "shell-script" {
		root, err := repoRoot()
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(root, "examples", "shell-script", "app.sh")
	}
	return filepath.Join(bins, "examples", name)
}

// stack is a switchboard and a supervisor, run as real processes.
type stack struct {
	t      testing.TB
	dir    string
	state  string
	admin  string
	http   string // host:port
	handle string // which switchboard socket toybox holds: public or local
	env    []string
	extra  []string // more toybox serve flags
	sbArgs []string // more switchboard flags
	leak   string   // stackOpts.leakFD9
	nested bool     // stackOpts.nested

	activated bool
	listened  []*os.File // the activated sockets (ours; toybox gets copies)
	noCgroups bool       // stackOpts.noCgroups

	sbPublic, sbLocal string
	sb, tb            *exec.Cmd
	sbLog, tbLog      *syncBuffer
}

type syncBuffer = testenv.Buffer

type stackOpts struct {
	activated bool     // hand toybox its sockets as systemd would (LISTEN_FDS)
	handle    string   // "local" (default) or "public"
	env       []string // extra environment for toybox serve
	extra     []string // extra flags for toybox serve
	sbArgs    []string // extra flags for the switchboard (--config FILE)
	leakFD9   string   // a file toybox serve inherits as fd 9, not close-on-exec (as a careless parent would leave it)
	nested    bool     // run toybox serve under another seccomp notifier's filter (tests/nested)
	stateMiB  int      // the state dir on a tmpfs of this many MiB (a disk the test may fill); 0: on the test's disk
	noCgroups bool     // run toybox serve in a mount namespace with no cgroup mounted: a host whose walls get no cgroup (no task fence)
}

// newStack starts a switchboard and a supervisor holding opts.handle. Every
// test that uses it needs bubblewrap (vats run walled).
func newStack(t testing.TB, opts stackOpts) *stack {
	t.Helper()
	testenv.RequireBwrap(t)
	testenv.RequireRoot(t)
	dir, err := os.MkdirTemp("", "tbx-")
	if err != nil {
		t.Fatal(err)
	}
	// The walls' uid must be able to traverse to the state folders.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if opts.handle == "" {
		opts.handle = "local"
	}
	s := &stack{
		t: t, dir: dir, state: filepath.Join(dir, "state"), admin: filepath.Join(dir, "admin.sock"),
		http: "127.0.0.1:" + freePort(t), handle: opts.handle, env: opts.env, extra: opts.extra, sbArgs: opts.sbArgs, activated: opts.activated, leak: opts.leakFD9, nested: opts.nested, noCgroups: opts.noCgroups,
		sbPublic: filepath.Join(dir, "sb-public.sock"), sbLocal: filepath.Join(dir, "sb-local.sock"),
	}
	t.Cleanup(func() {
		s.stopToybox()
		s.stopSwitchboard()
		if t.Failed() {
			t.Logf("toybox log:\n%s", tail(s.tbLog))
			t.Logf("switchboard log:\n%s", tail(s.sbLog))
		}
		// A supervisor killed outright leaves its vats' data folders
		// mounted (their disk limits): they go with the folder.
		unmountBelow(dir)
		_ = os.RemoveAll(dir)
	})
	if opts.stateMiB > 0 {
		// Unmounted by the cleanup above (unmountBelow), after toybox stops.
		if err := os.Mkdir(s.state, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", s.state, "tmpfs", 0, fmt.Sprintf("size=%dm,mode=0711", opts.stateMiB)); err != nil {
			testenv.Unavailable(t, "cannot mount a tmpfs: "+err.Error())
		}
	}
	s.startSwitchboard()
	s.startToybox()
	return s
}

// unmountBelow detaches every mount below dir (deepest first).
func unmountBelow(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

func tail(b *syncBuffer) string {
	if b == nil {
		return ""
	}
	s := b.String()
	if len(s) > 12000 {
		s = "…" + s[len(s)-12000:]
	}
	return s
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

func waitFor(t testing.TB, what string, d time.Duration, ok func() bool) {
	t.Helper()
	testenv.WaitFor(t, d, func() error {
		if !ok() {
			return fmt.Errorf("timed out after %v waiting for %s", d, what)
		}
		return nil
	})
}

func (s *stack) startSwitchboard() {
	s.t.Helper()
	s.sbLog = &syncBuffer{}
	s.sb = exec.Command(filepath.Join(bins, "switchboard"), append([]string{"--listen", "public=" + s.sbPublic, "--listen", "local=" + s.sbLocal, "--loopback", "unchecked"}, s.sbArgs...)...)
	s.sb.Stdout, s.sb.Stderr = s.sbLog, s.sbLog
	s.sb.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.sb.Start(); err != nil {
		s.t.Fatal(err)
	}
	waitFor(s.t, "the switchboard's sockets", 10*time.Second, func() bool {
		_, e1 := os.Stat(s.sbPublic)
		_, e2 := os.Stat(s.sbLocal)
		return e1 == nil && e2 == nil
	})
}

func (s *stack) stopSwitchboard() {
	if s.sb == nil || s.sb.Process == nil {
		return
	}
	_ = s.sb.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.sb.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.sb.Process.Kill()
		<-done
	}
	s.sb = nil
}

// in returns s reporting to t (for subtests).
func (s *stack) in(t testing.TB) *stack {
	c := *s
	c.t = t
	return &c
}

func (s *stack) sbSock() string {
	if s.handle == "public" {
		return s.sbPublic
	}
	return s.sbLocal
}

// testUIDBase is the first uid of this test process's vats: a range of its
// own (toybox serve --uid-base), so that test runs side by side never stop
// each other's vats by uid.
var testUIDBase = 1300000 + (os.Getpid()%1024)*65536

func (s *stack) startToybox() {
	s.t.Helper()
	if s.tbLog == nil {
		s.tbLog = &syncBuffer{}
	}
	args := append([]string{
		"serve", "--state", s.state, "--switchboard", s.sbSock(),
		"--entry", filepath.Join(bins, "toybox-entry"), "--stop-grace", "2s",
		"--uid-base", fmt.Sprint(testUIDBase),
	}, s.extra...)
	if s.activated {
		// As systemd does: the sockets as fds 3 and 4, named; LISTEN_PID
		// is the shell's pid, which exec keeps.
		if s.listened == nil {
			s.listened = activatedSockets(s.t, s.http, s.admin)
		}
		s.tb = exec.Command("sh", append([]string{"-c", `LISTEN_PID=$$ LISTEN_FDS=2 LISTEN_FDNAMES=http:admin exec "$0" "$@"`, filepath.Join(bins, "toybox")}, args...)...)
		s.tb.ExtraFiles = s.listened
	} else {
		args = append(args, "--http", s.http, "--admin", s.admin)
		s.tb = exec.Command(filepath.Join(bins, "toybox"), args...)
		if s.leak != "" {
			s.tb = exec.Command("sh", append([]string{"-c", `exec 9<"$TOYBOX_TEST_LEAK"; exec "$0" "$@"`, filepath.Join(bins, "toybox")}, args...)...)
		}
	}
	if s.nested {
		// Under a filter with a listener: the kernel refuses every wall's
		// toybox-entry a listener of its own (EBUSY).
		nested := filepath.Join(bins, "examples", "nested")
		s.tb.Args = append([]string{nested, s.tb.Path}, s.tb.Args[1:]...)
		s.tb.Path = nested
	}
	if s.noCgroups {
		// A mount namespace of its own, every cgroup file system unmounted
		// there: toybox finds none (a host without cgroups).
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			testenv.Unavailable(s.t, "unshare(1), for a supervisor without cgroups: "+err.Error())
		}
		s.tb.Args = append([]string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", noCgroupsScript, s.tb.Path}, s.tb.Args[1:]...)
		s.tb.Path = unshare
	}
	s.tb.Env = append([]string{"PATH=" + os.Getenv("PATH")}, s.env...)
	if s.leak != "" {
		s.tb.Env = append(s.tb.Env, "TOYBOX_TEST_LEAK="+s.leak)
	}
	s.tb.Stdout, s.tb.Stderr = s.tbLog, s.tbLog
	if err := s.tb.Start(); err != nil {
		s.t.Fatal(err)
	}
	waitFor(s.t, "toybox's admin socket", 15*time.Second, func() bool {
		code, _ := s.adminDo("GET", "/", nil)
		return code == http.StatusOK
	})
}

// noCgroupsScript unmounts every cgroup file system (in the mount
// namespace unshare made) and runs "$0" "$@"; it fails if one is left.
const noCgroupsScript = `set -e
for m in $(awk '{for (i = 7; i < NF; i++) if ($i == "-") { if ($(i+1) == "cgroup" || $(i+1) == "cgroup2") print $5; break }}' /proc/self/mountinfo | sort -r); do
	umount -l "$m"
done
if awk '{for (i = 7; i < NF; i++) if ($i == "-") { if ($(i+1) == "cgroup" || $(i+1) == "cgroup2") f = 1; break }} END {exit !f}' /proc/self/mountinfo; then
	echo "a cgroup file system is still mounted" >&2
	exit 1
fi
exec "$0" "$@"`

// activatedSockets listens on httpAddr (tcp) and adminPath (unix, 0600) and
// returns the sockets as files, for LISTEN_FDS.
func activatedSockets(t testing.TB, httpAddr, adminPath string) []*os.File {
	t.Helper()
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("unix", adminPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(adminPath, 0o600); err != nil {
		t.Fatal(err)
	}
	hf, err := hl.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	af, err := al.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	_ = hl.Close()
	al.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = al.Close()
	t.Cleanup(func() { hf.Close(); af.Close() })
	return []*os.File{hf, af}
}

// stopToybox stops the supervisor with SIGTERM (as systemd would).
func (s *stack) stopToybox() {
	if s.tb == nil || s.tb.Process == nil {
		return
	}
	_ = s.tb.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.tb.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		s.t.Errorf("toybox did not stop within 20s of SIGTERM")
		_ = s.tb.Process.Signal(syscall.SIGQUIT) // a goroutine dump into the log
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			_ = s.tb.Process.Kill()
			<-done
		}
	}
	s.tb = nil
	// With GOFLAGS=-race the binaries are race-enabled: a race is a failure.
	if strings.Contains(s.tbLog.String(), "WARNING: DATA RACE") {
		s.t.Errorf("toybox reported a data race:\n%s", tail(s.tbLog))
	}
}

// killToybox kills the supervisor outright (SIGKILL), as a crash would.
func (s *stack) killToybox() {
	_ = s.tb.Process.Kill()
	_ = s.tb.Wait()
	s.tb = nil
}

// adminClient is a client of the admin socket. Each is made for one call,
// so it keeps no connection for another: one left idle is toybox's to
// hold until its idle timeout (TestNoDescriptorLeaks counts them).
func (s *stack) adminClient() *http.Client {
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", s.admin)
		},
	}}
}

func (s *stack) adminDo(method, path string, body io.Reader) (int, string) {
	req, err := http.NewRequest(method, "http://toybox"+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := s.adminClient().Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// install PUTs the file at path as vat id with query (already encoded).
func (s *stack) install(id, path, query string) (int, string) {
	s.t.Helper()
	f, err := os.Open(path)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	p := "/" + id
	if query != "" {
		p += "?" + query
	}
	return s.adminDo("PUT", p, f)
}

func (s *stack) mustInstall(id, path, query string) map[string]any {
	s.t.Helper()
	code, body := s.install(id, path, query)
	if code != http.StatusCreated && code != http.StatusOK {
		_, logs := s.adminDo("GET", "/"+id+"/logs", nil)
		s.t.Fatalf("PUT /%s = %d %s; want 201 or 200\nits output:\n%s", id, code, body, logs)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		s.t.Fatalf("PUT /%s answered %q: %v", id, body, err)
	}
	return st
}

func (s *stack) status(id string) map[string]any {
	s.t.Helper()
	code, body := s.adminDo("GET", "/"+id, nil)
	if code != http.StatusOK {
		s.t.Fatalf("GET /%s = %d %s", id, code, body)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		s.t.Fatal(err)
	}
	return st
}

// get fetches path from the public HTTP listener.
func (s *stack) get(path string) (int, string) {
	s.t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + s.http + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimRight(string(b), "\n")
}

func (s *stack) mustGet(path, want string) {
	s.t.Helper()
	code, body := s.get(path)
	if code != http.StatusOK || body != want {
		s.t.Fatalf("GET %s = %d %q; want 200 %q", path, code, body, want)
	}
}
