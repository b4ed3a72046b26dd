//go:build !linux

package sockpair

import (
	"net"
	"os"
)

// Pair returns ErrUnsupported off Linux.
func Pair(name string) (*net.UnixConn, *os.File, error) { return nil, nil, ErrUnsupported }
