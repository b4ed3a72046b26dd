//go:build !linux

package memfd

import "os"

// Create returns ErrUnsupported off Linux.
func Create(name string) (*os.File, error) { return nil, ErrUnsupported }

// Sealed returns ErrUnsupported off Linux.
func Sealed(name string, data []byte) (*os.File, error) { return nil, ErrUnsupported }

// IsSealed reports false off Linux.
func IsSealed(f *os.File) bool { return false }
