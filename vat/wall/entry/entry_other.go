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
