// Package edge decides where a request to the public HTTP listener goes.
//
// It says which vat, on which kind of browser origin, or nowhere and why. It also
// follows each connection's request framing, so that a request whose length
// two parsers could read differently ends its connection.
package edge

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"toybox/labels"
)

// Origin is the kind of browser origin a request arrives on.
type Origin int

const (
	// Refused: the request goes to no vat.
	Refused Origin = iota
	// Shared is a host every vat shares: a public name, localhost or a
	// loopback address. The path's first segment names the vat
	// (/<vat>/...), and every answer carries SandboxCSP, so a page there
	// runs in an opaque origin of its own.
	Shared
	// Own is the vat's own host, <vat>.<public name>: the vat has the
	// whole origin, every path of it.
	Own
)

func (o Origin) String() string {
	switch o {
	case Shared:
		return "shared"
	case Own:
		return "own"
	}
	return "refused"
}

// SandboxCSP is the policy every answer on a Shared origin carries: the
// page gets an opaque origin (no allow-same-origin, ever), so it cannot
// read another vat's pages, cookies or storage on the same host. Scripts,
// forms, popups, dialogs and downloads still work.
const SandboxCSP = "sandbox allow-scripts allow-forms allow-popups allow-popups-to-escape-sandbox allow-modals allow-downloads"

// Hosts are the names the public listener answers to. Its zero value
// answers to the loopback forms only: localhost, <vat>.localhost and the
// loopback addresses.
type Hosts struct {
	names []string // canonical: lower case, A-labels, no trailing dot, IPv6 unbracketed
}

// ParseHosts checks the operator's public names (toybox serve
// --public-host): each a DNS name or an IP literal, without a scheme, port,
// path or wildcard. Each is served as a Shared origin, and every
// <vat>.<name> below a DNS name as that vat's Own origin.
func ParseHosts(names []string) (Hosts, error) {
	var h Hosts
	for _, n := range names {
		if strings.ContainsAny(n, "/*") || strings.Count(n, ":") == 1 {
			return Hosts{}, fmt.Errorf("%w: public host %q: a bare name or address, without a scheme, port, path or wildcard", ErrBadHost, n)
		}
		c, err := labels.CanonicalHost(n)
		if err != nil {
			return Hosts{}, fmt.Errorf("%w: public host %q: %w", ErrBadHost, n, err)
		}
		if !containsString(h.names, c) {
			h.names = append(h.names, c)
		}
	}
	return h, nil
}

// Names returns the configured public names (canonical), without the
// loopback forms that are always served.
func (h Hosts) Names() []string { return append([]string(nil), h.names...) }

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Route is where one request goes, or why it goes nowhere.
type Route struct {
	Origin Origin
	// Host is the request's host, canonical and without its port.
	Host string
	// Vat is the vat's id (its name in the Host on an Own origin, the
	// path's first segment on a Shared one).
	Vat string
	// Prefix is the part of the path the app does not see: "/<vat>" on a
	// Shared origin, "" on an Own one.
	Prefix string
	// Path is what the app sees as its path, always starting with "/";
	// RawPath its escaped spelling when that is not the default one
	// (url.URL's rule), else "".
	Path, RawPath string
	// Status and Reason say why a Refused request goes nowhere (403: not a
	// host this listener serves; 404: no vat named), for the visitor.
	Status int
	Reason string
}

func refuse(status int, format string, args ...any) Route {
	return Route{Status: status, Reason: fmt.Sprintf(format, args...)}
}

// Route decides where a request for host (the Host header, port and all)
// and u (its URL) goes. It is pure: whether the vat is installed is the
// caller's to know.
//
// A host that is neither a public name, nor <vat>.<public name>, nor a
// loopback form is refused with 403 before any vat is named: a page on a
// name that an attacker points at this host (DNS rebinding) never reaches
// a vat. The port is not compared.
func (h Hosts) Route(host string, u *url.URL) Route {
	name, ok := hostName(host)
	if !ok {
		return refuse(http.StatusForbidden, "host %q is not one of this server's public names (toybox serve --public-host)", host)
	}
	if !strings.HasPrefix(u.Path, "/") {
		return refuse(http.StatusNotFound, "no vat: the path %q does not start with /", u.Path)
	}
	if h.shared(name) {
		return sharedRoute(name, u)
	}
	if id, parent, found := strings.Cut(name, "."); found && labels.ValidVatID(id) && h.parent(parent) {
		return Route{Origin: Own, Host: name, Vat: id, Path: u.Path, RawPath: u.RawPath}
	}
	return refuse(http.StatusForbidden, "host %q is not one of this server's public names (toybox serve --public-host)", host)
}

