//go:build !linux

package wire

import "golang.org/x/sys/unix"

func fcntlDupCloexec(fd int) (int, error) {
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
}

func closeFD(fd int) error { return unix.Close(fd) }
