package wire

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A peer that does not read leaves this side's messages waiting. go-capnp
// queues every message it has built in a queue of its own, unbounded,
// until the write before it is done, and a write to a full socket blocks
// its one sending goroutine: what waited there could only be counted, in
// messages, never measured. So Conn never leaves go-capnp waiting on the
// socket while it has room: what the socket does not take at once is
// copied behind, and a goroutine of the Conn writes it out. What waits
// for the peer is then here, measured in bytes (Queued), and the answers
// of this side's servers wait while more than Limits.BacklogBytes does
// (throttle, in pipeline.go): a peer cannot make this side build answers
// for it faster than it takes them.

// Bounds of a Conn's copy of what the peer has not taken.
const (
	behindMax  = DefaultBacklogBytes    // copied before a write waits; a message past it waits for the copy to go, then is written in line, uncopied
	closeGrace = 100 * time.Millisecond // how long Close waits for the copy to go: as long as go-capnp waits for its abort to be sent
)

// behindBufs holds the copies' buffers between uses, shared by every Conn
// (the garbage collector empties it). A stream whose peer reads slower
// than it writes copies nearly every message: a fresh buffer for each (64
// KiB to 4 MiB) cost page faults, zeroing, a collection every few
// messages and the scavenger's TLB flushes, and took the ByteStream
// fallback from 731 to about 100 MB/s (most of its CPU in the writer's
// runtime). A Conn the peer has caught up on still holds no buffer.
var behindBufs sync.Pool // of *[]byte, empty, cap at most behindMax

// takeBuf returns an empty buffer, from behindBufs where it has one.
func takeBuf() []byte {
	if p, ok := behindBufs.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return nil
}

// giveBuf gives buf back to behindBufs (one past behindMax goes to the
// collector: the pool holds what one copy may hold, no more).
func giveBuf(buf []byte) {
	if cap(buf) == 0 || cap(buf) > behindMax {
		return
	}
	buf = buf[:0]
	behindBufs.Put(&buf)
}

// behind is a Conn's write-behind state. Its fields are guarded by the
// Conn's wmu, but for queued.
type behind struct {
	buf     []byte     // copied, not yet handed to the writer; nil once it has all
	out     int        // bytes the writer is writing
	inline  int        // bytes of a message written in line, or waiting to be
	writing bool       // the writer goroutine runs
	err     error      // the first write that failed; every later write fails with it
	drained *sync.Cond // on wmu: queued fell, or the writer is done
	queued  atomic.Int64
}

// publish stores how many bytes wait for the peer (the caller holds wmu).
func (b *behind) publish() { b.queued.Store(int64(len(b.buf) + b.out + b.inline)) }

// Queued reports how many bytes of the messages written to c the peer has
// not taken yet, beyond what the socket holds: those copied behind, and a
// message being written in line.
func (c *Conn) Queued() int64 { return c.behind.queued.Load() }

// flush writes bufs, one Cap'n Proto message (or bytes that are not one),
// with the queued descriptors on its first byte. It returns as soon as the
// socket has taken bufs or a copy of what it did not take is behind. A
// message that does not fit behind waits for the copy to be written and
// is then written in line, blocking. The caller holds wmu, and is the
// only writer (go-capnp's sending goroutine).
func (c *Conn) flush(bufs net.Buffers) error {
	b := &c.behind
	if b.err != nil {
		return b.err
	}
	size := 0
	for _, p := range bufs {
		size += len(p)
	}
	if b.writing {
		if len(b.buf)+b.out+size <= behindMax {
			if b.buf == nil {
				b.buf = takeBuf()
			}
			b.buf = appendBufs(b.buf, bufs)
			b.publish()
			return nil
		}
		b.inline = size
		b.publish()
		for b.writing {
			b.drained.Wait()
		}
		b.inline = 0
		b.publish()
		if b.err != nil {
			return b.err
		}
	}
	n, err := c.writeOut(&bufs, false)
	if err != nil {
		b.err = err
		return err
	}
	rest := size - n
	if rest == 0 {
		return nil
	}
	if rest <= behindMax {
		b.buf = appendBufs(takeBuf(), bufs) // given back once written: a connection the peer has caught up on holds nothing
		b.writing = true
		b.publish()
		go c.writeBehind()
		return nil
	}
	// Too large to copy: written in line, as before.
	b.inline = rest
	b.publish()
	_, err = c.writeOut(&bufs, true)
	b.inline = 0
	b.publish()
	if err != nil {
		b.err = err
	}
	b.drained.Broadcast()
	return err
}

func appendBufs(dst []byte, bufs net.Buffers) []byte {
	for _, p := range bufs {
		dst = append(dst, p...)
	}
	return dst
}

