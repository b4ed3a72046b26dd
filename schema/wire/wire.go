// Package wire carries Cap'n Proto and file descriptors over a unix stream
// connection.
//
// go-capnp cannot attach descriptors to messages, so Conn wraps the unix
// connection: a descriptor queued with SendFD rides (SCM_RIGHTS) on the next
// bytes written, which are never later than the message that names it, and
// the receiver numbers descriptors in arrival order. Both sides therefore agree
// on each descriptor's sequence number, and a Cap'n Proto result carries only
// that number (schema Handle.connect's fd). TakeFD claims it. The
// handoff is language-neutral: docs/switchboard.md ("The descriptor
// handoff") says what a receiver in another language does.
package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/rpc"
	"capnproto.org/go/capnp/v3/rpc/transport"
	"golang.org/x/sys/unix"
)

// Limits on descriptors in flight on one connection.
const (
	maxFDsPerWrite = 8
	maxUnclaimed   = 256
	oobSize        = 4 * 64 // room for 64 descriptors in one read
	readAhead      = 64 << 10
)

// Errors.
var (
	ErrNoFD        = errors.New("no descriptor with that sequence number")
	ErrFDsRefused  = errors.New("this connection does not accept descriptors")
	ErrTooManyFDs  = errors.New("too many unclaimed descriptors")
	ErrNotUnixConn = errors.New("not a unix connection")
	ErrTruncated   = errors.New("descriptors were dropped on the way in (the receiver ran out of descriptors): the connection is ended")
)

// Conn is a unix stream connection that carries Cap'n Proto messages and
// file descriptors. It implements io.ReadWriteCloser for the rpc transport.
type Conn struct {
	uc *net.UnixConn

	wmu     sync.Mutex
	pending []outFD // sent with the next write; owned here until then
	sent    uint64
	wbufs   net.Buffers // the Cap'n Proto message being gathered
	wleft   int         // bytes of that message still to come
	behind  behind      // what the peer has not taken yet (behind.go)

	rbuf     []byte // read-ahead; descriptors that came with it are in inbox
	rlo, rhi int

	rmu      sync.Mutex
	acceptFD bool
	recvd    uint64
	inbox    map[uint64]int // descriptors arrived and not yet taken
	broken   error
	oob      []byte
}

// NewConn wraps uc. If acceptFDs is false, any descriptor the peer sends is
// closed at once and the connection is broken (a vat must never be able to
// push descriptors into the supervisor). NewConn takes ownership of uc.
func NewConn(uc *net.UnixConn, acceptFDs bool) *Conn {
	c := &Conn{
		uc: uc, acceptFD: acceptFDs, inbox: map[uint64]int{},
		oob: make([]byte, syscall.CmsgSpace(oobSize)), rbuf: make([]byte, readAhead),
	}
	c.behind.drained = sync.NewCond(&c.wmu)
	return c
}

// Unix returns the underlying connection (for peer credentials).
func (c *Conn) Unix() *net.UnixConn { return c.uc }

// SendFD queues a duplicate of f to be sent to the peer and returns the
// sequence number the peer will know it by. The caller keeps ownership of f.
// The descriptor leaves with the next write on the connection, so a message
// written after SendFD returns is always received after the descriptor.
func (c *Conn) SendFD(f *os.File) (uint64, error) {
	fd, err := dupCloexec(int(f.Fd()))
	if err != nil {
		return 0, fmt.Errorf("duplicating descriptor: %w", err)
	}
	return c.queue(outFD{fd: fd}), nil
}

// outFD is a descriptor queued to be sent: a duplicate of this Conn's
// own (fd), or a file handed over with SendOwned (f). Either is closed
// once sent, or when the connection closes.
type outFD struct {
	f  *os.File
	fd int
}

func (o outFD) num() int {
	if o.f != nil {
		return int(o.f.Fd())
	}
	return o.fd
}

func (o outFD) close() {
	if o.f != nil {
		_ = o.f.Close()
		return
	}
	_ = closeFD(o.fd)
}

// queue queues o and returns the sequence number the peer will know it by.
func (c *Conn) queue(o outFD) uint64 {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.pending = append(c.pending, o)
	c.sent++
	return c.sent
}

// SendOwned is SendFD without the duplicate: it takes ownership of f, which
// is closed once sent or when the connection closes (a relay passing on a
// descriptor it took with TakeFD needs no copy).
func (c *Conn) SendOwned(f *os.File) (uint64, error) {
	return c.queue(outFD{f: f}), nil
}

