package labels

import (
	"fmt"
	"strconv"
)

// Request is what a caller presents to a handle: where it wants to go.
type Request struct {
	Scheme string // "http", "https", "tcp"
	Host   string // canonical (see CanonicalHost); a non-canonical host is canonicalised before matching
	Port   uint16 // 0 = the scheme's default (http 80, https 443; tcp has none and is refused)
	// Class is the address class the switchboard found for Host: "public"
	// or "local". "" means not yet known: the network label is then not
	// judged, and the caller must ask again with the class before dialing.
	Class string
}

// Decision is the outcome of Admit: whether the request is admitted, and
// why, in words a person can act on. Reason carries no "egress refused:"
// prefix; the caller adds its own.
type Decision struct {
	Allow  bool
	Reason string
}

// SchemeRefused is the reason a request is refused for its scheme alone: a
// caller that can speak another scheme to the same address (toybox-entry:
// TLS to a port granted only as https) knows from it to ask again.
func SchemeRefused(scheme string) string { return "scheme " + scheme + " not granted" }

func deny(format string, args ...any) Decision {
	return Decision{Reason: fmt.Sprintf(format, args...)}
}

// Admit decides whether s admits r. It is pure and denies by default: a
// malformed request or set is refused with the reason. Every key s sets
// must match; a missing key matches anything; vat is not judged (it is
// identity, not reach).
func (s Set) Admit(r Request) Decision {
	c, err := Canonical(s)
	if err != nil {
		return deny("the handle's labels are invalid: %v", err)
	}
	if c != s {
		return deny("the handle's labels are not canonical: %s", s)
	}
	switch r.Scheme {
	case "http", "https", "tcp":
	case "":
		return deny("request has no scheme")
	default:
		return deny("scheme %q not supported (http, https or tcp)", r.Scheme)
	}
	if r.Host == "" {
		return deny("request has no host")
	}
	host, err := CanonicalHost(r.Host)
	if err != nil {
		return deny("%v", err)
	}
	port := r.Port
	if port == 0 {
		port = DefaultPort(r.Scheme)
		if port == 0 {
			return deny("a %s request needs a port", r.Scheme)
		}
	}
	switch r.Class {
	case "", NetworkPublic, NetworkLocal:
	default:
		return deny("unknown address class %q", r.Class)
	}

	if s.Host != "" && s.Host != host {
		return deny("egress to %s not granted", host)
	}
	if s.Scheme != "" && s.Scheme != r.Scheme {
		return deny("%s", SchemeRefused(r.Scheme))
	}
	if s.Port != 0 && s.Port != port {
		return deny("port %d not granted", port)
	}
	if s.Network == NetworkPublic && r.Class == NetworkLocal {
		return deny("%s is a local address; this handle reaches public addresses only", host)
	}
	reason := "granted by " + s.String()
	if r.Class == "" && s.Network == NetworkPublic {
		reason += " (address class not yet checked)"
	}
	return Decision{Allow: true, Reason: reason}
}

// Constrain returns base narrowed by narrow. Labels accumulate: a key set
// on one side only is taken; a key set on both must agree, else the error
// wraps ErrConflict and names the key and both values. Ports compare as
// canonical: {"scheme":"https"} is on port 443 (Canonical), so narrowing it
// to {"port":8443}, or {"port":8443} to {"scheme":"https"}, is a conflict.
// network is ordered: a local base narrowed to public is public; a public
// base asked to become local is an error wrapping ErrWiden. Both sets are
// validated first (errors wrap ErrBadLabel). Whatever the result admits,
// base and narrow both admit.
func Constrain(base, narrow Set) (Set, error) {
	b, err := Canonical(base)
	if err != nil {
		return Set{}, fmt.Errorf("constraining: handle labels: %w", err)
	}
	n, err := Canonical(narrow)
	if err != nil {
		return Set{}, fmt.Errorf("constraining: %w", err)
	}
	out := b
	pick := func(key string, bv, nv string, dst *string) error {
		switch {
		case nv == "":
		case bv == "":
			*dst = nv
		case bv != nv:
			return fmt.Errorf("%w: %s %q (handle) vs %q (requested)", ErrConflict, key, bv, nv)
		}
		return nil
	}
	if err := pick("scheme", b.Scheme, n.Scheme, &out.Scheme); err != nil {
		return Set{}, err
	}
	if err := pick("host", b.Host, n.Host, &out.Host); err != nil {
		return Set{}, err
	}
	if err := pick("origin", b.Origin, n.Origin, &out.Origin); err != nil {
		return Set{}, err
	}
	if err := pick("vat", b.Vat, n.Vat, &out.Vat); err != nil {
		return Set{}, err
	}
	switch {
	case n.Port == 0:
	case b.Port == 0:
		out.Port = n.Port
	case b.Port != n.Port:
		return Set{}, fmt.Errorf("%w: port %s (handle) vs %s (requested)", ErrConflict,
			strconv.Itoa(int(b.Port)), strconv.Itoa(int(n.Port)))
	}
	switch {
	case n.Network == "" || n.Network == b.Network:
	case b.Network == "" || b.Network == NetworkLocal && n.Network == NetworkPublic:
		out.Network = n.Network
	default: // public base, local narrow
		return Set{}, fmt.Errorf("%w: network %q cannot become %q", ErrWiden, b.Network, n.Network)
	}
	return out, nil
}
