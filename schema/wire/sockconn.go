package wire

import (
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// TakeConn claims the descriptor with sequence number seq, a connected
// stream socket, as a net.Conn in the runtime's poller (deadlines work).
// The caller owns the returned connection.
//
// It costs three system calls where TakeFD and net.FileConn cost about
// thirteen: net.FileConn duplicates the descriptor, asks its type and both
// addresses, and sets TCP_NODELAY and four keep-alive options, which the
// switchboard has set on the socket already. The addresses are asked for
// only when LocalAddr or RemoteAddr is called. The connection is not a
// *net.TCPConn: a relay that wants splice(2) (io.Copy between two
// *net.TCPConn) takes the descriptor with TakeFD and net.FileConn instead.
func (c *Conn) TakeConn(seq uint64) (*SockConn, error) {
	fd, err := c.TakeRawFD(seq)
	if err != nil {
		return nil, err
	}
	// The socket came in blocking mode; the poller needs it non-blocking.
	// F_SETFL sets the file status flags outright: a socket has no other
	// one that matters (O_APPEND means nothing to it), so no F_GETFL first.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("descriptor %d: %w", seq, os.NewSyscallError("fcntl", err))
	}
	return &SockConn{File: os.NewFile(uintptr(fd), fmt.Sprintf("wire-fd-%d", seq))}, nil
}

// SockConn is a connected stream socket taken with TakeConn: an *os.File in
// the runtime's poller that is also a net.Conn.
type SockConn struct {
	*os.File
}

var _ net.Conn = (*SockConn)(nil)

// LocalAddr returns the socket's own address (asked of the kernel at each
// call), or nil if it cannot be read.
func (s *SockConn) LocalAddr() net.Addr { return s.addr(unix.Getsockname) }

// RemoteAddr returns the peer's address (asked of the kernel at each call),
// or nil if it cannot be read.
func (s *SockConn) RemoteAddr() net.Addr { return s.addr(unix.Getpeername) }

func (s *SockConn) addr(get func(int) (unix.Sockaddr, error)) net.Addr {
	raw, err := s.SyscallConn()
	if err != nil {
		return nil
	}
	var sa unix.Sockaddr
	if err := raw.Control(func(fd uintptr) { sa, _ = get(int(fd)) }); err != nil {
		return nil
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: a.Addr[:], Port: a.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: a.Addr[:], Port: a.Port}
	case *unix.SockaddrUnix:
		return &net.UnixAddr{Name: a.Name, Net: "unix"}
	}
	return nil
}

// CloseWrite shuts down the writing side (the peer reads EOF).
func (s *SockConn) CloseWrite() error { return s.shutdown(unix.SHUT_WR) }

// CloseRead shuts down the reading side.
func (s *SockConn) CloseRead() error { return s.shutdown(unix.SHUT_RD) }

// Shutdown shuts the socket down both ways: every descriptor of it, in any
// process (the switchboard's copy included), sees the end.
func (s *SockConn) Shutdown() error { return s.shutdown(unix.SHUT_RDWR) }

func (s *SockConn) shutdown(how int) error {
	raw, err := s.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), how) }); err != nil {
		return err
	}
	if serr != nil {
		return os.NewSyscallError("shutdown", serr)
	}
	return nil
}

var _ syscall.Conn = (*SockConn)(nil)
