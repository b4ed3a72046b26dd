//go:build !linux

package unixsock

import (
	"errors"
	"os"
)

// CheckListener refuses every socket: socket activation is Linux only.
func CheckListener(f *os.File) error {
	return errors.New("socket activation is supported on Linux only")
}

func umask(m int) int { return m }
