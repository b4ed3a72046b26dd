package manifest

import (
	"fmt"
	"net/textproto"
	"regexp"
	"strings"
)

// MCP says the vat is an MCP server, and how toybox serves it to MCP
// clients at /<vat>/mcp. See docs/mcp.md.
type MCP struct {
	// Transport is TransportStdio (the command speaks JSON-RPC on its
	// stdin and stdout; toybox-entry serves it as Streamable HTTP) or
	// TransportHTTP (the app serves Streamable HTTP at Path on
	// $TOYBOX_LISTEN). Required.
	Transport string `json:"transport"`
	// Path is the app's own MCP endpoint, which /<vat>/mcp is proxied to.
	// Parse sets it: DefaultPath when the manifest says none. A stdio
	// server is always served at DefaultPath.
	Path string `json:"path,omitempty"`
	// Mode maps a stdio server's sessions to processes: ModeSession (one
	// process per session), ModeShared (one per principal) or ModeSingle
	// (one for everyone: the manifest declares the server stateless).
	// Parse sets ModeSession for a stdio server that says none; an http
	// server maps its own sessions and has none.
	Mode string `json:"mode,omitempty"`
	// Auth is who authenticates the vat's clients: AuthToybox (the owner's
	// per-vat bearer tokens, checked at the edge) or AuthVat (an http
	// server that is its own OAuth resource server: toybox passes the
	// client's Authorization through and checks no token). Parse sets
	// AuthToybox when the manifest says none.
	Auth string `json:"auth,omitempty"`
	// CacheToolsList lets toybox answer tools/list from its cache (R48):
	// only answers the server marks "public" with a positive ttlMs, for
	// that long, until the server says notifications/tools/list_changed.
	// Stdio servers only. If false, every tools/list reaches the server.
	CacheToolsList bool `json:"cacheToolsList,omitempty"`
	// Headers are the client headers an http server takes as they come,
	// beside MCP's own (mcp.md R46: its declared extras). Parse writes
	// them in canonical form (X-Tenant). Every other client header stops
	// at the edge.
	Headers []string `json:"headers,omitempty"`
	// HeaderEnv maps a client header to a variable of the environment of
	// the processes that serve that client alone (R46: per-user values).
	// Only a stdio server whose processes are never shared between
	// clients takes it: mode session or shared.
	HeaderEnv []HeaderEnv `json:"headerEnv,omitempty"`
}

// HeaderEnv is one client header set as a variable in the processes that
// serve the client that sends it.
type HeaderEnv struct {
	// Header is the client's header; Parse writes it in canonical form.
	Header string `json:"header"`
	// Env is the variable, one the manifest's env declares.
	Env string `json:"env"`
}

// The values of the mcp keys.
const (
	TransportStdio = "stdio"
	TransportHTTP  = "http"

	ModeSession = "session"
	ModeShared  = "shared"
	ModeSingle  = "single"

	AuthToybox = "toybox"
	AuthVat    = "vat"

	// DefaultPath is where a stdio server is served, and an http server's
	// endpoint when its manifest names none.
	DefaultPath = "/mcp"
	// maxPathLen bounds mcp.path.
	maxPathLen = 256
	// maxHeaders bounds mcp.headers and mcp.headerEnv, each: the edge
	// looks each one up on every request.
	maxHeaders = 16
)

