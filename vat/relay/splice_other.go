//go:build !linux

package relay

import (
	"io"
	"net"
)

// Copy copies from src to dst until src's end (nil) or an error: io.Copy.
func Copy(dst, src net.Conn) (int64, error) { return io.Copy(dst, src) }
