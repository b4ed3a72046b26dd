package labels

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

const (
	maxName  = 253 // bytes in a canonical name, without a trailing dot
	maxLabel = 63  // bytes in one label of a canonical name
	// maxHostInput bounds the raw text handed to IDNA; a name whose
	// Unicode spelling is longer than this could not fit in maxName anyway.
	maxHostInput = 4 * maxName
)

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadLabel}, args...)...)
}

// CanonicalHost validates one host, a DNS name or an IP literal (an IPv6
// literal may be bracketed), and returns its canonical form: lower case,
// IDNA A-labels (UTS #46 lookup mapping), no trailing dot, canonical IP
// text, IPv6 without brackets. Names are held to letters, digits and
// hyphens. Numeric spellings that some resolvers read as IPv4 (127.1,
// 0x7f.0.0.1, 0177.0.0.1, 2130706433) are refused rather than read as names.
func CanonicalHost(h string) (string, error) {
	if h == "" {
		return "", badf("empty host")
	}
	if len(h) > maxHostInput {
		return "", badf("host over %d bytes", maxName)
	}
	if canonicalIPv4(h) {
		return h, nil // what the name path returns for it, without IDNA
	}
	if err := checkHostChars(h); err != nil {
		return "", err
	}
	if strings.HasPrefix(h, "[") || strings.HasSuffix(h, "]") {
		if len(h) < 2 || h[0] != '[' || h[len(h)-1] != ']' {
			return "", badf("unbalanced brackets in host %q", h)
		}
		inner := h[1 : len(h)-1]
		if !strings.Contains(inner, ":") {
			return "", badf("brackets are only for IPv6 addresses, not %q", h)
		}
		return canonicalIPv6(inner)
	}
	if strings.Contains(h, ":") {
		return canonicalIPv6(h)
	}
	return canonicalName(h)
}

// canonicalIPv4 reports whether h is an IPv4 address in canonical
// dotted-decimal form, without allocating.
func canonicalIPv4(h string) bool {
	a, err := netip.ParseAddr(h)
	if err != nil || !a.Is4() {
		return false
	}
	var buf [len("255.255.255.255")]byte
	return string(a.AppendTo(buf[:0])) == h
}

// checkHostChars refuses characters that have no place in a host whatever
// the spelling, with a reason naming them.
func checkHostChars(h string) error {
	if !utf8.ValidString(h) {
		return badf("host %q is not valid UTF-8", h)
	}
	for _, r := range h {
		switch {
		case r == '*':
			return badf("wildcard host %q not allowed", h)
		case r == '@':
			return badf("userinfo not allowed in host %q", h)
		case r == '/' || r == '\\':
			return badf("path not allowed in host %q", h)
		case r == '?':
			return badf("query not allowed in host %q", h)
		case r == '#':
			return badf("fragment not allowed in host %q", h)
		case r == '%':
			return badf("percent sign (escape or IPv6 zone) not allowed in host %q", h)
		case unicode.IsControl(r):
			return badf("control character %U in host %q", r, h)
		case unicode.IsSpace(r):
			return badf("space %U in host %q", r, h)
		}
	}
	return nil
}

func canonicalIPv6(s string) (string, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return "", badf("host %q is not a valid IPv6 address (a port needs brackets: [::1]:80)", s)
	}
	if a.Zone() != "" {
		return "", badf("IPv6 zone not allowed in host %q", s)
	}
	return a.String(), nil
}

func canonicalName(h string) (string, error) {
	a, err := idna.Lookup.ToASCII(h)
	if err != nil {
		return "", badf("host %q is not a valid name: %v", h, err)
	}
	a = strings.TrimSuffix(a, ".") // one trailing dot is the root, not part of the name
	if a == "" {
		return "", badf("empty host %q", h)
	}
	if len(a) > maxName {
		return "", badf("name %q over %d bytes", h, maxName)
	}
	labels := strings.Split(a, ".")
	for _, l := range labels {
		if err := checkLabel(h, l); err != nil {
			return "", err
		}
	}
	if last := labels[len(labels)-1]; numericLabel(last) {
		// WHATWG URL and inet_aton read a host whose last label is a
		// number as an IPv4 address; accept only the one canonical
		// dotted-decimal spelling.
		ip, err := netip.ParseAddr(a)
		if err != nil || !ip.Is4() || ip.String() != a {
			return "", badf("host %q looks like an IPv4 address but is not in canonical dotted-decimal form", h)
		}
		return ip.String(), nil
	}
	return a, nil
}

