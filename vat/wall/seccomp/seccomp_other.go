//go:build !linux || !cgo

package seccomp

import (
	"fmt"
	"os"
	"runtime"
)

// Supported reports whether this build has a filter table; here it has none.
func Supported() error {
	return fmt.Errorf("%w: %s/%s without cgo", ErrUnsupported, runtime.GOOS, runtime.GOARCH)
}

// BPF is unavailable in this build.
func BPF(Options) ([]byte, error) { return nil, Supported() }

// File is unavailable in this build.
func File(Options) (*os.File, error) { return nil, Supported() }

// NotifierSupported is false in this build.
func NotifierSupported() error { return Supported() }

// ListenerInstallable is false in this build.
func ListenerInstallable() error { return Supported() }
