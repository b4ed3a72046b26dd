package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"toybox/vat/manifest"
	"toybox/vat/wall"
)

// bridgeDir is where the bridges' sockets are, below the state dir: no
// wall shows it (the state dir is masked wherever a bind would show it),
// so no process of a vat can reach its bridge and forge a principal.
const bridgeDir = "mcp"

// bridgeSock is the path of vat id's bridge socket.
func (s *Supervisor) bridgeSock(id string) string {
	return filepath.Join(s.cfg.Store.StateDir(), bridgeDir, id+".sock")
}

// bridgeListener returns vat v's bridge socket, listening, made the first
// time (v.op held). The supervisor keeps it across the wall's restarts:
// a request meanwhile waits in its backlog instead of finding nothing.
func (s *Supervisor) bridgeListener(v *vat) (*os.File, error) {
	v.mu.Lock()
	f := v.bridge
	v.mu.Unlock()
	if f != nil {
		return f, nil
	}
	path := s.bridgeSock(string(v.id))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("making the bridges' folder: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("clearing an old bridge socket: %w", err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening for its MCP bridge: %w", err)
	}
	l.SetUnlinkOnClose(false)
	f, err = l.File() // a duplicate, close-on-exec
	_ = l.Close()
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("listening for its MCP bridge: %w", err)
	}
	v.mu.Lock()
	v.bridge = f
	v.mu.Unlock()
	return f, nil
}

// closeBridge closes vat v's bridge socket and removes its file (it was
// removed, or is no stdio MCP server any more).
func (s *Supervisor) closeBridge(v *vat) {
	v.mu.Lock()
	f := v.bridge
	v.bridge = nil
	v.mu.Unlock()
	if f != nil {
		_ = f.Close()
		_ = os.Remove(s.bridgeSock(string(v.id)))
	}
}

// bridgeSpec is the wall's MCP part for a stdio MCP vat: its bridge
// socket, its mode, and the era its probe recorded for this code.
func (s *Supervisor) bridgeSpec(v *vat, cfg *manifest.MCP) (*wall.MCP, error) {
	f, err := s.bridgeListener(v)
	if err != nil {
		return nil, err
	}
	m := &wall.MCP{Listener: f, Mode: cfg.Mode}
	v.mu.Lock()
	if p := v.rec.MCPProbe; p != nil && p.Code == v.rec.Code {
		m.Era = string(p.Era)
	}
	v.mu.Unlock()
	return m, nil
}

// bridgeAnswers reports whether the bridge behind in's socket answers:
// connecting alone says nothing, since the supervisor's own listener takes
// every connection into its backlog before the bridge runs.
func bridgeAnswers(ctx context.Context, in *instance) bool {
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://vat"+bridgeStatsPath, nil)
	if err != nil {
		return false
	}
	req.Host = "localhost"
	resp, err := in.transport.RoundTrip(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