func checkLabel(h, l string) error {
	switch {
	case l == "":
		return badf("empty label in name %q", h)
	case len(l) > maxLabel:
		return badf("label %q in name %q over %d bytes", l, h, maxLabel)
	case l[0] == '-' || l[len(l)-1] == '-':
		return badf("label %q in name %q starts or ends with a hyphen", l, h)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return badf("character %q in name %q (only letters, digits and hyphens)", c, h)
		}
	}
	return nil
}

// numericLabel reports whether l is a label an IPv4 parser would read as a
// number: all decimal digits, or 0x followed by hex digits.
func numericLabel(l string) bool {
	if l == "" {
		return false
	}
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		for i := 2; i < len(l); i++ {
			if !isHex(l[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// parsePort reads a port spelled in strict decimal: 1-65535, no sign, no
// leading zero, no spaces, no service names.
func parsePort(s string) (uint16, error) {
	if s == "" {
		return 0, badf("empty port")
	}
	if len(s) > 5 {
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, badf("port %q is not a decimal number", s)
			}
		}
		return 0, badf("port %s out of range 1-65535", s)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			if isLetter(c) {
				return 0, badf("port %q is not a number (service names are not allowed)", s)
			}
			return 0, badf("port %q is not a decimal number", s)
		}
		n = n*10 + int(c-'0')
	}
	if s[0] == '0' && len(s) > 1 {
		return 0, badf("port %q has a leading zero", s)
	}
	if n < 1 || n > 65535 {
		return 0, badf("port %d out of range 1-65535", n)
	}
	return uint16(n), nil
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// ParseHostPort reads a strict host:port, the spelling of an HTTP CONNECT
// target: a non-empty host (canonicalised as by CanonicalHost), then a
// colon and a port in 1-65535 in plain decimal. An IPv6 host must be
// bracketed ([::1]:443) and only an IPv6 host may be.
func ParseHostPort(s string) (host string, port uint16, err error) {
	host, port, err = splitHostPort(s, true)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}

// splitHostPort reads host[:port]; with needPort, the port is required.
func splitHostPort(s string, needPort bool) (string, uint16, error) {
	if s == "" {
		return "", 0, badf("empty host")
	}
	if err := checkHostChars(s); err != nil {
		return "", 0, err
	}
	var hostPart, portPart string
	hasPort := false
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, badf("missing ] in %q", s)
		}
		rest := s[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return "", 0, badf("unexpected %q after ] in %q", rest, s)
			}
			portPart, hasPort = rest[1:], true
		}
		h, err := CanonicalHost(s[:end+1])
		if err != nil {
			return "", 0, err
		}
		return finishHostPort(s, h, portPart, hasPort, needPort)
	}
	if strings.ContainsAny(s, "[]") {
		return "", 0, badf("brackets are only for IPv6 addresses, in %q", s)
	}
	switch strings.Count(s, ":") {
	case 0:
		hostPart = s
	case 1:
		i := strings.IndexByte(s, ':')
		hostPart, portPart, hasPort = s[:i], s[i+1:], true
	default:
		return "", 0, badf("IPv6 address in %q must be in brackets ([::1]:80)", s)
	}
	if hostPart == "" {
		return "", 0, badf("empty host in %q", s)
	}
	h, err := CanonicalHost(hostPart)
	if err != nil {
		return "", 0, err
	}
	return finishHostPort(s, h, portPart, hasPort, needPort)
}

func finishHostPort(s, h, portPart string, hasPort, needPort bool) (string, uint16, error) {
	if !hasPort {
		if needPort {
			return "", 0, badf("missing port in %q", s)
		}
		return h, 0, nil
	}
	p, err := parsePort(portPart)
	if err != nil {
		return "", 0, err
	}
	return h, p, nil
}

// LoopbackHost reports whether a host (canonicalised first) names this machine's
// loopback by itself: localhost and every name below it (RFC 6761 6.3; the
// switchboard answers them with 127.0.0.1 and ::1 without asking DNS), or
// a loopback address (an IPv4-mapped one included). A name that merely
// resolves to loopback is not known here; the switchboard judges it when
// it connects.
func LoopbackHost(h string) bool {
	if c, err := CanonicalHost(h); err == nil {
		h = c
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}
