package switchboard

import (
	"os"

	"golang.org/x/sys/unix"
)

// streamPair returns the two ends of a close-on-exec unix stream
// socketpair: the switchboard's and the one it hands over.
func streamPair() (mine, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	return os.NewFile(uintptr(fds[0]), "direct"), os.NewFile(uintptr(fds[1]), "direct-socket"), nil
}
