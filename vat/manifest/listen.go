package manifest

import (
	"fmt"
	"strconv"
)

// Listen says the vat's app serves on a TCP port of its wall's loopback
// instead of on $TOYBOX_LISTEN. toybox-entry makes $TOYBOX_LISTEN once
// the port accepts and relays each connection to 127.0.0.1:Port; the app
// finds the port in $PORT. See docs/manifest.md.
type Listen struct {
	// Port is the app's port, 1-65535. It may be no loopback port that
	// network.hosts forwards (toybox-entry serves those).
	Port int `json:"port"`
}

func badListen(format string, a ...any) error {
	return fmt.Errorf("%w: %w: %s", ErrBadManifest, ErrBadListen, fmt.Sprintf(format, a...))
}

// validate checks l against the rest of m.
func (l *Listen) validate(m *Manifest) error {
	if l.Port < 1 || l.Port > 65535 {
		return badListen("listen.port %d is not a TCP port (want 1-65535, such as {\"port\": 3000})", l.Port)
	}
	if m.MCP != nil && m.MCP.Transport == TransportStdio {
		return badListen("listen.port %d: a stdio MCP server (mcp.transport %q) listens on no port", l.Port, TransportStdio)
	}
	for _, k := range m.Env {
		if k == "PORT" {
			return badListen("env declares PORT, which listen.port sets (%d)", l.Port)
		}
	}
	for _, h := range m.Network.Hosts {
		if h.Loopback() && int(h.Port) == l.Port {
			return badListen("listen.port %d is the port of network.hosts entry %q, which toybox-entry forwards inside the wall: choose another port for the app", l.Port, h.String())
		}
	}
	return nil
}

// ParseListenQuery reads PUT's ?listen= for a single executable: the TCP
// port it listens on (plain decimal, 1-65535).
func ParseListenQuery(s string) (*Listen, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != s {
		return nil, fmt.Errorf("%w: ?listen=%q: want the TCP port the app listens on, 1-65535 (such as ?listen=3000)", ErrBadListen, s)
	}
	return &Listen{Port: n}, nil
}

// CheckListen checks a single executable's ?listen= against its ?mcp=.
func CheckListen(l *Listen, mcp *MCP) error {
	if l != nil && mcp != nil && mcp.Transport == TransportStdio {
		return fmt.Errorf("%w: ?listen=%d: a stdio MCP server (?mcp=%s) listens on no port", ErrBadListen, l.Port, TransportStdio)
	}
	return nil
}
