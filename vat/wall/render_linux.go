package wall

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"toybox/vat/memfd"
	"toybox/vat/wall/seccomp"
)

// fdTable numbers the descriptors bwrap inherits. It is the only place that
// knows that ExtraFiles[i] is fd 3+i.
type fdTable struct {
	files []*os.File
	gate  *seccompGate // the seccomp program's pipe, filled once the block is released
	fence *taskFence   // the entry's task fence, sent once the group is made
	ran   *entryRan    // the entry's answer that it ran, read when the wall ends
}

// pass hands f to bwrap and returns "flag N" for its number there. The table
// owns f from now on.
func (t *fdTable) pass(f *os.File, flag string) []string {
	return []string{flag, strconv.Itoa(t.hold(f))}
}

// hold hands f to bwrap with no option naming it and returns its number
// there. The table owns f from now on.
func (t *fdTable) hold(f *os.File) int {
	t.files = append(t.files, f)
	return 3 + len(t.files) - 1
}

func (t *fdTable) closeAll() {
	for _, f := range t.files {
		_ = f.Close()
	}
	t.files = nil
}

// argsFile holds bwrap's options, NUL-separated, for --args: a sealed
// memfd, rewound, that only bwrap reads.
func argsFile(opts []string) (*os.File, error) {
	var b strings.Builder
	for _, o := range opts {
		if strings.IndexByte(o, 0) >= 0 {
			return nil, fmt.Errorf("%w: a wall option holds a NUL byte", ErrSpec)
		}
		b.WriteString(o)
		b.WriteByte(0)
	}
	// Sealed: nothing can change the options between here and bwrap's read.
	f, err := memfd.Sealed("bwrap-args", []byte(b.String()))
	if err != nil {
		return nil, fmt.Errorf("the options' descriptor: %w", err)
	}
	return f, nil
}

// render turns the plan into bwrap's options and the command it runs,
// opening each fd bind and data file and passing it through fds. The /etc
// view it opens is counted in views, which the caller releases when the
// wall ends.
func (p *Plan) render(fds *fdTable, spec Spec, views *viewHold) (opts, command []string, err error) {
	a := []string{
		"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup",
		"--uid", strconv.Itoa(p.UID), "--gid", strconv.Itoa(p.GID),
		"--hostname", "toybox",
		"--die-with-parent", "--new-session",
		"--cap-drop", "ALL",
		"--clearenv",
	}
	// No bwrap init inside the wall: it would be a process of the vat's
	// own uid running outside the seccomp filter, its memory open to the
	// app through /proc. The wall's pid 1 is toybox-entry (filtered, not
	// dumpable; it reaps and forwards signals).
	a = append(a, "--as-pid-1")
	// No user namespace of the vat's own: the seccomp filter refuses
	// unshare, setns, clone with any namespace flag, and clone3. Where
	// there is no filter (walled-noseccomp), bubblewrap's
	// --disable-userns does it instead; with one, it would only add a
	// second user namespace to every spawn.
	if !p.Seccomp {
		a = append(a, "--disable-userns")
	}
	entryPath := ""
	for _, kv := range p.Env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	for i := range p.Ops {
		op := &p.Ops[i]
		switch op.Kind {
		case OpROBind:
			a = append(a, "--ro-bind", op.Src, op.Dest)
		case OpSymlink:
			a = append(a, "--symlink", op.Src, op.Dest)
		case OpTmpfs:
			if op.Size > 0 {
				a = append(a, "--size", strconv.FormatInt(op.Size, 10))
			}
			a = append(a, "--tmpfs", op.Dest)
		case OpDir:
			a = append(a, "--dir", op.Dest)
		case OpProc:
			a = append(a, "--proc", op.Dest)
		case OpDev:
			a = spec.Host.appendDev(a, op.Dest, spec.StateDir)
		case OpMaskFile:
			a = append(a, "--ro-bind", "/dev/null", op.Dest)
		case OpMaskDir:
			a = append(a, "--perms", "0555", "--size", strconv.Itoa(MaskBytes), "--tmpfs", op.Dest)
		case OpFile, OpROData:
			f, err := dataFile(op.Dest, op.Data)
			if err != nil {
				return nil, nil, err
			}
			a = append(a, "--perms", "0444")
			a = append(append(a, fds.pass(f, "--"+string(op.Kind))...), op.Dest)
		case OpExecFD:
			var f *os.File
			var err error
			if op.held != nil {
				f, err = dupFile(op.held.f, "toybox-entry")
			} else {
				f, _, err = openBind(op)
			}
			if err != nil {
				return nil, nil, err
			}
			entryPath = "/proc/self/fd/" + strconv.Itoa(fds.hold(f))
		case OpROBindFD, OpBindFD:
			var f *os.File
			var err error
			if op.Src == p.EtcView && p.EtcView != "" {
				f, err = views.open(op)
			} else {
				f, _, err = openBind(op)
			}
			if err != nil {
				return nil, nil, err
			}
			a = append(append(a, fds.pass(f, "--"+string(op.Kind))...), op.Dest)
		default:
			return nil, nil, fmt.Errorf("unknown plan op %q", op.Kind)
		}
	}
	// The root (a tmpfs bwrap made) goes read-only: the app writes only
	// where a bind or a tmpfs lets it (its data, /run/toybox, /tmp).
	a = append(a, "--remount-ro", "/", "--chdir", p.Chdir)
	// Every wall reads a seccomp program once its block is released, through
	// a pipe the supervisor fills only then (seccompGate): the filter, or
	// where there is none (walled-noseccomp), one that allows everything.
	prog := allowAll
	if p.Seccomp {
		var err error
		if prog, err = seccomp.BPF(seccomp.Options{Inotify: p.Inotify, Notifier: p.Transparent}); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrNoSeccomp, err)
		}
	}
	sc, err := fds.seccompGate(prog)
	if err != nil {
		return nil, nil, err
	}
	a = append(a, sc...)
	// The entry's own descriptors: its capability and the app's, which it
	// makes the app's fd 3.
	if entryPath == "" {
		return nil, nil, fmt.Errorf("%w: no toybox-entry in the plan", ErrSpec)
	}
	entry := []string{entryPath, "--vat", p.ID}
	if !p.NoNet {
		ec, err := dupFile(spec.EntryCap, "entry-cap")
		if err != nil {
			return nil, nil, err
		}
		entry = append(entry, fds.pass(ec, "--cap-fd")...)
		entry = append(entry, "--proxy-port", strconv.Itoa(p.ProxyPort))
		if p.Transparent {
			entry = append(entry, "--egress-mode", "transparent")
		}
		for _, f := range p.Forwards {
			entry = append(entry, "--forward", fmt.Sprintf("%d=%s", f.Port, joinHostPort(f.Host, f.TargetPort)))
		}
	}
	if p.ListenPort != 0 {
		entry = append(entry, "--listen-port", strconv.Itoa(p.ListenPort), "--listen-path", ListenPath)
	}
	if p.MCP != nil {
		// The bridge's socket: the supervisor keeps its own copy.
		ml, err := dupFile(spec.MCP.Listener, "mcp-listen")
		if err != nil {
			return nil, nil, err
		}
		entry = append(entry, p.MCP.flags()...)
		entry = append(entry, fds.pass(ml, "--mcp-fd")...)
	}
	ac, err := dupFile(spec.AppCap, "app-cap")
	if err != nil {
		return nil, nil, err
	}
	entry = append(entry, fds.pass(ac, "--app-cap-fd")...)
	fence, err := fds.taskFence(spec.Cgroups)
	if err != nil {
		return nil, nil, err
	}
	entry = append(entry, fence...)
	ran, err := fds.entryRan()
	if err != nil {
		return nil, nil, err
	}
	entry = append(entry, ran...)
	entry = append(entry, "--")
	entry = append(entry, p.Command...)
	return a, entry, nil
}

