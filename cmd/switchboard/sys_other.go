//go:build !linux

package main

import (
	"errors"
	"os"
)

func umask(m int) int { return m }

func checkUnixListener(f *os.File) error {
	return errors.New("socket activation is supported on Linux only")
}
