package unixsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// Listen listens on a unix stream socket at path, created with mode. The
// umask is narrowed while binding, so the socket never exists with a wider
// mode. A live socket at path is never replaced. A stale one (nobody
// listens) is removed. Anything else at path is an error. Closing the
// listener leaves the path in place: call SetUnlinkOnClose(true) for the
// other.
func Listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		c, err := net.Dial("unix", path)
		if err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("%s is a live socket (another process listens on it); refusing to replace it", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("probing %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
	}
	old := umask(int(^mode & 0o777))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	umask(old)
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(path, mode); err != nil {
		_ = l.Close()
		_ = os.Remove(path)
		return nil, err
	}
	return l, nil
}