func joinHostPort(host string, port uint16) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(int(port))
	}
	return host + ":" + strconv.Itoa(int(port))
}

// dupFile duplicates f (CLOEXEC) so the fd table owns its own copy.
func dupFile(f *os.File, name string) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("duplicating the %s descriptor: %w", name, os.NewSyscallError("fcntl", err))
	}
	return os.NewFile(uintptr(fd), name), nil
}

// dataFile puts data in a sealed memfd for --file (bubblewrap copies it
// into the wall): what the wall gets is what the plan said, byte for byte.
func dataFile(name string, data []byte) (*os.File, error) {
	f, err := memfd.Sealed("toybox-data:"+name, data)
	if err != nil {
		return nil, fmt.Errorf("data for %s: %w", name, err)
	}
	return f, nil
}

// openBind opens a bind source as an O_PATH descriptor without following any
// symlink on the way (openat2 RESOLVE_NO_SYMLINKS, or O_NOFOLLOW and a
// check of the opened path where openat2 is missing), then checks that it is
// the very file the plan saw.
func openBind(op *Op) (*os.File, fileID, error) {
	flags := uint64(unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW)
	if op.dir {
		flags |= unix.O_DIRECTORY
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, op.Src, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Open(op.Src, int(flags), 0)
		if err == nil {
			if got, lerr := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); lerr != nil || got != op.Src {
				_ = unix.Close(fd)
				return nil, fileID{}, fmt.Errorf("%w: %s now resolves to %q", ErrSymlink, op.Src, got)
			}
		}
	}
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR) && op.dir:
		return nil, fileID{}, fmt.Errorf("%w: %s (%s) is, or passes through, a symlink or not a folder: %w", ErrSymlink, op.Src, op.Why, err)
	case err != nil:
		return nil, fileID{}, fmt.Errorf("opening %s (%s) for its bind: %w", op.Src, op.Why, &os.PathError{Op: "openat2", Path: op.Src, Err: err})
	}
	f := os.NewFile(uintptr(fd), "bind:"+op.Src)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = f.Close()
		return nil, fileID{}, fmt.Errorf("checking %s: %w", op.Src, os.NewSyscallError("fstat", err))
	}
	if op.id != (fileID{}) && (uint64(st.Dev) != op.id.dev || st.Ino != op.id.ino) {
		_ = f.Close()
		return nil, fileID{}, fmt.Errorf("%w: %s (%s) is not the file that was planned", ErrChanged, op.Src, op.Why)
	}
	return f, fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}
