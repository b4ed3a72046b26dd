package manifest

import (
	"fmt"
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
)

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
