//go:build linux && cgo

package seccomp

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"toybox/vat/memfd"
)

// Supported reports whether this architecture has a filter table. It returns
// ErrUnsupported (wrapped with the architecture) when it does not.
func Supported() error {
	if ArchHasTable() {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnsupported, runtime.GOARCH)
}

// compiled holds each variant's program: bit 0 inotify, bit 1 notifier.
var compiled [4]struct {
	once sync.Once
	prog []byte
	err  error
}

// BPF returns the classic BPF program for o, as bubblewrap's --seccomp
// option reads it (struct sock_filter, native endian). Each variant is
// compiled once per process; the caller must not modify the result.
func BPF(o Options) ([]byte, error) {
	i := 0
	if o.Inotify {
		i |= 1
	}
	if o.Notifier {
		i |= 2
	}
	c := &compiled[i]
	c.once.Do(func() { c.prog, c.err = compile(o) })
	return c.prog, c.err
}

func compile(o Options) ([]byte, error) {
	f, err := build(o)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	mf, err := memfd.Create("toybox-seccomp")
	if err != nil {
		return nil, err
	}
	defer mf.Close()
	if err := f.ExportBPF(mf); err != nil {
		return nil, fmt.Errorf("exporting seccomp BPF: %w", err)
	}
	if _, err := mf.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("rewinding seccomp BPF: %w", err)
	}
	prog, err := io.ReadAll(mf)
	if err != nil {
		return nil, fmt.Errorf("reading seccomp BPF: %w", err)
	}
	if len(prog) == 0 || len(prog)%8 != 0 {
		return nil, fmt.Errorf("seccomp BPF has %d bytes, not a whole number of instructions", len(prog))
	}
	return prog, nil
}

// File returns a sealed memfd holding the BPF program for o, positioned
// at its start, for bubblewrap's --seccomp. The caller must close it.
func File(o Options) (*os.File, error) {
	prog, err := BPF(o)
	if err != nil {
		return nil, err
	}
	mf, err := memfd.Sealed("toybox-seccomp", prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp BPF: %w", err)
	}
	return mf, nil
}

