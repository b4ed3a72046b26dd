// Package labels is the one implementation of toybox's egress label rules.
//
// It holds label sets ({scheme, host, port, network, vat}) parsed from JSON or the
// legacy bare host[:port] spelling, canonicalised, narrowed with Constrain,
// and asked whether they admit a request with Admit.
//
// Everything here is a pure value: no I/O, no clock, no logging. Every
// parse or validation error wraps ErrBadLabel and names the problem; a
// disagreement between two sets wraps ErrConflict; an attempt to turn a
// public handle into a local one wraps ErrWiden.
//
// Matching rules:
//   - A zero field is an absent key, and an absent key matches anything.
//   - host matches the request's canonical host text exactly: a name never
//     matches its addresses, a grant for example.com does not admit
//     www.example.com, and there are no wildcards.
//   - A request's port 0 is first defaulted from its scheme (http 80,
//     https 443); a port in a set must equal it. A set with scheme http or
//     https and no port means the scheme's default port, as a URL does
//     (Canonical writes it in, so {"scheme":"https"} reads as
//     {"port":443,"scheme":"https"}); https on another port is granted
//     only by naming the port. tcp has no default: a tcp set without a
//     port admits tcp on any port.
//   - network is ordered: "public" is narrower than "local". A public set
//     admits only requests whose address class is public; a local set
//     admits both classes.
//   - vat is identity, not reach: Admit ignores it, Constrain never lets it
//     change, and ParseGrant refuses it.
package labels
