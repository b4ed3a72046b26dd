package switchboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// newResolver returns a resolver that asks server (ip:port), or the
// system's configuration when server is empty. It always uses Go's own
// resolver so the answers are exactly what the switchboard judges.
func newResolver(server string) *net.Resolver {
	r := &net.Resolver{PreferGo: true}
	if server != "" {
		var d net.Dialer
		r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, server)
		}
	}
	return r
}

// lookup resolves host once, as an absolute name (no search domains), and
// returns every answer. No answers is an error wrapping ErrResolve.
func (s *Server) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ResolveTimeout)
	defer cancel()
	addrs, err := s.resolver.LookupNetIP(ctx, "ip", host+".")
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return nil, fmt.Errorf("%w: %s: no such host", ErrResolve, host)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrResolve, host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: %s has no addresses", ErrResolve, host)
	}
	return addrs, nil
}
