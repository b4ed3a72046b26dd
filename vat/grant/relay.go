package grant

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"toybox/vat/relay"
)

// relayed takes f, a TCP socket the switchboard connected, and returns one
// end of a unix socketpair; the supervisor relays the other end to f until
// both directions are done.
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
func relayed(f *os.File) (*os.File, error) {
	nc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		relay.Shutdown(nc)
		return nil, os.NewSyscallError("socketpair", err)
	}
	if err := unix.Bind(fds[1], &unix.SockaddrUnix{}); err != nil {
		_ = unix.Close(fds[0])
		_ = unix.Close(fds[1])
		relay.Shutdown(nc)
		return nil, fmt.Errorf("binding the app's end: %w", os.NewSyscallError("bind", err))
	}
	mine := os.NewFile(uintptr(fds[0]), "relay")
	mc, err := net.FileConn(mine)
	_ = mine.Close()
	if err != nil {
		_ = unix.Close(fds[1])
		relay.Shutdown(nc)
		return nil, err
	}
	go func() {
		_, _, _ = relay.Pair(nc, mc)
		relay.Shutdown(nc)
		_ = mc.Close()
	}()
	return os.NewFile(uintptr(fds[1]), "relayed-socket"), nil
}
