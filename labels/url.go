package labels

import (
	"net/url"
	"strings"
)

// DefaultPort returns the port a scheme implies: 80 for http, 443 for
// https, 0 for anything else (tcp has no default).
func DefaultPort(scheme string) uint16 {
	switch scheme {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}

// ParseURL reads an absolute http, https, ws or wss URL and returns the
// request it presents: Scheme http or https (ws reads as http, wss as
// https), the canonical host, and the port (the scheme's default when the
// URL names none). It refuses other schemes, userinfo, an empty host, an
// empty or bad port, percent-escapes or zones in the host, and any URL
// whose host net/url would read differently from the raw text (so the
// switchboard and net/http can never disagree about where a request goes).
// Its errors name the problem, never the URL's text: a URL's query or
// userinfo may carry a credential, and refusals are logged.
// urlProblem names what net/url found wrong with a URL without the text
// it quotes (an invalid port's text may be a password: user:pa/ss@host).
func urlProblem(err error) string {
	msg := err.Error()
	for _, p := range []string{
		"invalid port", "invalid character", "invalid userinfo", "missing ']' in host",
		"invalid URL escape", "first path segment in URL cannot contain colon",
		"missing protocol scheme", "invalid control character in URL", "empty url",
	} {
		if strings.Contains(msg, p) {
			return p
		}
	}
	return "it cannot be parsed"
}

func ParseURL(raw string) (Request, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// net/url's error quotes the whole URL; the reason here names
		// only the problem, so that logging it keeps no query.
		return Request{}, badf("bad URL: %s", urlProblem(err))
	}
	var scheme string
	switch u.Scheme {
	case "http", "ws":
		scheme = "http"
	case "https", "wss":
		scheme = "https"
	case "":
		return Request{}, badf("URL has no scheme (http, https, ws or wss)")
	default:
		return Request{}, badf("URL scheme %q not allowed (http, https, ws or wss)", u.Scheme)
	}
	if u.Opaque != "" {
		return Request{}, badf("URL has no //host")
	}
	if u.User != nil {
		return Request{}, badf("userinfo not allowed in URL")
	}
	// net/url takes a space or a control character in the query, and
	// net/http writes the query into the request line as it is: an invalid
	// request line, which servers may read differently.
	if i := strings.IndexFunc(u.RawQuery, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		return Request{}, badf("URL query has %q at byte %d: percent-encode it", u.RawQuery[i], i)
	}
	// The authority as written: after "scheme://", up to the first of
	// "/?#". It must be exactly what net/url took as the host.
	rest := raw[len(u.Scheme):]
	if len(rest) < 3 || rest[0] != ':' || rest[1] != '/' || rest[2] != '/' {
		return Request{}, badf("URL has no //host")
	}
	auth := rest[3:]
	if i := strings.IndexAny(auth, "/?#"); i >= 0 {
		auth = auth[:i]
	}
	if auth == "" {
		return Request{}, badf("empty host in URL")
	}
	host, port, err := splitHostPort(auth, false)
	if err != nil {
		return Request{}, err
	}
	if auth != u.Host {
		return Request{}, badf("URL host %q is spelled ambiguously (net/url reads %q)", auth, u.Host)
	}
	if port == 0 {
		port = DefaultPort(scheme)
	}
	return Request{Scheme: scheme, Host: host, Port: port}, nil
}
