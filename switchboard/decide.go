package switchboard

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"toybox/labels"
	"toybox/switchboard/addrclass"
)

// decision is the full outcome of one request: labels, DNS and address
// classes. When allow is true, vetted holds the addresses that may be
// dialled (in resolver order).
type decision struct {
	allow  bool
	reason string
	req    labels.Request // canonical host, explicit port
	addrs  []netip.Addr   // every answer (or the literal)
	vetted []netip.Addr   // dialable forms of the admitted answers
	local  []bool         // vetted[i] reaches this host (loopback check applies)
}

// err returns the refusal as an error (nil when allowed).
func (d *decision) err() error {
	if d.allow {
		return nil
	}
	return labels.Refuse(d.reason)
}

// decide judges req against the handle's labels h: the name first (labels,
// metadata, deny list), then one lookup, then every answer's class. An
// error (not a refusal) means the name could not be resolved.
func (s *Server) decide(ctx context.Context, h labels.Set, req labels.Request) (*decision, error) {
	d := &decision{req: req}
	host, err := labels.CanonicalHost(req.Host)
	if err != nil {
		d.reason = strings.TrimPrefix(err.Error(), labels.ErrBadLabel.Error()+": ")
		return d, nil
	}
	d.req.Host = host
	if d.req.Port == 0 {
		d.req.Port = labels.DefaultPort(req.Scheme)
	}
	// 1. Labels, before any lookup: resolving a name the handle was never
	// granted would leak it through DNS.
	if dec := h.Admit(d.req); !dec.Allow {
		d.reason = dec.Reason
		return d, nil
	}
	network := h.Network
	if network == "" {
		network = labels.NetworkPublic // strictest when unset
	}
	// 2. The name itself, then its addresses.
	literal, isLiteral := parseLiteral(host)
	if isLiteral {
		d.addrs = []netip.Addr{literal}
	} else {
		if v, ok := s.classify().Name(host); ok {
			d.reason = fmt.Sprintf("%s is %s", host, v.What)
			return d, nil
		}
		if labels.LoopbackHost(host) {
			// RFC 6761 6.3: loopback, answered here and never asked of DNS.
			d.addrs = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
		} else {
			addrs, err := s.lookup(ctx, host)
			if err != nil {
				return d, err
			}
			d.addrs = addrs
		}
	}
	// 3. Every answer must be admissible; one bad answer refuses the name.
	class := labels.NetworkPublic
	for _, a := range d.addrs {
		v := s.judge(a)
		if !v.Admits(network) {
			d.reason = describeRefusal(host, a, isLiteral, v, network)
			d.vetted, d.local = nil, nil
			return d, nil
		}
		if v.Class == addrclass.Local {
			class = labels.NetworkLocal
		}
		d.vetted = append(d.vetted, addrclass.Dialable(a))
		d.local = append(d.local, v.Loopback)
	}
	// 4. The labels again, now with the class known.
	d.req.Class = class
	dec := h.Admit(d.req)
	if !dec.Allow {
		d.reason = dec.Reason
		d.vetted, d.local = nil, nil
		return d, nil
	}
	d.allow, d.reason = true, dec.Reason
	return d, nil
}

// judge classifies a, then asks the kernel whether a connection to it
// would stay on this host: the list of this host's addresses is a snapshot
// (read every 15 s) and knows no local routes, so an address that appeared
// since, or one a local route covers (`ip route add local ... dev lo`),
// would otherwise be dialled with no listener-owner check. One that routes
// here is judged as this host's own. A route that cannot be read refuses
// the address.
func (s *Server) judge(a netip.Addr) addrclass.Verdict {
	v := s.classify().Addr(a)
	if v.Class == addrclass.Never || v.Loopback {
		return v
	}
	// A form dialled as IPv6 to a translator (NAT64, SIIT, 6to4, Teredo)
	// that carries an address of this host is never reachable, as
	// Classifier.Addr rules for the snapshot of own addresses: the
	// routing table is asked about the embedded address too, so one that
	// appeared since the snapshot, or one a local route covers, is not
	// reached through a hairpinning translator past the owner check.
	for _, e := range addrclass.Translated(a) {
		here, err := routesHere(e)
		switch {
		case err != nil:
			return addrclass.Verdict{Class: addrclass.Never, What: fmt.Sprintf("an address embedding %s, whose route could not be read (%v)", e, err)}
		case here:
			return addrclass.Verdict{Class: addrclass.Never, What: fmt.Sprintf("an address embedding %s, an address of this host (its routing table says so)", e)}
		}
	}
	here, err := routesHere(a)
	switch {
	case err != nil:
		return addrclass.Verdict{Class: addrclass.Never, What: fmt.Sprintf("an address whose route could not be read (%v)", err)}
	case here && v.Class == addrclass.Public:
		return addrclass.Verdict{Class: addrclass.Local, What: "an address of this host (its routing table says so)", Loopback: true}
	case here:
		v.Loopback = true
	}
	return v
}

func describeRefusal(host string, a netip.Addr, literal bool, v addrclass.Verdict, network string) string {
	var b strings.Builder
	if literal {
		fmt.Fprintf(&b, "%s is %s", host, v.What)
	} else {
		fmt.Fprintf(&b, "%s resolves to %s, %s", host, a, v.What)
	}
	if v.Class == addrclass.Local && network == labels.NetworkPublic {
		b.WriteString("; this handle reaches public addresses only")
	}
	return b.String()
}

// parseLiteral reports whether a canonical host is an IP literal.
func parseLiteral(host string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a, true
}
