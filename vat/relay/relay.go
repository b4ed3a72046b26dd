// Package relay moves bytes between two stream connections, half-close
// aware.
//
// It serves toybox-entry's CONNECT proxy (a client in the wall and the socket the
// switchboard connected). (The supervisor's relay for sockets an app asks
// for on its fd 3, vat/grant, ends on the app's hang-up as well.)
package relay

import (
	"net"
	"sync"
)

// Pair relays a<->b until both directions are done and returns the bytes
// each way and the first error either direction met. A direction that ends
// cleanly half-closes its destination; one that fails ends both
// connections. Pair does not close a or b: the caller does.
//
// Each direction is Copy: between sockets, splice(2) through a pipe held
// only while bytes move, so an idle connection costs its two sockets.
func Pair(a, b net.Conn) (ab, ba int64, err error) {
	var wg sync.WaitGroup
	wg.Add(2)
	errs := make(chan error, 2)
	one := func(dst, src net.Conn, count *int64) {
		defer wg.Done()
		n, err := Copy(dst, src)
		*count = n
		if err != nil {
			errs <- err
			// A broken direction ends both.
			Shutdown(dst)
			Shutdown(src)
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go one(b, a, &ab)
	go one(a, b, &ba)
	wg.Wait()
	select {
	case err = <-errs:
	default:
	}
	return ab, ba, err
}

// Shutdown ends c both ways, then closes it. A socket the switchboard
// handed over has a duplicate in the switchboard, so close(2) alone would
// send no FIN.
func Shutdown(c net.Conn) {
	type halfCloser interface {
		CloseRead() error
		CloseWrite() error
	}
	if hc, ok := c.(halfCloser); ok {
		_ = hc.CloseRead()
		_ = hc.CloseWrite()
	}
	_ = c.Close()
}
