package wall

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"golang.org/x/sys/unix"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/tests/testenv"
	"toybox/vat/mcp/mcptest"
)

// victimEnv names the attack a re-executed test binary performs inside the
// wall (see TestMain).
const victimEnv = "WALL_VICTIM"

func TestMain(m *testing.M) {
	if mode := os.Getenv(victimEnv); mode == "mcp-fake" {
		mcptest.Tools["attack"] = mcpAttack
		mcptest.Tools["env"] = mcpEnv
		os.Exit(mcptest.Fake(os.Stdin, os.Stdout, os.Stderr))
	} else if mode != "" {
		os.Exit(victim(mode))
	}
	if mode := os.Getenv(supervisorEnv); mode != "" {
		os.Exit(supervise(mode))
	}
	os.Exit(m.Run())
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binaries builds toybox-entry and copies the test binary (the victim) into
// a shared folder, once per run.
func binaries(t testing.TB) (entryPath, victimPath string) {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "toybox-wall-bin-")
		if buildErr != nil {
			return
		}
		_ = os.Chmod(buildDir, 0o755)
		out, err := exec.Command("go", append(append([]string{"build"}, testenv.EntryBuildFlags...), "-o", filepath.Join(buildDir, "toybox-entry"), "toybox/cmd/toybox-entry")...).CombinedOutput()
		if err != nil {
			buildErr = &buildError{out: string(out), err: err}
			return
		}
		self, err := os.Executable()
		if err != nil {
			buildErr = err
			return
		}
		buildErr = copyFile(self, filepath.Join(buildDir, "victim"), 0o755)
	})
	if buildErr != nil {
		t.Fatalf("building the test binaries: %v", buildErr)
	}
	return filepath.Join(buildDir, "toybox-entry"), filepath.Join(buildDir, "victim")
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// fixture is a state dir with one installed vat (the victim binary).
type fixture struct {
	state, install, data, run string
	entry                     string
	spec                      Spec
	peer                      *os.File // the test's end of the app's capability socket
}

func newFixture(t testing.TB, id string) *fixture {
	t.Helper()
	testenv.RequireBwrap(t)
	entry, victimBin := binaries(t)
	f, err := makeFixture(t.TempDir(), id, entry, victimBin)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// makeFixture makes a fixture's state dir below root (for a process with
// no testing.T: a supervisor of its own, see supervise).
func makeFixture(root, id, entry, victimBin string) (*fixture, error) {
	_ = os.Chmod(root, 0o755)
	_ = os.Chmod(filepath.Dir(root), 0o711)
	f := &fixture{
		state:   filepath.Join(root, "state"),
		entry:   entry,
		install: filepath.Join(root, "state", "code", "0123abcd"),
		data:    filepath.Join(root, "state", "data", id),
		run:     filepath.Join(root, "state", "run", id),
	}
	for _, d := range []string{f.install, f.data, f.run} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	_ = os.Chmod(f.state, 0o700)
	if err := copyFile(victimBin, filepath.Join(f.install, "app"), 0o755); err != nil {
		return nil, err
	}
	f.spec = Spec{
		ID:         labels.VatID(id),
		Host:       NewHost(),
		InstallDir: f.install,
		Command:    []string{"./app"},
		DataDir:    f.data,
		RunDir:     f.run,
		StateDir:   f.state,
		EntryPath:  entry,
		Net:        Net{None: true},
		HostEnv:    []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "SECRET_TOKEN=hunter2", "HOME=/root"},
	}
	return f, nil
}

// caps makes the app's capability socket pair; the wall gets one end.
func (f *fixture) caps(t testing.TB) {
	t.Helper()
	if err := f.makeCaps(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.peer.Close() })
}

func (f *fixture) makeCaps() error {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f.spec.AppCap = os.NewFile(uintptr(fds[0]), "app-cap")
	f.peer = os.NewFile(uintptr(fds[1]), "app-cap-peer")
	return nil
}

