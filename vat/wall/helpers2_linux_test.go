package wall

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"golang.org/x/sys/unix"

	"toybox/schema"
	"toybox/schema/wire"
	"toybox/tests/testenv"
)

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
func serveNoGrant(t testing.TB, peer *os.File, id string) {
	t.Helper()
	conn, err := wire.FromFile(peer, false)
	if err != nil {
		t.Fatal(err)
	}
	rc := conn.RPC(capnpClient(schema.Vat_ServerToClient(noGrantVat{id: id})), nil)
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