// DupConn duplicates the socket sc holds (close-on-exec), without an
// intermediate *os.File, for SendOwnedFD: a socket held by a net.Conn is
// handed over this way. With setBlocking the socket is put in blocking
// mode, as a freshly accepted socket comes (the mode is shared with sc's
// own descriptor: the caller does no more I/O on sc); a caller that knows
// it is blocking already saves the system call. The caller keeps sc, and
// may take the duplicate before it queues it (the switchboard does, before
// its watch on the socket can close sc).
func DupConn(sc syscall.Conn, setBlocking bool) (int, error) {
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("duplicating descriptor: %w", err)
	}
	fd := -1
	var derr error
	if err := raw.Control(func(s uintptr) {
		fd, derr = dupCloexec(int(s))
		if derr == nil && setBlocking {
			if err := unix.SetNonblock(fd, false); err != nil {
				_ = closeFD(fd)
				fd, derr = -1, os.NewSyscallError("fcntl", err)
			}
		}
	}); err != nil {
		return -1, fmt.Errorf("duplicating descriptor: %w", err)
	}
	if derr != nil {
		return -1, fmt.Errorf("duplicating descriptor: %w", derr)
	}
	return fd, nil
}

// SendOwnedFD is SendOwned for a bare descriptor: it takes ownership of
// fd, closed once sent or when the connection closes.
func (c *Conn) SendOwnedFD(fd int) uint64 {
	return c.queue(outFD{fd: fd})
}

// TakeFD claims the descriptor with sequence number seq. The caller owns the
// returned file. A descriptor can be taken once.
func (c *Conn) TakeFD(seq uint64) (*os.File, error) {
	fd, err := c.TakeRawFD(seq)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("wire-fd-%d", seq)), nil
}

// TakeRawFD is TakeFD for a caller that uses the descriptor as it is (an
// os.File costs a fcntl, and a registration with the runtime's poller for
// a non-blocking one). The caller must close it.
func (c *Conn) TakeRawFD(seq uint64) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	fd, ok := c.inbox[seq]
	if !ok {
		if c.broken != nil {
			return -1, c.broken
		}
		return -1, fmt.Errorf("descriptor %d: %w", seq, ErrNoFD)
	}
	delete(c.inbox, seq)
	return fd, nil
}

// Read implements io.Reader, collecting any descriptors that arrive. It
// reads ahead, so a Cap'n Proto message costs one recvmsg, not one per
// header and segment; a descriptor is collected when the bytes it rode on
// are read, which is never after the message naming it is decoded.
// Read is called from one goroutine (the rpc transport's reader).
func (c *Conn) Read(p []byte) (int, error) {
	if c.rlo == c.rhi {
		if len(p) >= len(c.rbuf) {
			return c.readMsg(p)
		}
		n, err := c.readMsg(c.rbuf)
		c.rlo, c.rhi = 0, n
		if n == 0 {
			return 0, err
		}
	}
	n := copy(p, c.rbuf[c.rlo:c.rhi])
	c.rlo += n
	return n, nil
}

func (c *Conn) readMsg(p []byte) (int, error) {
	n, oobn, flags, err := c.recvmsg(p)
	if n < 0 {
		n = 0 // an error can come with n = -1
	}
	if flags&syscall.MSG_CTRUNC != 0 {
		// The kernel dropped descriptors it could not install (EMFILE,
		// say): every later sequence number would name the wrong one.
		// Take what did arrive, so it is closed, and end the connection.
		if oobn > 0 {
			_ = c.collect(c.oob[:oobn])
		}
		_ = c.uc.Close()
		return 0, ErrTruncated
	}
	if oobn > 0 {
		if ferr := c.collect(c.oob[:oobn]); ferr != nil {
			_ = c.uc.Close()
			return 0, ferr
		}
	}
	return n, err
}

func (c *Conn) collect(oob []byte) error {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return fmt.Errorf("parsing control message: %w", err)
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	var bad error
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			c.recvd++
			if !c.acceptFD {
				_ = syscall.Close(fd)
				bad = ErrFDsRefused
				continue
			}
			if len(c.inbox) >= maxUnclaimed {
				_ = syscall.Close(fd)
				bad = ErrTooManyFDs
				continue
			}
			c.inbox[c.recvd] = fd
		}
	}
	if bad != nil {
		c.broken = bad
	}
	return bad
}

