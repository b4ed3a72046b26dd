// Package addrclass classifies IP addresses for the switchboard.
//
// Each is public (globally reachable unicast), local (loopback, private, shared,
// unique-local, link-local) or never (everything else, and cloud metadata).
// The table is built from the IANA IPv4 and IPv6 special-purpose address
// registries, not from net.IP.IsGlobalUnicast, which calls many reserved
// blocks global. IPv6 forms that embed an IPv4 address are judged by the
// embedded address or refused.
package addrclass

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Class is how far an address may be reached.
type Class int

// The classes, from most to least reachable.
const (
	// Never is refused on every handle.
	Never Class = iota
	// Local is reachable only through a local handle.
	Local
	// Public is reachable through any handle.
	Public
)

func (c Class) String() string {
	switch c {
	case Public:
		return "public"
	case Local:
		return "local"
	default:
		return "never"
	}
}

// Verdict is the classification of one address.
type Verdict struct {
	Class Class
	// What names the address's kind as a noun phrase that fits after the
	// address in a sentence: "a private address", "a 6to4 address embedding
	// 10.0.0.7, a private address".
	What string
	// Loopback reports whether a connection to the address reaches this host
	// (a loopback address, or one of the host's own addresses).
	Loopback bool
}

// Admits reports whether a handle on network ("public" or "local") may
// reach an address with this verdict.
func (v Verdict) Admits(network string) bool {
	switch v.Class {
	case Public:
		return network == "public" || network == "local"
	case Local:
		return network == "local"
	default:
		return false
	}
}

// Classify classifies a by the registries and the metadata list alone. The
// zone of a scoped address is ignored; an invalid address is never.
func Classify(a netip.Addr) Verdict {
	if !a.IsValid() {
		return Verdict{Class: Never, What: "not an IP address"}
	}
	a = a.WithZone("")
	if r, ok := longest(metadataRows, a); ok {
		return Verdict{Class: r.class, What: r.what}
	}
	if a.Is4() {
		return classify4(a)
	}
	r, _ := longest(ipv6Rows, a) // ::/0 always matches
	switch r.embed {
	case embedNone:
		return Verdict{Class: r.class, What: r.what, Loopback: r.class == Local && a.IsLoopback()}
	case embedLow32:
		return embedded(r.what, low32(a))
	case embed6to4:
		b := a.As16()
		return embedded(r.what, netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
	case embedTeredo:
		b := a.As16()
		server := netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]})
		client := netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
		vs, vc := classify4Meta(server), classify4Meta(client)
		if vs.Loopback || vc.Loopback {
			return Verdict{Class: Never, What: fmt.Sprintf("%s embedding a loopback address (server %s, client %s)", r.what, server, client)}
		}
		if vs.Class < vc.Class {
			return Verdict{Class: vs.Class, What: fmt.Sprintf("%s with server %s, %s", r.what, server, vs.What)}
		}
		return Verdict{Class: vc.Class, What: fmt.Sprintf("%s embedding %s, %s", r.what, client, vc.What)}
	case embedCompat:
		return Verdict{Class: Never, What: fmt.Sprintf("%s (embedding %s)", r.what, low32(a))}
	default: // embedLocalUse
		return Verdict{Class: Never, What: r.what + " (its embedded IPv4 address cannot be judged)"}
	}
}

// embedded judges an IPv6 form by the IPv4 address it carries. A mapped
// address is dialled as that IPv4 address (Dialable unmaps it) and judged
// as it. Any other form is dialled as IPv6, to whatever translates it
// (NAT64, SIIT, a 6to4 relay): one that carries a loopback address is
// never reachable, since a translator that hairpins would reach a host's
// own listeners with no listener-owner check between.
func embedded(what string, v4 netip.Addr) Verdict {
	v := classify4Meta(v4)
	mapped := strings.Contains(what, "IPv4-mapped")
	if v.Loopback && !mapped {
		return Verdict{Class: Never, What: fmt.Sprintf("%s embedding %s, a loopback address", what, v4)}
	}
	return Verdict{Class: v.Class, What: fmt.Sprintf("%s embedding %s, %s", what, v4, v.What), Loopback: v.Loopback && mapped}
}

func classify4Meta(a netip.Addr) Verdict {
	if r, ok := longest(metadataRows, a); ok {
		return Verdict{Class: r.class, What: r.what}
	}
	return classify4(a)
}

func classify4(a netip.Addr) Verdict {
	r, ok := longest(ipv4Rows, a)
	if !ok {
		return Verdict{Class: Public, What: "a public address"}
	}
	return Verdict{Class: r.class, What: r.what, Loopback: r.prefix == loop4}
}

var loop4 = netip.MustParsePrefix("127.0.0.0/8")

func low32(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
}

// longest returns the most specific row containing a.
func longest(rows []row, a netip.Addr) (row, bool) {
	best, found := row{}, false
	for _, r := range rows {
		if r.prefix.Addr().Is4() != a.Is4() || !r.prefix.Contains(a) {
			continue
		}
		if !found || r.prefix.Bits() > best.prefix.Bits() {
			best, found = r, true
		}
	}
	return best, found
}

