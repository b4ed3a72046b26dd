// Package wire carries Cap'n Proto over a unix stream connection and passes
// file descriptors on the same connection.
//
// go-capnp cannot attach descriptors to messages, so Conn wraps the unix
// connection: a descriptor queued with SendFD rides (SCM_RIGHTS) on the next
// bytes written, which are never later than the message that names it, and
// the receiver numbers descriptors in arrival order. Both sides therefore agree
// on each descriptor's sequence number, and a Cap'n Proto result carries only
// that number (schema Handle.connect's fd). TakeFD claims it.
package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/rpc"
	"capnproto.org/go/capnp/v3/rpc/transport"
)

// Limits on descriptors in flight on one connection.
const (
	maxFDsPerWrite = 8
	maxUnclaimed   = 256
	oobSize        = 4 * 64 // room for 64 descriptors in one read
)

// Errors.
var (
	ErrNoFD        = errors.New("no descriptor with that sequence number")
	ErrFDsRefused  = errors.New("this connection does not accept descriptors")
	ErrTooManyFDs  = errors.New("too many unclaimed descriptors")
	ErrNotUnixConn = errors.New("not a unix connection")
)

// Conn is a unix stream connection that carries Cap'n Proto messages and
// file descriptors. It implements io.ReadWriteCloser for the rpc transport.
type Conn struct {
	uc *net.UnixConn

	wmu     sync.Mutex
	pending []*os.File // sent with the next write; owned here until then
	sent    uint64

	rmu      sync.Mutex
	acceptFD bool
	recvd    uint64
	inbox    map[uint64]*os.File
	broken   error
	oob      []byte
}

// NewConn wraps uc. If acceptFDs is false, any descriptor the peer sends is
// closed at once and the connection is broken (a vat must never be able to
// push descriptors into the supervisor). NewConn takes ownership of uc.
func NewConn(uc *net.UnixConn, acceptFDs bool) *Conn {
	return &Conn{uc: uc, acceptFD: acceptFDs, inbox: map[uint64]*os.File{}, oob: make([]byte, syscall.CmsgSpace(oobSize))}
}

// Unix returns the underlying connection (for peer credentials).
func (c *Conn) Unix() *net.UnixConn { return c.uc }

// PeerCred reports the peer's pid, uid and gid (SO_PEERCRED).
func (c *Conn) PeerCred() (pid int32, uid, gid uint32, err error) {
	raw, err := c.uc.SyscallConn()
	if err != nil {
		return 0, 0, 0, err
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, 0, err
	}
	if serr != nil {
		return 0, 0, 0, os.NewSyscallError("getsockopt SO_PEERCRED", serr)
	}
	return cred.Pid, cred.Uid, cred.Gid, nil
}

// SendFD queues a duplicate of f to be sent to the peer and returns the
// sequence number the peer will know it by. The caller keeps ownership of f.
// The descriptor leaves with the next write on the connection, so a message
// written after SendFD returns is always received after the descriptor.
func (c *Conn) SendFD(f *os.File) (uint64, error) {
	fd, err := dupCloexec(int(f.Fd()))
	if err != nil {
		return 0, fmt.Errorf("duplicating descriptor: %w", err)
	}
	d := os.NewFile(uintptr(fd), f.Name())
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.pending = append(c.pending, d)
	c.sent++
	return c.sent, nil
}

// TakeFD claims the descriptor with sequence number seq. The caller owns the
// returned file. A descriptor can be taken once.
func (c *Conn) TakeFD(seq uint64) (*os.File, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	f, ok := c.inbox[seq]
	if !ok {
		if c.broken != nil {
			return nil, c.broken
		}
		return nil, fmt.Errorf("descriptor %d: %w", seq, ErrNoFD)
	}
	delete(c.inbox, seq)
	return f, nil
}

// Read implements io.Reader, collecting any descriptors that arrive.
func (c *Conn) Read(p []byte) (int, error) {
	n, oobn, _, _, err := c.uc.ReadMsgUnix(p, c.oob)
	if oobn > 0 {
		if ferr := c.collect(c.oob[:oobn]); ferr != nil {
			_ = c.uc.Close()
			return n, ferr
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
			c.inbox[c.recvd] = os.NewFile(uintptr(fd), fmt.Sprintf("wire-fd-%d", c.recvd))
		}
	}
	if bad != nil {
		c.broken = bad
	}
	return bad
}

// Write implements io.Writer; queued descriptors ride on the first bytes.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	total := 0
	for len(c.pending) > 0 && len(p) > 0 {
		batch := c.pending
		if len(batch) > maxFDsPerWrite {
			batch = batch[:maxFDsPerWrite]
		}
		fds := make([]int, len(batch))
		for i, f := range batch {
			fds[i] = int(f.Fd())
		}
		// One byte per batch carries the rights; the rest follows plainly.
		n, _, err := c.uc.WriteMsgUnix(p[:1], syscall.UnixRights(fds...), nil)
		if err != nil {
			return total, err
		}
		for _, f := range batch {
			_ = f.Close()
		}
		c.pending = c.pending[len(batch):]
		total += n
		p = p[n:]
	}
	n, err := c.uc.Write(p)
	return total + n, err
}

// Close closes the connection and every unclaimed descriptor.
func (c *Conn) Close() error {
	err := c.uc.Close()
	c.rmu.Lock()
	for k, f := range c.inbox {
		_ = f.Close()
		delete(c.inbox, k)
	}
	c.rmu.Unlock()
	c.wmu.Lock()
	for _, f := range c.pending {
		_ = f.Close()
	}
	c.pending = nil
	c.wmu.Unlock()
	return err
}

// RPC starts a Cap'n Proto connection over c. bootstrap (may be the zero
// Client) is stolen: the rpc.Conn releases it when it ends. The caller must
// Close the returned rpc.Conn, which also closes c.
func (c *Conn) RPC(bootstrap capnp.Client, logger rpc.Logger) *rpc.Conn {
	return rpc.NewConn(transport.NewStream(c), &rpc.Options{BootstrapClient: bootstrap, Logger: logger})
}

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