func build(o Options) (*libseccomp.ScmpFilter, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	f, err := libseccomp.NewFilter(libseccomp.ActAllow)
	if err != nil {
		return nil, fmt.Errorf("creating seccomp filter: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Release()
		}
	}()
	// Only the native architecture is in the filter; a call for any other
	// (i386 via int 0x80, x32 on amd64) kills the process.
	if err := f.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		return nil, fmt.Errorf("setting the bad-arch action: %w", err)
	}
	// A binary tree of syscall numbers instead of a linear list: every
	// system call of the wall pays for the filter. Best effort (libseccomp
	// >= 2.5); the program is the same either way.
	_ = f.SetOptimize(2)
	// bwrap sets no_new_privs itself; the exported program does not carry it.
	if err := f.SetNoNewPrivsBit(true); err != nil {
		return nil, fmt.Errorf("setting no_new_privs: %w", err)
	}
	eperm := libseccomp.ActErrno.SetReturnCode(int16(unix.EPERM))
	enosys := libseccomp.ActErrno.SetReturnCode(int16(unix.ENOSYS))

	refused := Refused
	if o.Notifier {
		refused = slices.DeleteFunc(slices.Clone(refused), func(s string) bool { return slices.Contains(NotifierCalls, s) })
	}
	if !o.Inotify {
		refused = append(slices.Clone(refused), Inotify...)
	}
	for _, name := range refused {
		sc, err := libseccomp.GetSyscallFromName(name)
		if err != nil {
			continue // not a call on this architecture
		}
		if err := f.AddRule(sc, eperm); err != nil {
			return nil, fmt.Errorf("refusing %s: %w", name, err)
		}
	}

	// clone3 passes its flags in memory, where a filter cannot look: it
	// answers ENOSYS so libc falls back to clone, whose flags are checked.
	if err := rule(f, "clone3", enosys); err != nil {
		return nil, err
	}
	for _, flag := range CloneNamespaceFlags {
		if err := rule(f, "clone", eperm, cond(0, libseccomp.CompareMaskedEqual, flag, flag)); err != nil {
			return nil, err
		}
	}
	// socket(): only unix, inet and inet6, and never raw or packet sockets.
	// libseccomp allows one check per argument in a rule, so every other
	// family is refused by its own rule: 0, 3..9, and anything above 10.
	for _, fam := range refusedFamiliesBelowInet6 {
		if err := rule(f, "socket", eperm, cond(0, libseccomp.CompareEqual, fam)); err != nil {
			return nil, err
		}
	}
	if err := rule(f, "socket", eperm, cond(0, libseccomp.CompareGreater, afInet6)); err != nil {
		return nil, err
	}
	for _, typ := range []uint64{sockRaw, sockPacket} {
		if err := rule(f, "socket", eperm, cond(1, libseccomp.CompareMaskedEqual, sockType, typ)); err != nil {
			return nil, err
		}
	}
	if err := rule(f, "socketpair", eperm, cond(0, libseccomp.CompareNotEqual, afUnix)); err != nil {
		return nil, err
	}
	// prlimit64 on another process: the app shares its uid with
	// toybox-entry (pid 1), which the kernel lets it limit (its descriptors,
	// say, until the descriptors passed to it are dropped). Its own limits
	// (pid 0, as setrlimit and getrlimit use it) stay its own to set.
	if err := rule(f, "prlimit64", eperm, cond(0, libseccomp.CompareNotEqual, 0)); err != nil {
		return nil, err
	}
	// Terminal input injection.
	for _, req := range []uint64{tiocsti, tioclinux} {
		if err := rule(f, "ioctl", eperm, cond(1, libseccomp.CompareMaskedEqual, 0xffffffff, req)); err != nil {
			return nil, err
		}
	}
	// A socket's interface ioctls (RefusedIoctls says why).
	for _, r := range RefusedIoctls {
		if err := rule(f, "ioctl", eperm, cond(1, libseccomp.CompareMaskedEqual, r[0], r[1])); err != nil {
			return nil, err
		}
	}
	// Binding a socket to a device (RefusedSockopts says why).
	for _, opt := range RefusedSockopts {
		if err := rule(f, "setsockopt", eperm, cond(1, libseccomp.CompareMaskedEqual, 0xffffffff, solSocket), cond(2, libseccomp.CompareMaskedEqual, 0xffffffff, opt)); err != nil {
			return nil, err
		}
	}
	// personality(): only PER_LINUX (0) and the query (0xffffffff; the
	// kernel reads the low 32 bits). Expressed one bit at a time: refuse a
	// value with any low bit set while bit 31 is clear, and a value with bit
	// 31 set while any low bit is clear.
	for b := range 31 {
		low := uint64(1) << b
		if err := rule(f, "personality", eperm, cond(0, libseccomp.CompareMaskedEqual, low|perBit31, low)); err != nil {
			return nil, err
		}
		if err := rule(f, "personality", eperm, cond(0, libseccomp.CompareMaskedEqual, low|perBit31, perBit31)); err != nil {
			return nil, err
		}
	}
	ok = true
	return f, nil
}

// cond is a rule condition; the operands are constants of this file, so an
// error here is a programming error.
func cond(arg uint, op libseccomp.ScmpCompareOp, values ...uint64) libseccomp.ScmpCondition {
	c, err := libseccomp.MakeCondition(arg, op, values...)
	if err != nil {
		panic(fmt.Sprintf("seccomp condition on arg %d: %v", arg, err))
	}
	return c
}