// Write implements io.Writer. The Cap'n Proto encoder writes a message as
// its stream header, then each segment; Write reads the header's sizes and
// gathers the pieces, so the whole message leaves in one writev. Queued
// descriptors ride on the message's first byte. Bytes that do not start
// with a well-formed header are written at once.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wleft == 0 {
		size, ok := messageSize(p)
		if !ok || size <= len(p) {
			return len(p), c.flush(net.Buffers{p})
		}
		c.wbufs = append(c.wbufs[:0], p)
		c.wleft = size - len(p)
		return len(p), nil
	}
	c.wbufs = append(c.wbufs, p)
	c.wleft -= len(p)
	if c.wleft > 0 {
		return len(p), nil
	}
	c.wleft = 0
	bufs := c.wbufs
	c.wbufs = nil
	return len(p), c.flush(bufs)
}

// messageSize reads a Cap'n Proto stream header at the start of p and
// reports the whole message's size (header and segments).
func messageSize(p []byte) (int, bool) {
	if len(p) < 8 {
		return 0, false
	}
	nseg := int(binary.LittleEndian.Uint32(p)) + 1
	if nseg > 512 {
		return 0, false
	}
	hdr := ((nseg+1)*4 + 7) &^ 7
	if len(p) < hdr {
		return 0, false
	}
	size := hdr
	for i := 0; i < nseg; i++ {
		size += 8 * int(binary.LittleEndian.Uint32(p[4+4*i:]))
		if size > 1<<30 {
			return 0, false
		}
	}
	return size, true
}

// consume drops the first n bytes of bufs.
func consume(bufs net.Buffers, n int) net.Buffers {
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			return bufs
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	return bufs
}

// Close closes the connection and every unclaimed descriptor. What is
// behind (go-capnp's abort, say) goes out first if the peer takes it
// within closeGrace.
func (c *Conn) Close() error {
	c.drainBehind()
	err := c.uc.Close()
	c.rmu.Lock()
	for k, fd := range c.inbox {
		_ = syscall.Close(fd)
		delete(c.inbox, k)
	}
	c.rmu.Unlock()
	c.wmu.Lock()
	for _, o := range c.pending {
		o.close()
	}
	c.pending = nil
	c.wmu.Unlock()
	return err
}

// RPC starts a Cap'n Proto connection over c. bootstrap (may be the zero
// Client) is stolen: the rpc.Conn releases it when it ends. The caller must
// Close the returned rpc.Conn, which also closes c. What the peer can make
// this side hold is bounded by the default Limits.
func (c *Conn) RPC(bootstrap capnp.Client, logger rpc.Logger) *rpc.Conn {
	return c.RPCWith(bootstrap, logger, Limits{})
}

// RPCWith is RPC with the peer bounded by lim. The bootstrap, and every
// server an answer of this side's hands over, is served so that calls the
// peer pipelines on an answer still to come cannot panic go-capnp (see
// serveSafely).
func (c *Conn) RPCWith(bootstrap capnp.Client, logger rpc.Logger, lim Limits) *rpc.Conn {
	g := newGuard(transport.NewStream(c), lim, c.stopReading)
	t := throttle{c: c, limit: g.lim.BacklogBytes}
	return rpc.NewConn(g, &rpc.Options{BootstrapClient: serveSafely(bootstrap, t), Logger: logger})
}

// stopReading makes the read under way, and every later one, fail at once
// (a deadline in the past); writes go on, so go-capnp can still send its
// abort before it closes c. It blocks on nothing: safe on the send path.
func (c *Conn) stopReading() { _ = c.uc.SetReadDeadline(time.Now()) }

// Dial connects to the unix socket at path.
func Dial(ctx context.Context, path string, acceptFDs bool) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		_ = nc.Close()
		return nil, ErrNotUnixConn
	}
	return NewConn(uc, acceptFDs), nil
}

// FromFile wraps an inherited socket descriptor (such as fd 3 in a vat). It
// takes ownership of f.
func FromFile(f *os.File, acceptFDs bool) (*Conn, error) {
	nc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("using %s as a connection: %w", f.Name(), err)
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		_ = nc.Close()
		return nil, ErrNotUnixConn
	}
	return NewConn(uc, acceptFDs), nil
}

func dupCloexec(fd int) (int, error) {
	nfd, err := fcntlDupCloexec(fd)
	if err != nil {
		return -1, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", err)
	}
	return nfd, nil
}
