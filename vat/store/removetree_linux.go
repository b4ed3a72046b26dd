package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// RemoveTree removes path and everything below it, as os.RemoveAll does,
// holding at most three descriptors however deep the tree is. Use it for
// any folder code in a wall could write. A vat's run
// and data folders are the vat's to fill, and os.RemoveAll holds one open
// descriptor per level: a chain of folders deeper than the supervisor's
// descriptor limit ran the whole supervisor out of descriptors (every
// accept, dial and spawn failing meanwhile) and then failed, so the vat's
// folders could never be cleared. Here each folder's subfolders are moved
// up into path itself (renameat2, never replacing) before the folder goes,
// so the tree is flattened from the top: every entry is moved at most once,
// and removed right after (no folder is read again for it).
// Symlinks are removed, never followed.
func RemoveTree(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.IsDir():
		return os.Remove(path)
	}
	top, err := unix.Open(path, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(top)
	moved := 0
	for {
		queue, err := dirNames(top, removeRound)
		if err != nil {
			return &os.PathError{Op: "readdir", Path: path, Err: err}
		}
		if len(queue) == 0 {
			break
		}
		for len(queue) > 0 {
			name := queue[len(queue)-1]
			queue = queue[:len(queue)-1]
			up, err := removeEntry(top, name, &moved)
			if err != nil {
				return fmt.Errorf("removing %s: %w", path, err)
			}
			queue = append(queue, up...)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeEntry removes name in top: a file or an empty folder at once; a
// folder with entries has them moved up into top (their new names are
// returned, for the caller to remove next), and then goes.
func removeEntry(top int, name string, moved *int) (up []string, _ error) {
	err := unix.Unlinkat(top, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return nil, &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	err = unix.Unlinkat(top, name, unix.AT_REMOVEDIR)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return nil, &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	dir, err := unix.Openat(top, name, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	defer unix.Close(dir)
	for {
		inner, err := dirNames(dir, removeRound)
		if err != nil {
			return up, &os.PathError{Op: "readdir", Path: name, Err: err}
		}
		if len(inner) == 0 {
			break
		}
		for _, n := range inner {
			for {
				*moved++
				to := fmt.Sprintf(".removing-%d", *moved)
				err := unix.Renameat2(dir, n, top, to, unix.RENAME_NOREPLACE)
				if errors.Is(err, unix.EEXIST) {
					continue // a name of the tree's own: the next number
				}
				if err == nil {
					up = append(up, to)
				} else if !errors.Is(err, unix.ENOENT) {
					return up, &os.LinkError{Op: "renameat2", Old: name + "/" + n, New: to, Err: err}
				}
				break
			}
		}
	}
	if err := unix.Unlinkat(top, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return up, &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	return up, nil
}

// chownTree hands everything below dir and then dir itself to uid:gid
// without following links, holding at most two descriptors and using no path longer than a
// name, however deep the tree (a vat's data folder is the vat's to shape: a
// walk by paths stopped at PATH_MAX, "file name too long", leaving what lay
// deeper under the vat's uid and the handover failed for good). It goes
// down by openat and back up by "..". Its vat is not running, so nothing
// should move a folder meanwhile; if something did, ".." would be where the
// folder went: each step up is checked to land on the folder it came down
// from, else the handover stops with an error. beforeClimb, if not nil,
// runs before each step up (a test moves a folder there).
func chownTree(dir string, uid, gid int, beforeClimb func()) error {
	const flags = unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_RDONLY | unix.O_CLOEXEC
	fd, err := unix.Open(dir, flags, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer func() { _ = unix.Close(fd) }()
	type level struct {
		names    []string
		next     int
		dev, ino uint64 // the folder these names are in
	}
	ident := func(fd int) (uint64, uint64, error) {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return 0, 0, err
		}
		return st.Dev, st.Ino, nil
	}
	names, err := dirNames(fd, 0)
	if err != nil {
		return &os.PathError{Op: "readdir", Path: dir, Err: err}
	}
	dev, ino, err := ident(fd)
	if err != nil {
		return &os.PathError{Op: "fstat", Path: dir, Err: err}
	}
	stack := []level{{names: names, dev: dev, ino: ino}}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next == len(top.names) {
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				break
			}
			if beforeClimb != nil {
				beforeClimb()
			}
			up, err := unix.Openat(fd, "..", flags, 0)
			if err != nil {
				return &os.PathError{Op: "openat", Path: dir + "/.../..", Err: err}
			}
			_ = unix.Close(fd)
			fd = up
			parent := stack[len(stack)-1]
			dev, ino, err := ident(fd)
			if err != nil {
				return fmt.Errorf("handing %s to uid %d: a folder in it was moved while it was handed over (%w)", dir, uid, err)
			}
			if dev != parent.dev || ino != parent.ino {
				return fmt.Errorf("handing %s to uid %d: a folder in it was moved while it was handed over", dir, uid)
			}
			continue
		}
		name := top.names[top.next]
		top.next++
		if err := unix.Fchownat(fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return &os.PathError{Op: "fchownat", Path: dir + "/.../" + name, Err: err}
		}
		child, err := unix.Openat(fd, name, flags, 0)
		switch {
		case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOENT):
			continue // not a folder (a symlink is not followed)
		case err != nil:
			return &os.PathError{Op: "openat", Path: dir + "/.../" + name, Err: err}
		}
		inner, err := dirNames(child, 0)
		if err != nil {
			_ = unix.Close(child)
			return &os.PathError{Op: "readdir", Path: dir + "/.../" + name, Err: err}
		}
		dev, ino, err := ident(child)
		if err != nil {
			_ = unix.Close(child)
			return &os.PathError{Op: "fstat", Path: dir + "/.../" + name, Err: err}
		}
		_ = unix.Close(fd)
		fd = child
		stack = append(stack, level{names: inner, dev: dev, ino: ino})
	}
	// dir itself last (fd is dir again: every step up was checked): the
	// callers hand a folder over only when dir's own owner is not uid yet,
	// so a handover cut short must leave it as it was, for the next to
	// walk the whole tree again.
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return &os.PathError{Op: "fchown", Path: dir, Err: err}
	}
	return nil
}

// removeRound is how many names RemoveTree reads from a folder at a time.
const removeRound = 4096

// dirNames reads the names in the folder open as fd, about limit of them
// (all when max is 0); a duplicate is read, so fd itself stays open and
// rewound.
func dirNames(fd, limit int) ([]string, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	var names []string
	for {
		batch, err := f.Readdirnames(1024)
		names = append(names, batch...)
		if errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
		if limit > 0 && len(names) >= limit {
			return names, nil // a round's worth; the rest in the next
		}
	}
}
