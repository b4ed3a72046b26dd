package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func umask(m int) int { return unix.Umask(m) }

// checkUnixListener requires f to be a listening AF_UNIX stream socket.
func checkUnixListener(f *os.File) error {
	fd := int(f.Fd())
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		if errors.Is(err, unix.ENOTSOCK) {
			return errors.New("not a socket")
		}
		return os.NewSyscallError("getsockopt SO_DOMAIN", err)
	}
	if dom != unix.AF_UNIX {
		return fmt.Errorf("not a unix socket (domain %d)", dom)
	}
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return os.NewSyscallError("getsockopt SO_TYPE", err)
	}
	if typ != unix.SOCK_STREAM {
		return fmt.Errorf("not a stream socket (type %d)", typ)
	}
	acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err != nil {
		return os.NewSyscallError("getsockopt SO_ACCEPTCONN", err)
	}
	if acc != 1 {
		return errors.New("not listening")
	}
	return nil
}
