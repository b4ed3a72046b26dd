package front

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Rules decide who may ask a vat's MCP endpoint at all, before any vat
// work: the Host allowlist (DNS rebinding) and the exact Origin check.
type Rules struct {
	// PublicHosts are this host's public names, lower case, without a
	// port. A name's subdomains are the vats' own origins
	// (<vat>.<name>). If empty, only the loopback forms are allowed.
	PublicHosts []string
	// Origins are browser origins other than the endpoint's own that may
	// call it (a web MCP client served elsewhere), as browsers send them:
	// scheme://host[:port], lower case. They also get CORS answers.
	Origins []string
}

// Ask is what Rules look at in one request.
type Ask struct {
	// Host is the request's Host.
	Host string
	// LocalPort is the TCP port the request arrived on; "" when not known
	// (a unix socket), and then a loopback Host may name any port.
	LocalPort string
	// Origins are the request's Origin header values (each one).
	Origins []string
	// SecFetchSite is the request's Sec-Fetch-Site.
	SecFetchSite string
}

// AskOf reads an Ask from r.
func AskOf(r *http.Request) Ask {
	a := Ask{Host: r.Host, Origins: r.Header.Values("Origin"), SecFetchSite: r.Header.Get("Sec-Fetch-Site")}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		a.LocalPort = fmt.Sprint(la.Port)
	}
	return a
}

// Decision is a rule's answer. A refusal carries the status to answer
// with and a reason that names the fix.
type Decision struct {
	Allow  bool
	Status int
	Reason string
}

func allow() Decision { return Decision{Allow: true} }

func refuse(format string, a ...any) Decision {
	return Decision{Status: http.StatusForbidden, Reason: fmt.Sprintf(format, a...)}
}

// Check applies the Host allowlist, then the Origin rule.
func (ru Rules) Check(a Ask) Decision {
	if d := ru.CheckHost(a); !d.Allow {
		return d
	}
	return ru.CheckOrigin(a)
}

// loopbackName reports whether h (lower case, no port) is a loopback form:
// localhost, a name below .localhost (RFC 6761: always loopback), 127.0.0.1
// or ::1.
func loopbackName(h string) bool {
	return h == "localhost" || strings.HasSuffix(h, ".localhost") || h == "127.0.0.1" || h == "::1"
}

// splitHost splits a Host header into its lower-case name and port ("" when
// none); ok is false for a form no client sends.
func splitHost(hostport string) (host, port string, ok bool) {
	hostport = strings.ToLower(hostport)
	if hostport == "" || strings.ContainsAny(hostport, "/@?# \t") {
		return "", "", false
	}
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		if p == "" {
			return "", "", false
		}
		return h, p, h != ""
	}
	if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		return hostport[1 : len(hostport)-1], "", true
	}
	if strings.Contains(hostport, ":") {
		return "", "", false
	}
	return hostport, "", true
}

// CheckHost allows a Host that names this host: a loopback form on the
// port the request came in on (80 when it names none), or a public name or
// a vat's origin below one (any port: the proxy in front chose it).
func (ru Rules) CheckHost(a Ask) Decision {
	host, port, ok := splitHost(a.Host)
	if ok && loopbackName(host) {
		if a.LocalPort == "" || port == a.LocalPort || (port == "" && a.LocalPort == "80") {
			return allow()
		}
		return refuse("Host %q names another port than this one (%s): a page on another local port is not this toybox", a.Host, a.LocalPort)
	}
	if ok {
		for _, p := range ru.PublicHosts {
			if host == p || strings.HasSuffix(host, "."+p) && !strings.Contains(strings.TrimSuffix(host, "."+p), ".") {
				return allow()
			}
		}
	}
	names := "localhost, 127.0.0.1 and [::1]"
	if len(ru.PublicHosts) > 0 {
		names += ", " + strings.Join(ru.PublicHosts, ", ")
	}
	return refuse("Host %q is not one of this toybox's names (%s; toybox serve --public-host adds one): a request for another name reached it (DNS rebinding?)", a.Host, names)
}

// CheckOrigin allows a request with no Origin from anything but a browser
// page of another site, and one whose single Origin is the endpoint's own
// (scheme http or https, its Host exactly) or listed in Origins.
func (ru Rules) CheckOrigin(a Ask) Decision {
	switch len(a.Origins) {
	case 0:
		// No Origin: not a browser's cross-origin fetch. A browser's
		// request from another site without one (a navigation, a form)
		// still says so in Sec-Fetch-Site.
		if s := strings.ToLower(a.SecFetchSite); s == "cross-site" || s == "same-site" {
			return refuse("Sec-Fetch-Site is %q and the request has no Origin: a page of another site sent it", a.SecFetchSite)
		}
		return allow()
	case 1:
	default:
		return refuse("the request has %d Origin headers; a browser sends one", len(a.Origins))
	}
	o := a.Origins[0]
	if ru.Listed(o) {
		return allow()
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return refuse("Origin %q is not a web origin this endpoint serves (want scheme://host[:port])", o)
	}
	if strings.EqualFold(u.Host, a.Host) {
		return allow()
	}
	return refuse("Origin %q is not this endpoint's own (%s) and is not allowed (toybox serve --mcp-origin allows one)", o, a.Host)
}

// Listed reports whether origin is one of Origins, exactly.
func (ru Rules) Listed(origin string) bool {
	for _, o := range ru.Origins {
		if o == origin {
			return true
		}
	}
	return false
}

// ParseOrigin checks an origin an operator lists (toybox serve
// --mcp-origin): scheme://host[:port], http or https, lower case as
// browsers send it, with no path.
func ParseOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("origin %q: want scheme://host[:port], such as http://localhost:6274", s)
	}
	if strings.ToLower(s) != s {
		return "", fmt.Errorf("origin %q: browsers send it in lower case: %q", s, strings.ToLower(s))
	}
	return s, nil
}