// headerNameRe is a header name of letters, digits and dashes, at most 64
// bytes: what every proxy in front passes unchanged.
var headerNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`)

// headerRefusals say why a client header can never cross into a vat,
// by canonical name or prefix (ending in "-").
var headerRefusals = []struct{ name, why string }{
	{"Authorization", "it carries the client's toybox token (mcp.auth \"vat\" passes it to a server that is its own OAuth resource server)"},
	{"Proxy-Authorization", "it carries a credential for a proxy, never for a vat"},
	{"Cookie", "cookies are the browser's credentials for this origin, shared by every vat on it"},
	{"Host", "the edge sets it"},
	{"Content-Length", "the edge frames the request"},
	{"Transfer-Encoding", "the edge frames the request"},
	{"Connection", "it is hop-by-hop"},
	{"Keep-Alive", "it is hop-by-hop"},
	{"Te", "it is hop-by-hop"},
	{"Trailer", "it is hop-by-hop"},
	{"Upgrade", "it is hop-by-hop"},
	{"Proxy-Connection", "it is hop-by-hop"},
	{"Expect", "the edge frames the request"},
	{"Forwarded", "toybox says who forwards (X-Forwarded-*)"},
	{"X-Forwarded-", "toybox sets the X-Forwarded-* headers itself"},
	{"X-Real-Ip", "toybox says who asks (X-Forwarded-For)"},
	{"Toybox-", "Toybox-* headers are set by toybox alone"},
	{"Accept", "it crosses already (an MCP transport header)"},
	{"Accept-Encoding", "the edge asks for an identity answer, which streams"},
	{"Content-Type", "it crosses already (an MCP transport header)"},
	{"Last-Event-Id", "it crosses already (an MCP transport header)"},
	{"Mcp-", "Mcp-* headers cross already (MCP transport headers)"},
}

// checkHeader checks one client header name of key (mcp.headers[i],
// mcp.headerEnv[i].header) and returns its canonical form.
func checkHeader(key, h string) (string, error) {
	if !headerNameRe.MatchString(h) {
		return "", badMCP("%s %q is not a header name (letters, digits and dashes, at most 64)", key, h)
	}
	c := textproto.CanonicalMIMEHeaderKey(h)
	for _, r := range headerRefusals {
		if c == r.name || strings.HasSuffix(r.name, "-") && strings.HasPrefix(c, r.name) {
			return "", badMCP("%s %q never crosses into a vat: %s", key, h, r.why)
		}
	}
	return c, nil
}

// checkHeaders checks mcp.headers and mcp.headerEnv's headers and writes
// them in canonical form.
func (m *MCP) checkHeaders() error {
	if len(m.Headers) > maxHeaders {
		return badMCP("mcp.headers names %d headers; at most %d", len(m.Headers), maxHeaders)
	}
	if len(m.HeaderEnv) > maxHeaders {
		return badMCP("mcp.headerEnv maps %d headers; at most %d", len(m.HeaderEnv), maxHeaders)
	}
	seen := map[string]string{}
	for i, h := range m.Headers {
		c, err := checkHeader(fmt.Sprintf("mcp.headers[%d]", i), h)
		if err != nil {
			return err
		}
		if seen[c] != "" {
			return badMCP("mcp.headers names %s twice", c)
		}
		seen[c] = "headers"
		m.Headers[i] = c
	}
	vars := map[string]bool{}
	for i, he := range m.HeaderEnv {
		c, err := checkHeader(fmt.Sprintf("mcp.headerEnv[%d].header", i), he.Header)
		if err != nil {
			return err
		}
		switch {
		case seen[c] != "":
			return badMCP("mcp.headerEnv[%d].header %s is mapped twice", i, c)
		case he.Env == "":
			return badMCP("mcp.headerEnv[%d].env is missing: name the variable %s sets", i, c)
		case vars[he.Env]:
			return badMCP("mcp.headerEnv sets %s from two headers", he.Env)
		}
		seen[c], vars[he.Env] = "headerEnv", true
		m.HeaderEnv[i].Header = c
	}
	if len(m.Headers) > 0 && m.Transport != TransportHTTP {
		return badMCP("mcp.headers is for http servers: a stdio server reads no headers (mcp.headerEnv sets one in its environment)")
	}
	if len(m.HeaderEnv) > 0 {
		switch {
		case m.Transport != TransportStdio:
			return badMCP("mcp.headerEnv is for stdio servers: an http server's one process serves every client, so one client's value would be in the environment every client's calls run in (mcp.headers passes a header with each request)")
		case m.Mode == ModeSingle:
			return badMCP("mcp.headerEnv needs mode %q or %q: in mode %q one process serves every client, so one client's value would be in every client's process", ModeSession, ModeShared, ModeSingle)
		}
	}
	return nil
}

// pathRe is an absolute URL path of RFC 3986 pchars, with no percent
// escapes: what it names is then what every reader reads.
var pathRe = regexp.MustCompile(`^/[A-Za-z0-9._~!$&'()*+,;=:@/-]*$`)

func badMCP(format string, a ...any) error {
	return fmt.Errorf("%w: %w: %s", ErrBadManifest, ErrBadMCP, fmt.Sprintf(format, a...))
}

// validate checks m and fills in its defaults.
func (m *MCP) validate() error {
	switch m.Transport {
	case TransportStdio, TransportHTTP:
	case "":
		return badMCP("mcp.transport is missing (want %q or %q)", TransportStdio, TransportHTTP)
	default:
		return badMCP("mcp.transport %q: want %q or %q", m.Transport, TransportStdio, TransportHTTP)
	}
	if m.Path != "" {
		if err := checkPath(m.Path); err != nil {
			return err
		}
	}
	switch m.Mode {
	case "", ModeSession, ModeShared, ModeSingle:
	default:
		return badMCP("mcp.mode %q: want %q, %q or %q", m.Mode, ModeSession, ModeShared, ModeSingle)
	}
	switch m.Auth {
	case "", AuthToybox, AuthVat:
	default:
		return badMCP("mcp.auth %q: want %q (toybox checks the owner's tokens) or %q (the server is its own OAuth resource server)", m.Auth, AuthToybox, AuthVat)
	}
	if err := m.validateCache(); err != nil {
		return err
	}
	if m.Transport == TransportStdio {
		if m.Path != "" && m.Path != DefaultPath {
			return badMCP("mcp.path %q: a stdio server is served at %s (path is for http servers)", m.Path, DefaultPath)
		}
		if m.Auth == AuthVat {
			return badMCP("mcp.auth %q is for http servers: a stdio server takes its credentials from its environment, and toybox authenticates its clients", AuthVat)
		}
		m.Path = DefaultPath
		if m.Mode == "" {
			m.Mode = ModeSession
		}
	} else {
		if m.Mode != "" {
			return badMCP("mcp.mode %q is for stdio servers: an http server maps its own sessions", m.Mode)
		}
		if m.Path == "" {
			m.Path = DefaultPath
		}
	}
	if m.Auth == "" {
		m.Auth = AuthToybox
	}
	return m.checkHeaders()
}

// SetsEnv reports whether toybox sets variable k for this MCP server,
// given whether its app listens on a TCP port (mcp.md R47, as ToolHive
// does): MCP_TRANSPORT always; MCP_HOST, MCP_PORT and FASTMCP_PORT for an
// http server on its port (PORT is listen's own).
func (m *MCP) SetsEnv(k string, listens bool) bool {
	switch k {
	case "MCP_TRANSPORT":
		return true
	case "MCP_HOST", "MCP_PORT", "FASTMCP_PORT":
		return listens && m.Transport == TransportHTTP
	}
	return false
}

// checkHeaderEnv checks that each variable mcp.headerEnv sets is one the
// manifest's env declares (declared): the names an outsider may set.
func (m *MCP) checkHeaderEnv(declared map[string]bool) error {
	for i, he := range m.HeaderEnv {
		if !declared[he.Env] {
			return badMCP("mcp.headerEnv[%d].env %q is not a variable the manifest's env declares", i, he.Env)
		}
	}
	return nil
}

func checkPath(p string) error {
	switch {
	case len(p) > maxPathLen:
		return badMCP("mcp.path is longer than %d bytes", maxPathLen)
	case !pathRe.MatchString(p):
		return badMCP("mcp.path %q: want an absolute path such as %q, without a query, spaces or percent escapes", p, DefaultPath)
	case strings.Contains(p, "//"):
		return badMCP("mcp.path %q holds an empty segment (//)", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return badMCP("mcp.path %q holds a %q segment", p, seg)
		}
	}
	return nil
}

// ParseMCPQuery reads PUT's ?mcp= for a single executable: "stdio" (it is a
// stdio MCP server, one process per session) or "http" (it serves
// Streamable HTTP at /mcp on $TOYBOX_LISTEN).
func ParseMCPQuery(s string) (*MCP, error) {
	if s != TransportStdio && s != TransportHTTP {
		return nil, fmt.Errorf("%w: ?mcp=%q: want %q or %q", ErrBadMCP, s, TransportStdio, TransportHTTP)
	}
	m := &MCP{Transport: s}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return m, nil
}
