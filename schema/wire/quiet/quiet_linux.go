// Package quiet makes raw system calls that wake no other thread.
//
// They are the calls of a connect's hot path, made without the runtime's
// syscall bookkeeping (entersyscall, exitsyscall), and only calls that
// never block: non-blocking sockets, fcntl, epoll_ctl, close.
//
// Why: the first Go system call a process makes after it has been idle
// wakes the runtime's sysmon thread, which then polls every 20 µs until
// the process is idle again. On a virtual machine where a thread switch is
// dear, those wake-ups were half the context switches of the switchboard
// and of toybox-entry per connect. A raw call (x/sys's RawSyscall) wakes
// nobody. Each function here must only ever be given a call that returns
// at once: a raw call that blocked would stall every goroutine of its P.
package quiet

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// Socket is socket(2).
func Socket(domain, typ, proto int) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(domain), uintptr(typ), uintptr(proto))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// SetsockoptInt is setsockopt(2) with an int value.
func SetsockoptInt(fd, level, opt, value int) error {
	v := int32(value)
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), 4, 0)
	return errnoErr(e)
}

// GetsockoptInt is getsockopt(2) of an int value.
func GetsockoptInt(fd, level, opt int) (int, error) {
	var v int32
	l := uint32(4)
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&l)), 0)
	return int(v), errnoErr(e)
}

// TCPState is the state field of fd's tcp_info (getsockopt TCP_INFO).
func TCPState(fd int) (uint8, error) {
	var ti unix.TCPInfo
	l := uint32(unsafe.Sizeof(ti))
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_INFO, uintptr(unsafe.Pointer(&ti)), uintptr(unsafe.Pointer(&l)), 0)
	return ti.State, errnoErr(e)
}

// Connect is connect(2) to ap (which must carry no zone); on a
// non-blocking socket it returns EINPROGRESS at once.
func Connect(fd int, ap netip.AddrPort) error {
	var e syscall.Errno
	port := ap.Port()
	if a := ap.Addr().Unmap(); a.Is4() {
		sa := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.As4()}
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		_, _, e = unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
	} else {
		sa := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.As16()}
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		_, _, e = unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
	}
	return errnoErr(e)
}

// FcntlInt is fcntl(2) with an int argument.
func FcntlInt(fd, cmd, arg int) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_FCNTL, uintptr(fd), uintptr(cmd), uintptr(arg))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// Close is close(2). The last close of a connected socket with SO_LINGER
// set and bytes unsent waits up to the linger time: Close is only for a
// descriptor that cannot be the last of a socket someone else could have
// set SO_LINGER on (a socket of our own, or a duplicate whose original
// stays open).
func Close(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	return errnoErr(e)
}

// Shutdown is shutdown(2), which never waits.
func Shutdown(fd, how int) error {
	_, _, e := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), uintptr(how), 0)
	return errnoErr(e)
}

// Lingers reports whether a close of socket fd may wait (SO_LINGER on,
// or the option could not be read).
func Lingers(fd int) bool {
	var l unix.Linger
	n := uint32(unsafe.Sizeof(l))
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER, uintptr(unsafe.Pointer(&l)), uintptr(unsafe.Pointer(&n)), 0)
	return e != 0 || l.Onoff != 0
}

// EpollCtl is epoll_ctl(2).
func EpollCtl(epfd, op, fd int, ev *unix.EpollEvent) error {
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	return errnoErr(e)
}

// Sendmsg is sendmsg(2) of bufs with the control message oob; flags must
// hold MSG_DONTWAIT unless fd is non-blocking.
func Sendmsg(fd int, bufs [][]byte, oob []byte, flags int) (int, error) {
	iov := make([]unix.Iovec, 0, len(bufs))
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		v := unix.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		iov = append(iov, v)
	}
	var msg unix.Msghdr
	if len(iov) > 0 {
		msg.Iov = &iov[0]
		msg.SetIovlen(len(iov))
	}
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	return msgCall(unix.SYS_SENDMSG, fd, &msg, flags)
}

// msgCall is sendmsg(2) or recvmsg(2) (trap) of msg, again on EINTR.
func msgCall(trap uintptr, fd int, msg *unix.Msghdr, flags int) (int, error) {
	for {
		r, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(msg)), uintptr(flags))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, errnoErr(e)
		}
		return int(r), nil
	}
}

// Recvmsg is recvmsg(2) into p and oob; flags must hold MSG_DONTWAIT
// unless fd is non-blocking. It returns the bytes read, the control bytes
// and the message flags.
func Recvmsg(fd int, p, oob []byte, flags int) (n, oobn, recvflags int, err error) {
	var msg unix.Msghdr
	var iov unix.Iovec
	if len(p) > 0 {
		iov.Base = &p[0]
		iov.SetLen(len(p))
		msg.Iov = &iov
		msg.SetIovlen(1)
	}
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, err := msgCall(unix.SYS_RECVMSG, fd, &msg, flags)
	if err != nil {
		return 0, 0, 0, err
	}
	return r, int(msg.Controllen), int(msg.Flags), nil
}

// GetsockoptUint64 is getsockopt(2) of a 64-bit value.
func GetsockoptUint64(fd, level, opt int) (uint64, error) {
	var v uint64
	l := uint32(8)
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&l)), 0)
	return v, errnoErr(e)
}

// Ioctl is ioctl(2) with a pointer argument; it returns the errno.
func Ioctl(fd, req uintptr, p unsafe.Pointer) syscall.Errno {
	_, _, e := unix.RawSyscall(unix.SYS_IOCTL, fd, req, uintptr(p))
	return e
}

// PollNow is poll(2) of one descriptor with no wait: the events it has.
func PollNow(fd int, events int16) (int16, error) {
	pf := unix.PollFd{Fd: int32(fd), Events: events}
	var ts unix.Timespec
	for {
		_, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pf)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		return pf.Revents, errnoErr(e)
	}
}

// ProcessVMReadv reads len(p) bytes at addr in process pid into p.
func ProcessVMReadv(pid int, p []byte, addr uintptr) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	local := unix.Iovec{Base: &p[0]}
	local.SetLen(len(p))
	remote := unix.RemoteIovec{Base: addr, Len: len(p)}
	r, _, e := unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(pid), uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// PidfdOpen is pidfd_open(2).
func PidfdOpen(pid, flags int) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_PIDFD_OPEN, uintptr(pid), uintptr(flags), 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// PidfdGetfd is pidfd_getfd(2).
func PidfdGetfd(pidfd, fd, flags int) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_PIDFD_GETFD, uintptr(pidfd), uintptr(fd), uintptr(flags))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// Inode is fd's inode number (fstat(2)).
func Inode(fd int) (uint64, error) {
	var st unix.Stat_t
	_, _, e := unix.RawSyscall(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(&st)), 0)
	return st.Ino, errnoErr(e)
}

// Connected reports whether fd has a peer (getpeername(2); ENOTCONN: not
// yet), without reading the peer's address.
func Connected(fd int) (bool, error) {
	var sa unix.RawSockaddrAny
	l := uint32(unsafe.Sizeof(sa))
	_, _, e := unix.RawSyscall(unix.SYS_GETPEERNAME, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&l)))
	if e == unix.ENOTCONN {
		return false, nil
	}
	return e == 0, errnoErr(e)
}

// ReadSmallFile reads up to len(buf) bytes of path, a file that answers at
// once (one under /proc), into buf, in one read.
func ReadSmallFile(path string, buf []byte) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return 0, err
	}
	cwd := unix.AT_FDCWD
	r, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(p)), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	fd := int(r)
	defer Close(fd)
	r, _, e = unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
