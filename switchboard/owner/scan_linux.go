//go:build linux

package owner

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// supported: this platform has /proc to ask.
const supported = true

// procRoot is where procfs is mounted.
const procRoot = "/proc"

// readListeners returns the listening TCP sockets of the checker's network
// namespace: from sock_diag (diagListeners), or, where netlink is refused
// (a sandbox, a kernel without inet_diag), from /proc/net/tcp{,6}; diagErr
// then says why netlink was not used.
func readListeners() (ls []Listener, diagErr, err error) {
	v4, diagErr := diagListeners(unix.AF_INET)
	if diagErr == nil {
		var v6 []Listener
		if v6, diagErr = diagListeners(unix.AF_INET6); diagErr == nil {
			return append(v4, v6...), nil, nil
		}
	}
	ls, err = procListeners()
	return ls, diagErr, err
}

// procListeners reads both TCP tables of the checker's network namespace
// from /proc.
func procListeners() ([]Listener, error) {
	var all []Listener
	for _, t := range []struct {
		name string
		v6   bool
	}{{"net/tcp", false}, {"net/tcp6", true}} {
		path := filepath.Join(procRoot, t.name)
		f, err := os.Open(path)
		if err != nil {
			if t.v6 && errors.Is(err, fs.ErrNotExist) {
				continue // a kernel without IPv6 has no tcp6 table, and no v6 listener
			}
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		ls, err := ParseProcNet(f, t.v6, binary.NativeEndian)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		all = append(all, ls...)
	}
	return all, nil
}

// gone reports whether err means the process went away while we looked.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

// scanHolders walks /proc/<pid>/fd of every process and returns, for each of
// inodes, the processes holding that socket, and the processes whose
// descriptors could not be read (pid → effective uid, -1 when unknown).
func scanHolders(inodes map[uint64]bool) (map[uint64][]Proc, map[int]int, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s: %w", procRoot, err)
	}
	holders := make(map[uint64][]Proc)
	hidden := make(map[int]int)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(procRoot, e.Name())
		hid := false
		hide := func() {
			if hid {
				return // one look at its status is enough
			}
			hid = true
			uids, err := readUIDs(dir)
			switch {
			case err == nil:
				hidden[pid] = uids[1]
			case !gone(err):
				hidden[pid] = -1
			}
		}
		held, err := heldSockets(filepath.Join(dir, "fd"), inodes, hide)
		if err != nil {
			if !gone(err) {
				hide()
			}
			continue
		}
		if len(held) == 0 {
			continue
		}
		p, err := readProc(pid)
		if err != nil && gone(err) {
			continue
		}
		for _, ino := range held {
			holders[ino] = append(holders[ino], p)
		}
	}
	return holders, hidden, nil
}

// heldSockets returns which of inodes the descriptors in fdDir
// (/proc/<pid>/fd) are, calling hide when one cannot be read. Each link is
// read relative to the open directory, into one buffer: a process may hold
// thousands of descriptors.
func heldSockets(fdDir string, inodes map[uint64]bool, hide func()) ([]uint64, error) {
	d, err := os.Open(fdDir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sc, err := d.SyscallConn()
	if err != nil {
		return nil, err
	}
	var held []uint64
	var buf [64]byte // "socket:[4294967295]"; anything longer is no socket
	err = sc.Control(func(dfd uintptr) {
		for _, name := range names {
			n, err := unix.Readlinkat(int(dfd), name, buf[:])
			if err != nil {
				if !gone(err) {
					hide() // a descriptor we cannot see might be the socket
				}
				continue // or closed meanwhile
			}
			if n == len(buf) {
				continue
			}
			ino, ok := socketInode(string(buf[:n]))
			if ok && inodes[ino] && !containsU64(held, ino) {
				held = append(held, ino)
			}
		}
	})
	return held, err
}

func containsU64(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// socketInode parses a /proc/<pid>/fd link "socket:[12345]".
func socketInode(link string) (uint64, bool) {
	rest, ok := strings.CutPrefix(link, "socket:[")
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, "]")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	return n, err == nil
}

// readUIDs reads the Uid: line of /proc/<pid>/status.
func readUIDs(dir string) ([4]int, error) {
	var u [4]int
	b, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return u, err
	}
	return parseStatusUIDs(b)
}

// parseStatusUIDs finds "Uid:\treal\teffective\tsaved\tfs" in a status file.
func parseStatusUIDs(b []byte) ([4]int, error) {
	var u [4]int
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Uid:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 4 {
			return u, fmt.Errorf("status Uid line %q: want 4 fields", line)
		}
		for i, s := range f {
			n, err := strconv.Atoi(s)
			if err != nil {
				return u, fmt.Errorf("status Uid line %q: %w", line, err)
			}
			u[i] = n
		}
		return u, nil
	}
	return u, errors.New("status has no Uid line")
}

// readProc gathers what the judgement needs about pid. A part that cannot be
// read is left empty and named in Err; only a vanished process is an error.
func readProc(pid int) (Proc, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	p := Proc{PID: pid}
	var problems []string
	uids, err := readUIDs(dir)
	if err != nil {
		if gone(err) {
			return p, err
		}
		problems = append(problems, "uid: "+err.Error())
		uids = [4]int{-1, -1, -1, -1}
	}
	p.UIDs = uids
	if b, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
		p.Comm = strings.TrimSuffix(string(b), "\n")
	}
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err != nil {
		problems = append(problems, "executable: "+err.Error())
	} else {
		p.Exe = strings.TrimSuffix(exe, " (deleted)")
	}
	if cwd, err := os.Readlink(filepath.Join(dir, "cwd")); err != nil {
		problems = append(problems, "working directory: "+err.Error())
	} else {
		p.Cwd = cwd
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err != nil {
		problems = append(problems, "command line: "+err.Error())
	} else {
		b = bytes.TrimSuffix(b, []byte{0})
		if len(b) > 0 {
			p.Argv = strings.Split(string(b), "\x00")
		} else {
			problems = append(problems, "command line: empty")
		}
	}
	for _, a := range p.Argv {
		c := a
		if _, v, ok := strings.Cut(a, "="); ok && strings.Contains(v, "/") {
			c = v
		}
		if !strings.Contains(c, "/") {
			continue
		}
		if !filepath.IsAbs(c) {
			if p.Cwd == "" {
				continue
			}
			c = filepath.Join(p.Cwd, c)
		}
		if r, ok := resolveExisting(c); ok && r != filepath.Clean(c) {
			p.Resolved = append(p.Resolved, r)
		}
	}
	if len(problems) > 0 {
		p.Err = strings.Join(problems, "; ")
	}
	return p, nil
}

// resolveExisting resolves the symlinks of the longest existing prefix of the
// absolute path and appends the rest unchanged, so "/link/not-yet-made" still
// shows where it points.
func resolveExisting(path string) (string, bool) {
	path = filepath.Clean(path)
	rest := ""
	for dir := path; ; dir = filepath.Dir(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest), true
		}
		if dir == "/" || dir == "." {
			return "", false
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}
