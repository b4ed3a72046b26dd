package testenv

import "syscall"

// SocketPair returns a connected pair of unix stream sockets, both
// close-on-exec, on any Unix. (SOCK_CLOEXEC is Linux's; elsewhere the
// flag is set under syscall.ForkLock, as the net package does, so no
// child started meanwhile inherits either end.) The caller closes both.
func SocketPair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return [2]int{-1, -1}, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return [2]int{fds[0], fds[1]}, nil
}
