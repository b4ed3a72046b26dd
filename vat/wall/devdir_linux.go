package wall

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// devNodes are the only device nodes a wall has, with their numbers: no
// tty and no pts (a vat has no terminal), no full.
var devNodes = []struct {
	name         string
	major, minor uint32
}{{"null", 1, 3}, {"zero", 1, 5}, {"random", 1, 8}, {"urandom", 1, 9}}

// devLinks are /dev's usual symlinks.
var devLinks = [][2]string{{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}}

// A supervisor running as root keeps the wall's /dev as a folder in the
// state dir (the devNodes made with mknod, the links, an empty shm), bound
// with one mount. Otherwise /dev is a tmpfs with each node bound from the
// host's /dev: each bind costs bubblewrap two mount calls and a read of the
// mount table. Host.devDirs notes the state dirs whose folder is made.

// devDir returns the prepared /dev folder of stateDir, making it if need
// be, or "" when there is none (not root, or it could not be made: the
// caller falls back to the tmpfs /dev).
func (h *Host) devDir(stateDir string) string {
	if h.noDevDir || os.Geteuid() != 0 {
		return ""
	}
	dir := filepath.Join(stateDir, "dev")
	h.devDirs.Lock()
	defer h.devDirs.Unlock()
	if h.devDirs.m[stateDir] {
		if _, err := os.Lstat(filepath.Join(dir, "urandom")); err == nil {
			return dir // checked when made; only root writes there
		}
		// Removed by someone since: made again below.
	}
	// Device nodes on a nodev mount cannot be opened: every wall's
	// /dev/null would fail. Such a state dir gets the tmpfs /dev.
	var fs unix.Statfs_t
	if err := unix.Statfs(stateDir, &fs); err != nil || fs.Flags&unix.ST_NODEV != 0 {
		return ""
	}
	if err := makeDevDir(dir); err != nil {
		return ""
	}
	h.devDirs.m[stateDir] = true
	return dir
}

// devDirOK checks that dir holds exactly what makeDevDir puts there, as
// root's: a node of the right number, a link with the right target.
func devDirOK(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is not a folder only root can write", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) != len(devNodes)+len(devLinks)+1 {
		return fmt.Errorf("%s holds %d entries", dir, len(ents))
	}
	for _, n := range devNodes {
		if err := unix.Lstat(filepath.Join(dir, n.name), &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(n.major, n.minor) || st.Uid != 0 || st.Mode&0o777 != 0o666 {
			return fmt.Errorf("%s/%s is not the device it should be", dir, n.name)
		}
	}
	for _, l := range devLinks {
		if t, err := os.Readlink(filepath.Join(dir, l[1])); err != nil || t != l[0] {
			return fmt.Errorf("%s/%s is not a link to %s", dir, l[1], l[0])
		}
	}
	if err := unix.Lstat(filepath.Join(dir, "shm"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s/shm is not a folder", dir)
	}
	return nil
}

// makeDevDir builds the /dev folder beside dir and swaps it in.
func makeDevDir(dir string) error {
	if devDirOK(dir) == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	tmp, err := os.MkdirTemp(parent, ".dev.new-")
	if err != nil {
		return err
	}
	swapped := false
	defer func() {
		if !swapped {
			_ = os.RemoveAll(tmp) // a half-built folder nobody binds
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	// Modes by chmod, not the umask (the process's umask is shared by
	// every goroutine; toybox.service sets 0077).
	for _, n := range devNodes {
		p := filepath.Join(tmp, n.name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return os.NewSyscallError("mknod", err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			return err
		}
	}
	for _, l := range devLinks {
		if err := os.Symlink(l[0], filepath.Join(tmp, l[1])); err != nil {
			return err
		}
	}
	if err := os.Mkdir(filepath.Join(tmp, "shm"), 0o755); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(tmp, "shm"), 0o755); err != nil {
		return err
	}
	// Whatever is there (it failed devDirOK) is set aside, not removed:
	// walls started before it was changed still show it (bound by path, so
	// which walls is not known: it goes at the next start, SweepViews).
	if _, err := replaceDir(tmp, dir); err != nil {
		return err
	}
	swapped = true
	return nil
}

// appendDev renders the wall's /dev at dest: the prepared folder when
// there is one, else a tmpfs with each node bound from the host. Either
// way /dev/shm is a tmpfs of the wall's own (or a folder of /dev's), of at
// most ShmBytes.
func (h *Host) appendDev(a []string, dest, stateDir string) []string {
	if d := h.devDir(stateDir); d != "" {
		a = append(a, "--dev-bind", d, dest)
		return append(a, "--perms", "01777", "--size", strconv.Itoa(ShmBytes), "--tmpfs", dest+"/shm")
	}
	a = append(a, "--perms", "0755", "--size", strconv.Itoa(ShmBytes), "--tmpfs", dest)
	for _, n := range devNodes {
		a = append(a, "--dev-bind", "/dev/"+n.name, dest+"/"+n.name)
	}
	for _, l := range devLinks {
		a = append(a, "--symlink", l[0], dest+"/"+l[1])
	}
	return append(a, "--perms", "01777", "--dir", dest+"/shm")
}
