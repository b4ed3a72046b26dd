package wall

import (
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// fileID is a file's identity (device and inode).
type fileID struct{ dev, ino uint64 }

func idOf(fi os.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{dev: uint64(st.Dev), ino: st.Ino}
	}
	return fileID{}
}

// kernelReal resolves p as the kernel does, in three system calls (open
// O_PATH, read its /proc/self/fd link, close) instead of a stat per path
// element: a folder when dir is set; with noFollow, p itself must not be a
// symlink. ok is false when it cannot say (any error, no /proc): the
// caller then walks the path itself and reports what is wrong.
func kernelReal(p string, dir, noFollow bool) (real string, ok bool) {
	flags := unix.O_PATH | unix.O_CLOEXEC
	if dir {
		flags |= unix.O_DIRECTORY
	}
	if noFollow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(p, flags, 0)
	if err != nil {
		return "", false
	}
	defer unix.Close(fd)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	if err != nil || n <= 0 || n >= len(buf) {
		return "", false
	}
	real = string(buf[:n])
	if !strings.HasPrefix(real, "/") || strings.HasSuffix(real, " (deleted)") {
		return "", false
	}
	return real, true
}

// classPerm is what fi's mode bits grant (4 read, 2 write, 1 execute or
// search) a process with host ids uid, gid and the supplementary group
// extra (0: none): its owner's bits, its group's, or others', as the kernel
// picks them.
func classPerm(fi os.FileInfo, uid, gid, extra int) fs.FileMode {
	perm := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return perm & 0o007
	case int(st.Uid) == uid:
		return perm >> 6 & 0o007
	case int(st.Gid) == gid || (extra > 0 && int(st.Gid) == extra):
		return perm >> 3 & 0o007
	default:
		return perm & 0o007
	}
}

// mayReadExec reports whether those ids may read and execute (a folder:
// list and search) fi.
func mayReadExec(fi os.FileInfo, uid, gid, extra int) bool {
	return classPerm(fi, uid, gid, extra)&0o005 == 0o005
}

// readOnlyMount reports whether p lies on a mount that is read-only (as
// this process sees it).
func readOnlyMount(p string) bool {
	var st unix.Statfs_t
	return unix.Statfs(p, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}