// Dialable returns the address to dial for a: an IPv4-mapped address is
// dialled as the IPv4 address it maps (so that the address judged is the one
// the kernel connects to); a zone is kept.
func Dialable(a netip.Addr) netip.Addr {
	if a.Is4In6() {
		return a.Unmap()
	}
	return a
}

// IsMetadataName reports whether host (canonical: lower case, no trailing
// dot) is a cloud metadata name or a name below one.
func IsMetadataName(host string) bool {
	return matchName(MetadataNames, host)
}

// matchName reports whether host equals one of names or lies below one.
func matchName(names []string, host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, n := range names {
		n = strings.TrimSuffix(strings.ToLower(n), ".")
		if n == "" {
			continue
		}
		if host == n || strings.HasSuffix(host, "."+n) {
			return true
		}
	}
	return false
}

// Classifier adds what an operator knows about this host to the registry
// table: its own addresses and names, and a deny list. The zero value is
// the registry table alone.
type Classifier struct {
	// Deny lists prefixes that are never reachable (class never).
	Deny []netip.Prefix
	// DenyNames lists host names refused when asked for, with every name
	// below them (Name judges the name asked, not where its answer leads).
	DenyNames []string
	// Own lists this host's addresses (every interface). They are never
	// public: class local, and loopback (a connection to them reaches this
	// host's listeners).
	Own []netip.Addr
	// PublicNames lists this host's own public names: never reachable.
	PublicNames []string
}

// Addr classifies a with the registries, the metadata list, the deny list
// and the host's own addresses, strictest first.
func (c *Classifier) Addr(a netip.Addr) Verdict {
	v := Classify(a)
	if v.Class == Never || c == nil {
		return v
	}
	u := a.WithZone("").Unmap()
	emb := embeddedOf(a)
	for _, d := range c.Deny {
		if d.Contains(u) || (u.Is6() && d.Contains(a.WithZone(""))) {
			return Verdict{Class: Never, What: fmt.Sprintf("an address on the operator's deny list (%s)", d)}
		}
		for _, e := range emb {
			if d.Contains(e) {
				return Verdict{Class: Never, What: fmt.Sprintf("an address embedding %s, on the operator's deny list (%s)", e, d)}
			}
		}
	}
	for _, o := range c.Own {
		o = o.WithZone("").Unmap()
		// This host's address in a translated form (NAT64, SIIT, 6to4,
		// Teredo) reaches this host through a translator that hairpins,
		// past the owner check: never. The mapped form is unmapped above
		// and judged as the address itself.
		if !a.Is4In6() {
			for _, e := range emb {
				if e == o {
					return Verdict{Class: Never, What: fmt.Sprintf("an address embedding %s, an address of this host", e)}
				}
			}
		}
		if o == u {
			if v.Class == Public {
				return Verdict{Class: Local, What: "an address of this host", Loopback: true}
			}
			v.Loopback = true
			return v
		}
	}
	return v
}

// Name judges a host name before any lookup: a metadata name, a denied name
// or one of this host's public names is refused. It sees only the name
// asked for: a name that is a CNAME to one of these is judged by its
// addresses. ok is false when the name itself says nothing and its
// addresses decide.
func (c *Classifier) Name(host string) (v Verdict, ok bool) {
	switch {
	case IsMetadataName(host):
		return Verdict{Class: Never, What: "a cloud metadata name"}, true
	case c != nil && matchName(c.DenyNames, host):
		return Verdict{Class: Never, What: "a name on the operator's deny list"}, true
	case c != nil && matchName(c.PublicNames, host):
		return Verdict{Class: Never, What: "a public name of this host"}, true
	}
	return Verdict{}, false
}

// Translated returns the IPv4 addresses an IPv6 form other than mapped
// carries (NAT64, SIIT, 6to4, Teredo server and client, compatible): the
// forms dialled as IPv6, to a translator. A mapped address, dialled as the
// IPv4 address itself, and any other address return nil.
func Translated(a netip.Addr) []netip.Addr {
	if a.Is4In6() {
		return nil
	}
	return embeddedOf(a)
}

// embeddedOf returns the IPv4 addresses an IPv6 form carries, if any (a
// Teredo address carries two: its server's and its client's).
func embeddedOf(a netip.Addr) []netip.Addr {
	a = a.WithZone("")
	if !a.Is6() {
		return nil
	}
	r, _ := longest(ipv6Rows, a)
	b := a.As16()
	switch r.embed {
	case embedLow32, embedCompat:
		return []netip.Addr{low32(a)}
	case embed6to4:
		return []netip.Addr{netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})}
	case embedTeredo:
		return []netip.Addr{
			netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}),
			netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}),
		}
	}
	return nil
}

// InterfaceAddrs returns the addresses of every interface of this host.
func InterfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing interface addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, pfx.Addr())
		}
	}
	return out, nil
}
