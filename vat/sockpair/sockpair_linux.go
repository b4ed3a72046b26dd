package sockpair

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Pair returns a connected pair of unix stream sockets, both close-on-exec:
// mine as this process's connection, theirs as a file named name to give a
// child. Theirs is bound to an autobound abstract name, so its holder
// cannot bind it to a name of its choosing in this network namespace
// (squatting a name a host service would bind). The caller owns both.
func Pair(name string) (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	if err := unix.Bind(fds[1], &unix.SockaddrUnix{}); err != nil {
		_ = unix.Close(fds[0])
		_ = unix.Close(fds[1])
		return nil, nil, fmt.Errorf("binding %s: %w", name, os.NewSyscallError("bind", err))
	}
	mine := os.NewFile(uintptr(fds[0]), name+"-mine")
	theirs := os.NewFile(uintptr(fds[1]), name)
	nc, err := net.FileConn(mine)
	_ = mine.Close()
	if err != nil {
		_ = theirs.Close()
		return nil, nil, fmt.Errorf("wrapping %s: %w", name, err)
	}
	return nc.(*net.UnixConn), theirs, nil
}
