package switchboard

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"toybox/schema/wire/quiet"
)

// tracker watches sockets that were handed over: when a socket is shut
// down both ways (by the receiver, or the remote) or fails, the
// switchboard's duplicate is closed and forgotten. A receiver therefore
// ends a handed-over connection with shutdown(2), not close(2) alone:
// while the switchboard holds its duplicate, close alone sends no FIN.
type tracker struct {
	epfd int
	ep   *os.File // epfd in the runtime's poller, where the loop waits
	wake int      // eventfd that stops the loop

	mu     sync.Mutex
	m      map[uint64]*held // by registration id, never by fd (fds are reused)
	nextID uint64
	closed bool
	done   chan struct{}
}

func newTracker() (*tracker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN}); err != nil { // id 0
		_ = unix.Close(epfd)
		_ = unix.Close(wake)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	t := &tracker{epfd: epfd, wake: wake, m: map[uint64]*held{}, done: make(chan struct{})}
	// The loop waits for the epoll descriptor to become readable in the
	// runtime's poller, and reads its events without blocking: a
	// goroutine blocked in epoll_wait(2) would hold the process's one
	// thread for Go code until sysmon took it back, and each event would
	// hand it back and forth between threads (two wake-ups of other
	// threads per connection's end).
	var rc syscall.RawConn
	if err := unix.SetNonblock(epfd, true); err == nil {
		t.ep = os.NewFile(uintptr(epfd), "tracker")
		if c, err := t.ep.SyscallConn(); err == nil && t.ep.SetReadDeadline(time.Time{}) == nil {
			rc = c
		}
	}
	go t.loop(rc)
	return t, nil
}

// loop shuts the sockets whose events arrive until the wake eventfd
// fires. With rc (epfd in the poller) it never blocks in a syscall.
func (t *tracker) loop(rc syscall.RawConn) {
	defer close(t.done)
	events := make([]unix.EpollEvent, 64)
	wait := func() (int, error) { return unix.EpollWait(t.epfd, events, -1) }
	if rc != nil {
		wait = func() (n int, err error) {
			rerr := rc.Read(func(uintptr) bool {
				n, err = epollWaitNow(t.epfd, events)
				return n != 0 || err != nil
			})
			if err == nil {
				err = rerr
			}
			return n, err
		}
	}
	for {
		n, err := wait()
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if id == 0 {
				return // the wake eventfd
			}
			t.mu.Lock()
			x := t.m[id]
			t.mu.Unlock()
			if x != nil {
				go x.shut()
			}
		}
	}
}

// add watches x's socket for a full shutdown or an error.
func (t *tracker) add(x *held) error {
	fd, err := connFD(x.conn)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("switchboard closed")
	}
	if x.untracked {
		return errors.New("connection already shut")
	}
	t.nextID++
	id := t.nextID
	// No requested events: EPOLLHUP and EPOLLERR are always reported, once
	// (EPOLLONESHOT: the loop must not spin while shut runs). The
	// event carries the registration id, so a late event for a closed fd
	// never reaches a newer socket that reused its number.
	ev := unix.EpollEvent{Events: unix.EPOLLONESHOT, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	if err := quiet.EpollCtl(t.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	x.fd, x.trackID = fd, id
	t.m[id] = x
	return nil
}

// remove stops watching x (before its descriptor is closed).
func (t *tracker) remove(x *held) {
	t.mu.Lock()
	defer t.mu.Unlock()
	x.untracked = true // a later add fails
	if x.fd < 0 {
		return
	}
	if t.m[x.trackID] == x {
		delete(t.m, x.trackID)
		if !t.closed {
			_ = quiet.EpollCtl(t.epfd, unix.EPOLL_CTL_DEL, x.fd, nil)
		}
	}
	x.fd = -1
}

func (t *tracker) close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(t.wake, one[:])
	<-t.done
	_ = unix.Close(t.wake)
	if t.ep != nil {
		return t.ep.Close()
	}
	return unix.Close(t.epfd)
}

// epollWaitNow reads the events epfd holds, without waiting and without
// entering the runtime's blocking-syscall path (a Go syscall wakes
// sysmon, which then polls every 20 µs for a while).
func epollWaitNow(epfd int, events []unix.EpollEvent) (int, error) {
	for {
		r, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(r), nil
	}
}

// connFD returns the descriptor of a socket connection (valid while the
// connection is open): a *net.TCPConn, or the handOverConn of dialHandOver.
func connFD(c net.Conn) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errors.New("not a socket connection")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// shutdownConn shuts a TCP socket down both ways: every descriptor of it,
// in any process, sees the end.
func shutdownConn(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
}

// count reports how many sockets are watched.
func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