// shared reports whether name is a Shared origin: a public name, localhost
// or a loopback address.
func (h Hosts) shared(name string) bool {
	if name == "localhost" || containsString(h.names, name) {
		return true
	}
	a, err := netip.ParseAddr(name)
	return err == nil && a.Unmap().IsLoopback()
}

// parent reports whether name may have vats below it: localhost or a
// public DNS name (an address has no subdomains).
func (h Hosts) parent(name string) bool {
	if name == "localhost" {
		return true
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return false
	}
	return containsString(h.names, name)
}

// hostName takes the host out of a Host header: without its port, lower
// case, without a trailing dot, an IPv6 literal without brackets.
func hostName(host string) (string, bool) {
	h := host
	switch {
	case strings.HasPrefix(h, "["):
		end := strings.IndexByte(h, ']')
		if end < 0 || (end+1 < len(h) && !validPort(h[end+1:])) {
			return "", false
		}
		h = h[1:end]
		if !strings.Contains(h, ":") {
			return "", false
		}
	case strings.Count(h, ":") == 1:
		i := strings.IndexByte(h, ':')
		if !validPort(h[i:]) {
			return "", false
		}
		h = h[:i]
	case strings.Contains(h, ":"):
		return "", false // an IPv6 literal needs its brackets in a Host
	}
	h = strings.TrimSuffix(h, ".")
	c, err := labels.CanonicalHost(h)
	if err != nil || c != strings.ToLower(h) && !strings.Contains(h, ":") {
		// Only a name already in its canonical spelling (but for case):
		// no IDNA mapping, no Unicode, so the name compared is the name
		// the browser sent.
		return "", false
	}
	return c, true
}

// validPort reports whether s is ":" followed by one to five digits.
func validPort(s string) bool {
	if len(s) < 2 || len(s) > 6 || s[0] != ':' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// sharedRoute routes /<vat>/<rest> on a Shared origin.
func sharedRoute(name string, u *url.URL) Route {
	id, _, _ := strings.Cut(u.Path[1:], "/")
	if id == "" {
		return refuse(http.StatusNotFound, "no vat named: ask for /<vat>/...")
	}
	if !labels.ValidVatID(id) {
		return refuse(http.StatusNotFound, "no vat %q: not a vat id", id)
	}
	// The vat is the path's first segment as the browser sees it: in
	// /alice%2Fsw.js that segment is "alice%2Fsw.js", so a service worker
	// served there could claim the whole origin as its scope, every vat's
	// pages. Only a plainly spelled first segment routes. RawPath, not
	// EscapedPath: EscapedPath drops a RawPath Go finds invalid (a raw '|'
	// or '^') and escapes the decoded path anew.
	rawPath := u.RawPath
	if rawPath == "" {
		rawPath = u.Path
	}
	if raw, _, _ := strings.Cut(strings.TrimPrefix(rawPath, "/"), "/"); raw != id {
		return refuse(http.StatusNotFound, "no vat %q: the path's first segment is %q; a vat's name is spelled plainly, without percent-encoding", id, raw)
	}
	prefix := "/" + id
	rest := strings.TrimPrefix(u.Path, prefix)
	rawRest := strings.TrimPrefix(u.EscapedPath(), prefix)
	if rest == "" {
		rest, rawRest = "/", "/"
	}
	r := Route{Origin: Shared, Host: name, Vat: id, Prefix: prefix, Path: rest}
	if rawRest != rest {
		r.RawPath = rawRest
	}
	return r
}
