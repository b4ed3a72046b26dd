//go:build !linux

package switchboard

import (
	"context"
	"net"
	"net/netip"
	"time"
)

// startHandOver is dialHandOver here: the connect is waited for.
func startHandOver(ctx context.Context, ap netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	return dialHandOver(ctx, ap, timeout)
}

// dialHandOver is net.Dialer's dial where sockets are not handed over.
func dialHandOver(ctx context.Context, ap netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return d.DialContext(ctx, "tcp", ap.String())
}
