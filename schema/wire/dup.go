package wire

import "golang.org/x/sys/unix"

func fcntlDupCloexec(fd int) (int, error) {
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
}
