package wall

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"toybox/tests/testenv"
	"toybox/vat/wall/seccomp"
)

// TestPlanMCP: a stdio MCP vat runs toybox-entry even with no way out,
// its processes have no $TOYBOX_LISTEN or $TOYBOX_CAP_FD, and a mode or
// era the entry would refuse is refused here first.
func TestPlanMCP(t *testing.T) {
	if seccomp.Supported() != nil {
		testenv.Unavailable(t, "no seccomp table here")
	}
	listener, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	tests := []struct {
		name string
		mcp  MCP
		err  error
		want []string // the entry's flags, after --mcp stdio
	}{
		{"defaults", MCP{}, nil, []string{"--mcp-mode", "session"}},
		{"all", MCP{Mode: "shared", Era: "legacy", MaxProcs: 3, IdleSeconds: 60}, nil, []string{"--mcp-mode", "shared", "--mcp-era", "legacy", "--mcp-max-procs", "3", "--mcp-idle-seconds", "60"}},
		{"a mode the entry has not", MCP{Mode: "pooled"}, ErrSpec, nil},
		{"an era the entry has not", MCP{Era: "2025"}, ErrSpec, nil},
		{"too many processes", MCP{MaxProcs: 5000}, ErrSpec, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := planSpec(t)
			tt.mcp.Listener = listener
			s.MCP = &tt.mcp
			p, err := BuildPlan(s)
			if !errors.Is(err, tt.err) {
				t.Fatalf("BuildPlan = %v; want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if p.EntryPath == "" || !p.NoNet {
				t.Errorf("entry %q, no net %v; want the entry with no way out", p.EntryPath, p.NoNet)
			}
			for _, kv := range p.Env {
				if strings.HasPrefix(kv, "TOYBOX_LISTEN=") || strings.HasPrefix(kv, "TOYBOX_CAP_FD=") {
					t.Errorf("the processes' environment has %s", kv)
				}
			}
			if got := p.MCP.flags(); !slices.Equal(got[2:], tt.want) || got[0] != "--mcp" || got[1] != "stdio" {
				t.Errorf("flags = %q; want --mcp stdio %q", got, tt.want)
			}
		})
	}
	s := planSpec(t)
	s.MCP = &MCP{}
	if _, err := BuildPlan(s); !errors.Is(err, ErrSpec) {
		t.Errorf("an MCP vat with no listener: %v; want ErrSpec", err)
	}
}
