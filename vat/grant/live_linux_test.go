package grant

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/labels"
	"toybox/tests/testenv"
)

// TestSetGrantsRevocationUnconfirmed: SetGrants waited revokeTimeout for
// the switchboard to answer the revocations and then returned nil, as if
// the removed member's handles were revoked, while a stalled switchboard
// had not revoked them: the supervisor reported the grant changed and
// the entry's connections for the removed member went on. It now says
// the revocation is unconfirmed, and the supervisor restarts the wall.
// The switchboard here is a real one, stopped with SIGSTOP.
func TestSetGrantsRevocationUnconfirmed(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	p1, p2 := echoServer(t), echoServer(t)
	u := NewUpstream(UpstreamConfig{Path: sock})
	t.Cleanup(func() { _ = u.Close() })
	v, err := NewVat(VatConfig{ID: "erin", Grants: []labels.Set{{Host: "127.0.0.1", Port: p1}, {Host: "127.0.0.1", Port: p2}}, Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Revoke)
	vc, cli := entryClient(t, v)
	h := egress(t, vc)
	ctx := context.Background()
	c1, err := connectFD(ctx, h, cli, "127.0.0.1", p1)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	roundTrip(t, c1, "one")

	pid := peerPID(t, sock)
	defer func(d time.Duration) { revokeTimeout = d }(revokeTimeout)
	revokeTimeout = 300 * time.Millisecond
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { _ = unix.Kill(pid, unix.SIGCONT) }
	t.Cleanup(cont)
	testenv.WaitStopped(t, pid)
	err = v.SetGrants([]labels.Set{{Host: "127.0.0.1", Port: p2}})
	cont()
	if !errors.Is(err, ErrRevokeUnconfirmed) {
		t.Fatalf("SetGrants with the switchboard stopped = %v; want %v", err, ErrRevokeUnconfirmed)
	}
	if got := v.Members(); len(got) != 1 || got[0].Port != p2 {
		t.Errorf("Members() = %v; want the new grant in force all the same", got)
	}
	// The revocation was sent: once the switchboard runs, it shuts the
	// connection.
	if !readEOF(t, c1, 5*time.Second) {
		t.Errorf("the connection to port %d is still open after the switchboard ran again", p1)
	}
}

// peerPID returns the pid of the process listening on the unix socket
// sock (SO_PEERCRED of a connection to it).
func peerPID(t *testing.T, sock string) int {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cred *unix.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) { cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return int(cred.Pid)
}
