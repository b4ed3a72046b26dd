package relay

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Splice pipes: a direction of a relay takes one only once its source has
// bytes (or its end) to move, and gives it back as soon as the source has
// nothing more, so an idle connection holds no pipe. io.Copy between two
// sockets held a pipe from Go's pool for the copy's whole length: four
// descriptors for every connection, idle or not, beside its two sockets
// (toybox-entry ran out of descriptors at about 3300 idle connections under
// a limit of 20000).
//
// A pipe of the default size holds 64 KiB, so a gigabyte took 32768
// splice(2) calls, each a costly trip into the kernel: the first BigPipes
// pipes open at once are grown to 1 MiB, as Go's own io.Copy grows its
// pipes. An empty pipe holds no pages whatever its size, but a grown one
// can hold a MiB in flight while its destination is slow, and the kernel
// counts its size against the user's pipe pages (fs.pipe-user-pages-soft,
// 64 MiB by default), which the app in the wall shares. Hence the bound.
const (
	MaxPipes     = 256      // pipes open at once unless SetMaxPipes says fewer; past it a direction copies through a buffer
	maxFreePipes = 16       // idle pipes kept for the next burst
	BigPipes     = 8        // pipes grown to bigPipeSize at once: 8 MiB in flight, 2048 of the user's 16384 default pipe pages
	bigPipeSize  = 1 << 20  // fs.pipe-max-size's default: what an unprivileged user may grow a pipe to
	spliceMax    = 1 << 20  // bytes asked of one splice(2)
	bufSize      = 32 << 10 // a direction's buffer when no pipe can be had
)

// pipe is one splice pipe; big says it was grown to bigPipeSize.
type pipe struct {
	r, w int
	big  bool
}

var pipes struct {
	sync.Mutex
	free []pipe
	open int
	big  int // grown pipes open
	max  int
}

func init() { pipes.max = MaxPipes }

// SetMaxPipes bounds the splice pipes open at once to n (at most
// MaxPipes): a process short of descriptors keeps its pipes within its
// budget. Pipes open beyond it close as they come back.
func SetMaxPipes(n int) {
	pipes.Lock()
	pipes.max = min(max(n, 0), MaxPipes)
	pipes.Unlock()
}

// getPipe returns a free pipe, a new one, or ok false when SetMaxPipes's bound is reached
// or no descriptor is left for one: the caller copies through a buffer.
func getPipe() (pipe, bool) {
	pipes.Lock()
	defer pipes.Unlock()
	if n := len(pipes.free); n > 0 {
		// A grown pipe first: the free list is short (maxFreePipes).
		i := n - 1
		for j := i; j >= 0; j-- {
			if pipes.free[j].big {
				i = j
				break
			}
		}
		p := pipes.free[i]
		pipes.free[i] = pipes.free[n-1]
		pipes.free = pipes.free[:n-1]
		return p, true
	}
	if pipes.open >= pipes.max {
		return pipe{}, false
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return pipe{}, false
	}
	pipes.open++
	p := pipe{r: fds[0], w: fds[1]}
	if pipes.big < BigPipes {
		// A user past its pipe pages (or a pipe-max-size below 1 MiB)
		// refuses this with EPERM: the pipe keeps the size it has.
		if _, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, bigPipeSize); err == nil {
			p.big = true
			pipes.big++
		}
	}
	return p, true
}

// closePipe closes p; pipes must be locked.
func closePipe(p pipe) {
	pipes.open--
	if p.big {
		pipes.big--
	}
	_ = unix.Close(p.r)
	_ = unix.Close(p.w)
}

// putPipe gives back p, which must be empty.
func putPipe(p pipe) {
	pipes.Lock()
	defer pipes.Unlock()
	if len(pipes.free) < maxFreePipes && pipes.open <= pipes.max {
		pipes.free = append(pipes.free, p)
		return
	}
	closePipe(p)
}

// dropPipe closes p, which may still hold bytes.
func dropPipe(p pipe) {
	pipes.Lock()
	defer pipes.Unlock()
	closePipe(p)
}

var bufs = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

// Copy copies from src to dst until src's end (nil) or an error, like
// io.Copy. Between two sockets (TCP or unix stream) the bytes go through a
// splice pipe, held only while they move; when none can be had, through a
// buffer. Read and write deadlines, and a close of either connection, end
// it as they end a Read or a Write.
func Copy(dst, src net.Conn) (int64, error) {
	rs, ok1 := streamSocket(src)
	rd, ok2 := streamSocket(dst)
	if !ok1 || !ok2 {
		return io.Copy(dst, src)
	}
	return copyRaw(rd, rs)
}

