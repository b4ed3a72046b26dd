//go:build linux

package dockertest

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// lock takes the cross-process start lock.
func lock() (func(), error) {
	f, err := os.OpenFile(LockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// detached puts dockerd in its own session so it outlives the test process.
func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }
