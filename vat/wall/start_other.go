//go:build !linux

package wall

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// Process is a running wall; there are none off Linux.
type Process struct{}

// Pid is always 0 here.
func (p *Process) Pid() int { return 0 }

// Tier is empty here.
func (p *Process) Tier() string { return "" }

// Egress is the proxy's alone on this platform.
func (p *Process) Egress() (bool, string) { return false, "" }

// Wait returns ErrUnsupported.
func (p *Process) Wait() error { return ErrUnsupported }

// Stop returns ErrUnsupported.
func (p *Process) Stop(time.Duration) error { return ErrUnsupported }

// Start returns ErrUnsupported: walls need Linux.
func Start(_ context.Context, spec Spec, _ *slog.Logger) (*Process, error) {
	for _, f := range []interface{ Close() error }{spec.EntryCap, spec.AppCap} {
		if f != nil {
			_ = f.Close()
		}
	}
	return nil, ErrUnsupported
}

// PrepareEtcView does nothing here.
func (h *Host) PrepareEtcView(string) error { return nil }

// SweepViews removes every /etc view in stateDir.
func (h *Host) SweepViews(stateDir string) error { return os.RemoveAll(filepath.Join(stateDir, "etc")) }

// Probe returns ErrUnsupported.
func Probe(context.Context, string) error { return ErrUnsupported }

// LookBwrap returns ErrUnsupported: walls need Linux.
func LookBwrap(string) (string, error) { return "", ErrUnsupported }

// Doctor reports that walls need Linux.
func Doctor(context.Context, string) []Check {
	return []Check{{Name: "platform", Detail: ErrUnsupported.Error(), Fix: "run toybox on Linux"}}
}

// EndLeftovers does nothing here: there are no walls.
func EndLeftovers(string) (int, error) { return 0, nil }

// EntryUnrunnable is Linux only: walls run nowhere else.
func EntryUnrunnable(string, int, int, int) []string { return nil }
