package unixsock

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// CheckListener requires f to be a listening AF_UNIX stream socket bound to
// a path (whose owner and mode say who may connect). The error says what f
// is instead ("not a unix socket (domain 2, AF_INET)").
func CheckListener(f *os.File) error {
	fd := int(f.Fd())
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		if errors.Is(err, unix.ENOTSOCK) {
			return errors.New("not a socket")
		}
		return os.NewSyscallError("getsockopt SO_DOMAIN", err)
	}
	if dom != unix.AF_UNIX {
		return fmt.Errorf("not a unix socket (domain %d, %s)", dom, domainName(dom))
	}
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return os.NewSyscallError("getsockopt SO_TYPE", err)
	}
	if typ != unix.SOCK_STREAM {
		return fmt.Errorf("not a stream socket (type %d, %s)", typ, typeName(typ))
	}
	acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err != nil {
		return os.NewSyscallError("getsockopt SO_ACCEPTCONN", err)
	}
	if acc != 1 {
		return errors.New("not listening")
	}
	// Only a socket with a path in the file system has an owner and a
	// mode that say who may connect: an abstract one (@name) or one with
	// no name is open to every process in its network namespace.
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return os.NewSyscallError("getsockname", err)
	}
	su, ok := sa.(*unix.SockaddrUnix)
	switch {
	case !ok || su.Name == "":
		return errors.New("a unix socket with no path (anyone may connect to it); listen on a path")
	case su.Name[0] == '@' || su.Name[0] == 0:
		return fmt.Errorf("an abstract unix socket (%q: anyone in its network namespace may connect to it); listen on a path", su.Name)
	}
	return nil
}

func domainName(d int) string {
	switch d {
	case unix.AF_INET:
		return "AF_INET"
	case unix.AF_INET6:
		return "AF_INET6"
	case unix.AF_NETLINK:
		return "AF_NETLINK"
	case unix.AF_PACKET:
		return "AF_PACKET"
	case unix.AF_VSOCK:
		return "AF_VSOCK"
	}
	return "another family"
}

func typeName(t int) string {
	switch t {
	case unix.SOCK_DGRAM:
		return "SOCK_DGRAM"
	case unix.SOCK_SEQPACKET:
		return "SOCK_SEQPACKET"
	case unix.SOCK_RAW:
		return "SOCK_RAW"
	}
	return "another type"
}

func umask(m int) int { return unix.Umask(m) }
