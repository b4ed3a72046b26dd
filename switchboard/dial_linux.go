package switchboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"toybox/schema/wire/quiet"
)

// dialHandOver connects to ap for a socket that will be handed over. It is
// net.Dialer's dial without what a handed-over socket does not need (the
// address lookups, Go's own connection wrapper): about half its system
// calls, on the path of every connect. It sets TCP_NODELAY and keep-alives
// as the server's net.Dialer does (probes after 30 s idle, every 15 s, 9 of
// them). The socket it returns may be blocking: no deadlines on it.
func dialHandOver(ctx context.Context, ap netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	return dialHandOverMode(ctx, ap, timeout, false)
}

// startHandOver is dialHandOver for a caller whose own connect was
// non-blocking: a connect still under way after its first poll is not
// waited for, and the socket goes back with its handshake in progress
// (the caller sees the end of it, or its error, on the socket itself).
func startHandOver(ctx context.Context, ap netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	return dialHandOverMode(ctx, ap, timeout, true)
}

func dialHandOverMode(ctx context.Context, ap netip.AddrPort, timeout time.Duration, inProgress bool) (net.Conn, error) {
	// Every call up to the hand-over is a quiet one (package quiet says
	// why): none of them blocks.
	family := unix.AF_INET6
	switch a := ap.Addr().Unmap(); {
	case a.Is4():
		family = unix.AF_INET
	case a.Zone() != "":
		// Vetted addresses carry no zone (link-local ones are refused);
		// one that does is not dialled on a guess.
		return nil, opErr(ap, fmt.Errorf("address %s has a zone", a))
	}
	fd, err := quiet.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, opErr(ap, os.NewSyscallError("socket", err))
	}
	for _, o := range [][3]int{
		{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1},
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 30},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9},
	} {
		if err := quiet.SetsockoptInt(fd, o[0], o[1], o[2]); err != nil {
			_ = quiet.Close(fd)
			return nil, opErr(ap, os.NewSyscallError("setsockopt", err))
		}
	}
	err = quiet.Connect(fd, ap)
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		_ = quiet.Close(fd)
		return nil, opErr(ap, os.NewSyscallError("connect", err))
	}
	done := err == nil
	if !done {
		// To a loopback or near address the handshake is over by the time
		// connect returns: one poll says so, and nothing else is needed.
		if done, err = connectedNow(fd); err != nil {
			_ = quiet.Close(fd)
			return nil, opErr(ap, err)
		}
	}
	if done || inProgress {
		// Blocking from here, as a handed-over socket goes (and then
		// os.NewFile leaves it out of the runtime's poller). F_SETFL sets
		// the status flags outright: O_NONBLOCK is the only one this
		// socket has, so no F_GETFL first.
		if _, err := quiet.FcntlInt(fd, unix.F_SETFL, 0); err != nil {
			_ = quiet.Close(fd)
			return nil, opErr(ap, os.NewSyscallError("fcntl", err))
		}
		return &handOverConn{File: os.NewFile(uintptr(fd), "tcp:"+ap.String()), remote: net.TCPAddrFromAddrPort(ap), blocking: true}, nil
	}
	// Still connecting: os.NewFile puts the non-blocking descriptor in
	// the runtime's poller, where the wait parks only this goroutine.
	f := os.NewFile(uintptr(fd), "tcp:"+ap.String())
	if err := waitConnected(ctx, f, timeout); err != nil {
		_ = f.Close()
		return nil, opErr(ap, err)
	}
	return &handOverConn{File: f, remote: net.TCPAddrFromAddrPort(ap)}, nil
}

// TCP states of tcp_info (include/net/tcp_states.h) that say a
// non-blocking connect is not over (SYN_SENT) or failed (CLOSE); any
// other one means the handshake is done.
const (
	tcpSynSent = 2
	tcpClose   = 7
)

// connectedNow reports whether fd's non-blocking connect is done, without
// waiting. One getsockopt(TCP_INFO) says so in the usual cases (the
// handshake done, or still under way); a connect that failed is asked
// again with poll and SO_ERROR (pollConnected), for its error.
func connectedNow(fd int) (bool, error) {
	state, err := quiet.TCPState(fd)
	if err == nil {
		switch state {
		case tcpSynSent:
			return false, nil
		case tcpClose:
		default:
			return true, nil
		}
	}
	return pollConnected(fd)
}

// pollConnected is connectedNow the long way: writable with no pending
// error is connected; a pending error is the connect's.
func pollConnected(fd int) (bool, error) {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(p, 0)
	if err != nil && !errors.Is(err, unix.EINTR) {
		return false, os.NewSyscallError("poll", err)
	}
	if n == 0 || p[0].Revents == 0 {
		return false, nil
	}
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	switch {
	case err != nil:
		return false, os.NewSyscallError("getsockopt", err)
	case v != 0:
		return false, os.NewSyscallError("connect", unix.Errno(v))
	}
	return p[0].Revents&unix.POLLOUT != 0, nil
}

// waitConnected waits until f's non-blocking connect is done, for at most
// timeout and while ctx lives.
func waitConnected(ctx context.Context, f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := f.SetWriteDeadline(deadline); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	// Write calls the func at once, then each time the socket turns
	// writable, until it returns true. A pending error ends the wait; no
	// error and a peer name mean connected; no error and no peer yet (the
	// first call, or a spurious wake-up) mean wait on.
	var cerr error
	if err := raw.Write(func(fd uintptr) bool {
		v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			cerr = os.NewSyscallError("getsockopt", err)
		case v == int(unix.EINPROGRESS) || v == int(unix.EALREADY) || v == int(unix.EINTR):
			return false
		case v != 0:
			cerr = os.NewSyscallError("connect", unix.Errno(v))
		default:
			if _, err := unix.Getpeername(int(fd)); errors.Is(err, unix.ENOTCONN) {
				return false
			} else if err != nil {
				cerr = os.NewSyscallError("getpeername", err)
			}
		}
		return true
	}); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err // the deadline: os.ErrDeadlineExceeded
	}
	if cerr != nil {
		return cerr
	}
	return f.SetWriteDeadline(time.Time{})
}

func opErr(ap netip.AddrPort, err error) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: err}
}

// handOverConn is a connected socket the switchboard hands over: an
// *os.File (which is a syscall.Conn, as handOver needs) that is a net.Conn
// too, for the ClientHello it may write first.
type handOverConn struct {
	*os.File
	remote *net.TCPAddr
	// blocking says the socket is in blocking mode already (handOver
	// need not look).
	blocking bool
}

// isBlocking reports whether the socket is in blocking mode already.
func (c *handOverConn) isBlocking() bool { return c.blocking }

// LocalAddr is not looked up (a system call nobody needs on this path).
func (c *handOverConn) LocalAddr() net.Addr  { return &net.TCPAddr{} }
func (c *handOverConn) RemoteAddr() net.Addr { return c.remote }