// startVictim starts the victim in mode inside a real wall (with
// toybox-entry, served a Vat of no grant, when withEntry), waits until it
// says it runs ("sleep", "graceful", "etcafter" modes), and returns the
// wall and the file its output goes to. The test stops the wall.
func (f *fixture) startVictim(t *testing.T, mode string, withEntry bool) (*Process, string) {
	t.Helper()
	f.caps(t)
	if withEntry {
		f.spec.Net = Net{}
		ea, eb := socketpair(t)
		serveNoGrant(t, eb, f.spec.ID)
		f.spec.EntryCap = ea
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = out.Close() })
	f.spec.Stdout, f.spec.Stderr = out, out
	if f.spec.Env == nil {
		f.spec.Env = map[string]string{}
	}
	f.spec.Env[victimEnv] = mode
	p, err := Start(context.Background(), f.spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitSleeping(t, p, out.Name())
	return p, out.Name()
}

// runVictim runs the victim in mode inside a real wall and returns its
// output and Wait's error.
func (f *fixture) runVictim(t *testing.T, mode string) (string, error) {
	t.Helper()
	if f.spec.Env == nil {
		f.spec.Env = map[string]string{}
	}
	f.spec.Env[victimEnv] = mode
	f.caps(t)
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	f.spec.Stdout, f.spec.Stderr = out, out
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Start(ctx, f.spec, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-time.After(30 * time.Second):
		_ = p.Stop(time.Second)
		t.Fatalf("the victim (%s) did not finish", mode)
	}
	b, _ := os.ReadFile(out.Name())
	return string(bytes.TrimSpace(b)), werr
}

func socketpair(t testing.TB) (*os.File, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fds[0]), "pair-a"), os.NewFile(uintptr(fds[1]), "pair-b")
}

func fileUID(fi os.FileInfo) int { return int(fi.Sys().(*syscall.Stat_t).Uid) }

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// hostIP is this host's first non-loopback address, if any.
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return ""
}

func syscallKill0(pid int) error { return unix.Kill(pid, 0) }

func testenvUnavailable(t *testing.T, why string) { t.Helper(); testenv.Unavailable(t, why) }

func testenvRequireBwrap(t *testing.T) { t.Helper(); testenv.RequireBwrap(t) }

// noGrantVat is a Vat with no egress grant (a null Handle), served over a
// real Cap'n Proto connection: enough for the entry to start its proxy.
type noGrantVat struct{ id string }

func (v noGrantVat) Egress(context.Context, schema.Vat_egress) error { return nil }

func (v noGrantVat) Direct(context.Context, schema.Vat_direct) error { return nil }

func (v noGrantVat) ReportDirect(context.Context, schema.Vat_reportDirect) error { return nil }

func (v noGrantVat) GrantChanged(context.Context, schema.Vat_grantChanged) error {
	return errors.New("no grant")
}

func (v noGrantVat) Doors(context.Context, schema.Vat_doors) error {
	return errors.New("no doors in this test")
}

func (v noGrantVat) Id(_ context.Context, call schema.Vat_id) error {
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	return res.SetId(v.id)
}

// serveNoGrant serves a no-grant Vat on the entry's capability socket until
// the test ends.
func serveNoGrant(t testing.TB, peer *os.File, id labels.VatID) {
	t.Helper()
	conn, err := wire.FromFile(peer, false)
	if err != nil {
		t.Fatal(err)
	}
	rc := conn.RPC(capnpClient(schema.Vat_ServerToClient(noGrantVat{id: string(id)})), nil)
	t.Cleanup(func() {
		_ = rc.Close()
	})
}

// runVictimNoVat runs the victim with a network shape, its entry served by
// a no-grant Vat on entryPeer.
func (f *fixture) runVictimNoVat(t *testing.T, mode string, entryPeer *os.File) (string, error) {
	t.Helper()
	serveNoGrant(t, entryPeer, f.spec.ID)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(time.Minute):
		}
	}()
	return f.runVictim(t, mode)
}

func capnpClient(v schema.Vat) capnp.Client { return capnp.Client(v) }

// highFD opens path at descriptor 300 or above, inheritable (no CLOEXEC).
func highFD(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD, 300)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), path)
}