// writeBehind writes out the copy until there is none, or a write fails.
func (c *Conn) writeBehind() {
	b := &c.behind
	c.wmu.Lock()
	for len(b.buf) > 0 && b.err == nil {
		buf := b.buf
		b.buf, b.out = nil, len(buf)
		fds := c.pending
		c.pending = nil
		c.wmu.Unlock()
		bufs := net.Buffers{buf}
		_, unsent, err := c.writeFDs(&bufs, fds, true)
		c.wmu.Lock()
		c.pending = append(unsent, c.pending...)
		b.out = 0
		if err != nil {
			b.err = err
		}
		b.publish()
		b.drained.Broadcast()
		giveBuf(buf) // once Queued says it went
	}
	if b.err != nil {
		giveBuf(b.buf)
		b.buf = nil
		b.publish()
	}
	b.writing = false
	b.drained.Broadcast()
	c.wmu.Unlock()
}

// writeOut writes *bufs with the queued descriptors (the caller holds
// wmu), leaving in *bufs what was not written; see writeFDs.
func (c *Conn) writeOut(bufs *net.Buffers, wait bool) (int, error) {
	n, unsent, err := c.writeFDs(bufs, c.pending, wait)
	c.pending = unsent
	return n, err
}

// writeFDs writes *bufs with fds on its first bytes: the last batch of at
// most maxFDsPerWrite in the same sendmsg as the bytes (so the peer
// collects them with the message in one recvmsg), each earlier batch on
// a byte of its own. It closes each descriptor once sent. With wait
// false it stops at the first write the socket would block. It returns
// the bytes written (dropped from *bufs) and the descriptors not sent:
// all of them when the socket took nothing, and any left once *bufs is
// empty (they wait for bytes to ride on).
func (c *Conn) writeFDs(bufs *net.Buffers, fds []outFD, wait bool) (int, []outFD, error) {
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return 0, fds, err
	}
	written := 0
	for {
		for len(*bufs) > 0 && len((*bufs)[0]) == 0 {
			*bufs = (*bufs)[1:]
		}
		if len(*bufs) == 0 {
			return written, fds, nil
		}
		out := *bufs
		var oob []byte
		batch := fds
		if len(batch) > maxFDsPerWrite {
			batch = batch[:maxFDsPerWrite]
			out = net.Buffers{(*bufs)[0][:1]}
		}
		if len(batch) > 0 {
			ints := make([]int, len(batch))
			for i, o := range batch {
				ints[i] = o.num()
			}
			oob = syscall.UnixRights(ints...)
		}
		n, err := sendmsg(rc, out, oob, wait)
		if err != nil || n == 0 {
			return written, fds, err
		}
		for _, o := range batch {
			o.close()
		}
		fds = fds[len(batch):]
		written += n
		*bufs = consume(*bufs, n)
	}
}

// sendmsg writes bufs with the control message oob in one sendmsg(2) and
// returns how many bytes left (oob leaves with the first). With wait false
// a socket that would block takes nothing: n is 0.
func sendmsg(rc syscall.RawConn, bufs net.Buffers, oob []byte, wait bool) (int, error) {
	var n int
	var serr error
	werr := rc.Write(func(fd uintptr) bool {
		for {
			n, serr = sendmsgNow(int(fd), bufs, oob)
			switch {
			case errors.Is(serr, unix.EINTR):
				continue
			case errors.Is(serr, unix.EAGAIN):
				if wait {
					return false // the poller says when it may take more
				}
				n, serr = 0, nil
			}
			return true
		}
	})
	if werr != nil {
		return 0, werr
	}
	if serr != nil {
		return 0, os.NewSyscallError("sendmsg", serr)
	}
	return n, nil
}

// drainBehind waits until what is behind has been written, at most
// closeGrace: past it the writes fail (a write deadline), so a write in
// line that holds wmu lets go of it too.
func (c *Conn) drainBehind() {
	if c.Queued() == 0 {
		return
	}
	_ = c.uc.SetWriteDeadline(time.Now().Add(closeGrace))
	c.wmu.Lock()
	for c.behind.writing {
		c.behind.drained.Wait()
	}
	c.wmu.Unlock()
}

// waitQueued returns once at most limit bytes wait for the peer (Queued),
// or a write has failed (the connection is over).
func (c *Conn) waitQueued(limit int64) {
	if c.Queued() <= limit {
		return
	}
	c.wmu.Lock()
	for c.Queued() > limit && c.behind.err == nil {
		c.behind.drained.Wait()
	}
	c.wmu.Unlock()
}
