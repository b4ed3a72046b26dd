package wall

import (
	"fmt"
	"slices"
)

// MCPPlan is the bridge's part of a plan: toybox-entry's --mcp-* flags.
type MCPPlan struct {
	Mode        string // session, shared or single
	Era         string // legacy, modern, dual, or "" (unknown)
	MaxProcs    int    // 0: the bridge's default
	IdleSeconds int    // 0: the bridge's default
}

// mcp checks the Spec's MCP part and plans it.
func (b *planner) mcp() error {
	m := b.spec.MCP
	if m == nil {
		return nil
	}
	if m.Listener == nil {
		return fmt.Errorf("%w: an MCP vat with no listener", ErrSpec)
	}
	mode := m.Mode
	if mode == "" {
		mode = "session"
	}
	if !slices.Contains([]string{"session", "shared", "single"}, mode) {
		return fmt.Errorf("%w: MCP mode %q is not session, shared or single", ErrSpec, m.Mode)
	}
	if m.Era != "" && !slices.Contains([]string{"legacy", "modern", "dual"}, m.Era) {
		return fmt.Errorf("%w: MCP era %q is not legacy, modern or dual", ErrSpec, m.Era)
	}
	if m.MaxProcs < 0 || m.MaxProcs > 4096 || m.IdleSeconds < 0 {
		return fmt.Errorf("%w: MCP bounds %d processes, %d s idle", ErrSpec, m.MaxProcs, m.IdleSeconds)
	}
	b.p.MCP = &MCPPlan{Mode: mode, Era: m.Era, MaxProcs: m.MaxProcs, IdleSeconds: m.IdleSeconds}
	return nil
}

// mcpFlags are toybox-entry's flags for p.MCP, the listener's number
// aside.
func (p *MCPPlan) flags() []string {
	a := []string{"--mcp", "stdio", "--mcp-mode", p.Mode}
	if p.Era != "" {
		a = append(a, "--mcp-era", p.Era)
	}
	if p.MaxProcs > 0 {
		a = append(a, "--mcp-max-procs", fmt.Sprint(p.MaxProcs))
	}
	if p.IdleSeconds > 0 {
		a = append(a, "--mcp-idle-seconds", fmt.Sprint(p.IdleSeconds))
	}
	return a
}
