package grant

import (
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"toybox/vat/relay"
	"toybox/vat/sockpair"
)

// MaxAppSockets is how many relayed sockets one vat's app may hold open at
// once, unless its VatConfig.MaxSockets says otherwise. Each costs the
// supervisor two sockets, two goroutines and, while bytes move, a pipe per
// direction. Past it a connect fails with ErrSockets.
const MaxAppSockets = 1024

// relayed takes f, a TCP socket the switchboard connected, and returns one
// end of a unix socketpair; the supervisor relays the other end to f
// (relayApp) until the connection ends. It calls done once the relay has
// ended, or at once when it fails. A socket it refuses (past
// VatConfig.MaxSockets, or one it cannot relay) is shut down, not only closed.
//
// Why not f itself: f belongs to the switchboard's network namespace, and
// connect(2) with AF_UNSPEC disconnects a TCP socket, after which connect,
// bind and listen work again, from there, to anything. No socket option
// forbids it and seccomp cannot read the address, so a socket that reached
// the switchboard's network must never be in an app's hands.
//
// The returned end is bound to an autobound abstract name, so the app
// cannot bind it to a name of its choosing in the supervisor's network
// namespace; a connected unix stream socket cannot connect again.
func (v *Vat) relayed(f *os.File, done func()) (*os.File, error) {
	if limit := int64(v.cfg.MaxSockets); v.sockets.Add(1) > limit {
		v.sockets.Add(-1)
		shutFile(f)
		done()
		return nil, fmt.Errorf("vat %s: %w (%d; close one first)", v.cfg.ID, ErrSockets, limit)
	}
	nc, err := net.FileConn(f)
	if err != nil {
		shutFile(f)
		v.sockets.Add(-1)
		done()
		return nil, err
	}
	_ = f.Close()
	fail := func(err error) (*os.File, error) {
		relay.Shutdown(nc)
		v.sockets.Add(-1)
		done()
		return nil, err
	}
	mc, theirs, err := sockpair.Pair("relayed-socket")
	if err != nil {
		return fail(err)
	}
	go func() {
		defer done()
		defer v.sockets.Add(-1)
		relayApp(nc, mc, v.cfg.HangUpGrace)
	}()
	return theirs, nil
}

// shutFile ends the connection of f, a socket the switchboard handed over,
// and closes f. The switchboard keeps a duplicate of every socket it hands
// over, so close(2) alone would leave the connection open, at the remote
// and in the switchboard's count of the vat's connections, until the vat
// restarts.
func shutFile(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	}
	_ = f.Close()
}

// DefaultHangUpGrace is how long the remote has, once the app's end is
// gone, to take what the app wrote before it went; then the connection
// ends. VatConfig.HangUpGrace overrides it.
const DefaultHangUpGrace = 30 * time.Second

// relayApp moves bytes between nc (the switchboard's socket) and mc (the
// supervisor's end of the app's pair) until the connection is over, then
// closes both. The app's end of stream is a half-close (its SHUT_WR),
// passed on to the remote; its end going away entirely (close, exit, or
// SHUT_RDWR: a hang-up on mc) ends the connection both ways, even while the
// remote keeps its side open and silent, or does not read, so neither this
// relay nor the switchboard's count of the vat's connections outlives the
// app's socket by more than grace.
func relayApp(nc net.Conn, mc *net.UnixConn, grace time.Duration) {
	down := make(chan struct{}) // the remote's bytes are all with the app
	go func() {
		defer close(down)
		if _, err := relay.Copy(mc, nc); err != nil {
			relay.Shutdown(nc)
			relay.Shutdown(mc)
			return
		}
		_ = mc.CloseWrite()
	}()
	hup := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		if watchHangUp(mc, stop) {
			close(hup)
			// What the app wrote last may still be on its way: the
			// remote has grace to take it.
			_ = nc.SetWriteDeadline(time.Now().Add(grace))
		}
	}()
	if _, err := relay.Copy(nc, mc); err != nil {
		relay.Shutdown(nc)
		relay.Shutdown(mc)
	} else {
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		select {
		case <-hup:
		case <-down:
		}
	}
	close(stop)
	relay.Shutdown(nc) // ends the remote's direction, if it still runs
	<-down
	_ = mc.Close()
}

// watchHangUp reports true once the app's end of the pair is gone (POLLHUP
// on mc: closed, or shut down both ways), false once stop is closed. It
// watches a duplicate of mc, registered with the runtime's poller on its
// own, so it runs beside the copies that read and write mc.
func watchHangUp(mc *net.UnixConn, stop <-chan struct{}) bool {
	f, err := mc.File() // a duplicate
	if err != nil {
		return false
	}
	dc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return false
	}
	defer dc.Close()
	raw, err := dc.(*net.UnixConn).SyscallConn()
	if err != nil {
		return false
	}
	go func() {
		<-stop
		_ = dc.SetReadDeadline(time.Now()) // wakes the wait below
	}()
	hung := false
	// Read calls the func again each time the poller reports the socket
	// (data, or a hang-up); it never reads.
	_ = raw.Read(func(fd uintptr) bool {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 0)
		hung = err == nil && n > 0 && p[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
		return hung
	})
	return hung
}
