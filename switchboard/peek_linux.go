package switchboard

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"toybox/labels"
)

// awaitServerHello waits (until deadline) for the first bytes the server
// answers the ClientHello with, without taking them: the caller gets the
// socket with every byte still in it. A TLS 1.3 server that does not take
// the client's key share asks for a second ClientHello
// (HelloRetryRequest), which the switchboard never sees, and a server may
// serve the name that second hello names (OpenSSL does): so a
// HelloRetryRequest is refused, and the connect fails before the socket is
// handed over.
func awaitServerHello(c net.Conn, deadline time.Time) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	// Wake only once the head has come (or the stream ended): then one
	// peek reads it.
	var serr error
	_ = rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, serverHelloHead)
	})
	if serr != nil {
		return fmt.Errorf("awaiting the server's hello: %w", serr)
	}
	serr = nil
	defer func() {
		_ = rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) })
	}()
	_ = tc.SetReadDeadline(deadline)
	defer func() { _ = tc.SetReadDeadline(time.Time{}) }()
	head := make([]byte, serverHelloHead)
	var n, last int
	err = rc.Read(func(fd uintptr) bool {
		var rerr error
		n, _, rerr = unix.Recvfrom(int(fd), head, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case errors.Is(rerr, unix.EAGAIN):
			return false
		case rerr != nil:
			serr = rerr
			return true
		case n >= serverHelloHead, n == 0, n > 0 && head[0] != recordHandshake:
			return true // the head; the end; or not a handshake (an alert)
		case n == last:
			return true // no more will come (the stream ended short)
		}
		last = n
		return false
	})
	switch {
	case err != nil || serr != nil:
		// No answer in time, or the server hung up: the caller gets the
		// socket and sees for itself, as it would without this look.
		return nil
	case isHelloRetry(head[:n]):
		return labels.Refuse("the server asked for a second ClientHello (a TLS 1.3 HelloRetryRequest), which the switchboard cannot check against the grant; offer a key share the server takes (X25519)")
	}
	return nil
}
