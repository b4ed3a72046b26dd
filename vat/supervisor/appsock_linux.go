package supervisor

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// dialApp connects to the app's socket at path (in its run folder) without
// following a symlink. The run folder is the vat's to write (it is
// /run/toybox in the wall), so what app.sock is, the vat decides: a dial by
// path would follow a symlink it put there to any socket the supervisor can
// reach, the admin socket included. The name is opened O_PATH in the run
// folder (a symlink as itself), refused unless it is a socket, and connected through
// /proc/self/fd, which names exactly the inode opened: a swap after the
// check changes nothing.
func dialApp(ctx context.Context, path string) (net.Conn, error) {
	// The folders up to the run folder are the supervisor's (the state
	// dir may well be reached through a symlink of the operator's); only
	// the last name is the vat's.
	dir, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(dir)
	name := filepath.Base(path)
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(dir, name, how)
	if errors.Is(err, unix.ENOSYS) {
		// No openat2 (Linux < 5.6): O_NOFOLLOW opens a symlink there as
		// itself, refused below.
		fd, err = unix.Openat(dir, name, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, &appSocketError{path: path, what: "a symlink"}
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if kind := st.Mode & unix.S_IFMT; kind != unix.S_IFSOCK {
		what := map[uint32]string{unix.S_IFLNK: "a symlink", unix.S_IFDIR: "a folder", unix.S_IFREG: "a file", unix.S_IFIFO: "a fifo"}[kind]
		if what == "" {
			what = "a device"
		}
		return nil, &appSocketError{path: path, what: what}
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
}