// streamSocket returns c's descriptor when c is a stream socket (TCP, or
// a unix stream socket).
func streamSocket(c net.Conn) (syscall.RawConn, bool) {
	tcp := false
	switch c.(type) {
	case *net.TCPConn:
		tcp = true // a stream socket, by what TCP is: no getsockopt to ask
	case *net.UnixConn:
	default:
		return nil, false
	}
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil || tcp {
		return raw, err == nil
	}
	typ := -1
	if err := raw.Control(func(fd uintptr) { typ, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE) }); err != nil {
		return nil, false
	}
	return raw, typ == unix.SOCK_STREAM
}

func copyRaw(dst, src syscall.RawConn) (int64, error) {
	var total int64
	var p pipe
	held := false
	canSplice := true
	defer func() {
		if held {
			putPipe(p)
		}
	}()
	for {
		var n int64
		var rerr error
		spliced := false
		var buf *[]byte
		err := src.Read(func(fd uintptr) bool {
			if !held && canSplice {
				p, held = getPipe()
			}
			if held {
				for {
					n, rerr = splice(int(fd), p.w, spliceMax)
					if !errors.Is(rerr, unix.EINTR) {
						break
					}
				}
				if errors.Is(rerr, unix.EAGAIN) {
					// Nothing to move: the pipe goes back while
					// this direction waits.
					putPipe(p)
					held = false
					return false
				}
				if !errors.Is(rerr, unix.EINVAL) || total > 0 {
					spliced = true
					return true
				}
				// This socket cannot be spliced: a buffer, from
				// here on (nothing was moved).
				putPipe(p)
				held, canSplice = false, false
			}
			if buf == nil {
				buf = bufs.Get().(*[]byte)
			}
			var m int
			for {
				m, rerr = unix.Read(int(fd), *buf)
				if !errors.Is(rerr, unix.EINTR) {
					break
				}
			}
			if errors.Is(rerr, unix.EAGAIN) {
				return false
			}
			n = int64(m)
			return true
		})
		if err == nil {
			err = rerr
		}
		if err != nil || n <= 0 {
			if buf != nil {
				bufs.Put(buf)
			}
			if err != nil {
				return total, wrapErr("read", err)
			}
			return total, nil // the source's end
		}
		if spliced {
			err = writeAll(dst, n, func(fd int, left int64) (int64, error) {
				return splice(p.r, fd, int(left))
			})
		} else {
			b := (*buf)[:n]
			err = writeAll(dst, n, func(fd int, _ int64) (int64, error) {
				m, err := unix.Write(fd, b)
				if m > 0 {
					b = b[m:]
				}
				return int64(max(m, 0)), err
			})
			bufs.Put(buf)
		}
		if err != nil {
			if spliced {
				// Bytes may be left in the pipe: it is not reused.
				dropPipe(p)
				held = false
			}
			return total, wrapErr("write", err)
		}
		total += n
	}
}

// splice moves up to n bytes from in to out without blocking. It is a raw
// system call: the runtime is not told, so it hands this thread's P to no
// other thread while the call runs (which it would after 20 us, waking a
// thread: a 1 MiB splice takes longer). SPLICE_F_NONBLOCK and both ends
// being non-blocking bound the call.
func splice(in, out, n int) (int64, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n), unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE)
	if e != 0 {
		return 0, e
	}
	return int64(r), nil
}

// writeAll has move write n bytes to dst's descriptor, as many as it takes
// each time (move is given what is left), waiting for dst to take more when
// it answers EAGAIN.
func writeAll(dst syscall.RawConn, n int64, move func(fd int, left int64) (int64, error)) error {
	var werr error
	err := dst.Write(func(fd uintptr) bool {
		for n > 0 {
			m, e := move(int(fd), n)
			switch {
			case errors.Is(e, unix.EINTR):
				continue
			case errors.Is(e, unix.EAGAIN):
				return false
			case e != nil:
				werr = e
				return true
			}
			n -= m
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return err
}

// wrapErr names the call that failed, as the net package's errors do; the
// poller's own (net.ErrClosed, os.ErrDeadlineExceeded) pass as they are.
func wrapErr(op string, err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return os.NewSyscallError(op, errno)
	}
	return err
}
