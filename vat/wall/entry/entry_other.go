//go:build !linux

package entry

import (
	"context"
	"fmt"
	"os"
)

// Run is unavailable off Linux.
func Run(_ context.Context, _ Config) int {
	fmt.Fprintln(os.Stderr, "toybox-entry:", ErrUnsupported)
	return 125
}

// RunMCP is unavailable off Linux.
func RunMCP(_ context.Context, _ Config) int {
	fmt.Fprintln(os.Stderr, "toybox-entry:", ErrUnsupported)
	return 125
}

// Exit codes of the entry itself.
const (
	ExitLost  = 124
	ExitSetup = 125
	ExitExec  = 127
)

// CatchSignals does nothing off Linux.
func CatchSignals() {}

// Kill does nothing off Linux.
func Kill(int) {}
