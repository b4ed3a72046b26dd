package switchboard

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"toybox/labels"
)

// Policy is what a running Server takes again without a restart: the
// operator's deny list.
type Policy struct {
	// Deny and DenyNames are as in Config.
	Deny      []netip.Prefix
	DenyNames []string
}

// Reload replaces the deny list with p's, then judges every connection
// still open (handed over, or held for a request or a WebSocket) again:
// one whose host name, or whose dialled address, the new list refuses for
// its handle is shut at once, with a decision record that says why. It
// returns how many it shut.
func (s *Server) Reload(p Policy) (int, error) {
	deny := make([]netip.Prefix, 0, len(p.Deny))
	for _, d := range p.Deny {
		u, err := unmapPrefix(d)
		if err != nil {
			return 0, fmt.Errorf("%w: Deny %s: %w", ErrConfig, d, err)
		}
		deny = append(deny, u)
	}
	s.classMu.Lock()
	s.deny, s.denyNames = deny, slices.Clone(p.DenyNames)
	s.storeClassesLocked()
	s.classMu.Unlock()

	s.heldMu.Lock()
	open := make([]*held, 0, len(s.helds))
	for x := range s.helds {
		open = append(open, x)
	}
	s.heldMu.Unlock()
	shut := 0
	for _, x := range open {
		why := s.refusedNow(x)
		if why == "" {
			continue
		}
		x.owner.logDecision("revoke", x.host, nil, remoteAddr(x.conn), false, why+" (the deny list changed; the connection was shut)")
		x.shut()
		shut++
	}
	s.log.Info("deny list reloaded", "deny", len(deny), "deny_names", len(p.DenyNames), "shut", shut)
	return shut, nil
}

// refusedNow says why the policy as it is now refuses x's connection, or
// "": its host name, then the address it is connected to, judged for its
// handle's network as a new connection would be.
func (s *Server) refusedNow(x *held) string {
	network := x.owner.labels.Network
	if network == "" {
		network = labels.NetworkPublic
	}
	host := x.host
	if _, literal := parseLiteral(host); !literal && host != "" {
		if v, ok := s.classify().Name(host); ok {
			return fmt.Sprintf("%s is %s", host, v.What)
		}
	}
	ap, err := netip.ParseAddrPort(remoteAddr(x.conn))
	if err != nil {
		return ""
	}
	a := ap.Addr().Unmap()
	if v := s.classify().Addr(a); !v.Admits(network) {
		return describeRefusal(host, a, host == a.String(), v, network)
	}
	return ""
}

func remoteAddr(c net.Conn) string {
	if a := c.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}