func rule(f *libseccomp.ScmpFilter, name string, act libseccomp.ScmpAction, conds ...libseccomp.ScmpCondition) error {
	sc, err := libseccomp.GetSyscallFromName(name)
	if err != nil {
		return nil // not a call on this architecture
	}
	if len(conds) == 0 {
		err = f.AddRule(sc, act)
	} else {
		err = f.AddRuleConditional(sc, act, conds)
	}
	if err != nil {
		return fmt.Errorf("adding the %s rule: %w", name, err)
	}
	return nil
}

// NotifierSupported reports whether this kernel can give the app's
// connect() calls to toybox-entry (transparent egress): seccomp user
// notification with SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19;
// without it a signal during a connect restarts it without end), sockets'
// network namespace cookies (5.14) and pidfd_getfd (5.6). nil, or why
// not.
func NotifierSupported() error {
	if err := Supported(); err != nil {
		return err
	}
	act := uint32(0x7fc00000) // SECCOMP_RET_USER_NOTIF
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, 2 /* SECCOMP_GET_ACTION_AVAIL */, 0, uintptr(unsafe.Pointer(&act))); e != 0 {
		return fmt.Errorf("this kernel has no seccomp user notification: %w", e)
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return fmt.Errorf("reading the kernel's version: %w", err)
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(rel, "%d.%d", &major, &minor); err != nil {
		return fmt.Errorf("reading the kernel's version %q: %w", rel, err)
	}
	if major < 5 || major == 5 && minor < 19 {
		return fmt.Errorf("kernel %s is older than 5.19 (seccomp's WAIT_KILLABLE_RECV)", rel)
	}
	return entryCallsAllowed()
}

// entryCallsAllowed says why toybox-entry, a descendant of this process
// under every filter this process is under, could not answer a connect():
// it reads the address with process_vm_readv and takes the socket with
// pidfd_getfd. A service manager's filter (systemd's SystemCallFilter, the
// @debug set) may refuse either; each is tried on this process itself.
func entryCallsAllowed() error {
	const why = "%s is refused to this process (a seccomp filter of its own, such as a systemd unit's SystemCallFilter, refuses it): %w"
	var src, dst [8]byte
	local := []unix.Iovec{{Base: &dst[0]}}
	local[0].SetLen(len(dst))
	remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: len(src)}}
	if _, err := unix.ProcessVMReadv(os.Getpid(), local, remote, 0); err != nil {
		return fmt.Errorf(why, "process_vm_readv", err)
	}
	pfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return fmt.Errorf(why, "pidfd_open", err)
	}
	defer unix.Close(pfd)
	fd, err := unix.PidfdGetfd(pfd, pfd, 0)
	if err != nil {
		return fmt.Errorf(why, "pidfd_getfd", err)
	}
	return unix.Close(fd)
}

// ListenerInstallable reports whether a process started from here may
// install a seccomp filter with a notification listener, as toybox-entry
// does for the app's connect() calls: nil, or why not (EBUSY: a filter
// this process is under already has a listener, such as another seccomp
// notifier's supervisor; only one listener per chain). It installs an
// allow-everything filter with a listener on a thread of its own, closes
// the listener and lets that thread end (it is never used again).
func ListenerInstallable() error {
	if err := NotifierSupported(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends (or, the main thread, stays
		// parked) with the goroutine, and its filter with it.
		runtime.LockOSThread()
		done <- installProbeListener()
	}()
	return <-done
}

func installProbeListener() error {
	// Allow everything: the probe changes nothing this thread does.
	prog := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// no_new_privs is this thread's alone (it is never used again).
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("probing a seccomp listener: %w", os.NewSyscallError("prctl", err))
	}
	const flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fp)))
	runtime.KeepAlive(prog)
	if e == unix.EBUSY {
		return fmt.Errorf("the kernel refuses a seccomp listener (%w): this process runs under another seccomp notifier", e)
	}
	if e != 0 {
		return fmt.Errorf("the kernel refuses a seccomp listener: %w", e)
	}
	return unix.Close(int(fd))
}
