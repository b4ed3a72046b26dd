package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/flowcontrol"
	"capnproto.org/go/capnp/v3/rpc"

	"toybox/schema"
	"toybox/schema/wire"
)

// Stream settings of the ByteStream fallback client: toybox-entry's, the
// writer of this direction in toybox (64 KiB messages, a 1 MiB window per
// stream).
const (
	streamChunk  = 64 << 10
	streamWindow = 1 << 20
)

// SwitchboardClient is one connection to a switchboard socket and its root
// Handle, as a supervisor holds it.
type SwitchboardClient struct {
	wc   *wire.Conn
	rc   *rpc.Conn
	Root schema.Handle // owned by the client; released by Close
}

// DialSwitchboard connects to the switchboard socket at path, accepting
// descriptors. The caller must Close it.
func DialSwitchboard(ctx context.Context, path string) (*SwitchboardClient, error) {
	wc, err := wire.Dial(ctx, path, true)
	if err != nil {
		return nil, fmt.Errorf("dialling the switchboard at %s: %w", path, err)
	}
	rc := wc.RPC(capnp.Client{}, nil)
	root := schema.Handle(rc.Bootstrap(ctx))
	if err := root.Resolve(ctx); err != nil {
		root.Release()
		_ = rc.Close()
		return nil, fmt.Errorf("bootstrapping the switchboard at %s: %w", path, err)
	}
	return &SwitchboardClient{wc: wc, rc: rc, Root: root}, nil
}

// Close releases the root handle and ends the connection.
func (s *SwitchboardClient) Close() error {
	s.Root.Release()
	return s.rc.Close()
}

// Constrain narrows h to tcp host:port. The caller must release the
// returned handle.
func Constrain(ctx context.Context, h schema.Handle, host string, port uint16) (schema.Handle, error) {
	fut, release := h.Constrain(ctx, func(p schema.Handle_constrain_Params) error {
		l, err := p.NewLabels()
		if err != nil {
			return err
		}
		if err := l.SetScheme("tcp"); err != nil {
			return err
		}
		if err := l.SetHost(host); err != nil {
			return err
		}
		l.SetPort(port)
		return nil
	})
	defer release()
	res, err := fut.Struct()
	if err != nil {
		return schema.Handle{}, fmt.Errorf("constrain: %w", err)
	}
	return res.Handle().AddRef(), nil
}

func setTarget(p schema.Handle_connect_Params, host string, port uint16) error {
	t, err := p.NewTarget()
	if err != nil {
		return err
	}
	if err := t.SetScheme("tcp"); err != nil {
		return err
	}
	if err := t.SetHost(host); err != nil {
		return err
	}
	t.SetPort(port)
	return nil
}

// ConnectFDPipelined constrains h to tcp host:port and, without waiting
// for the narrower handle, calls connect on it (promise pipelining: one
// round trip instead of two). The socket is taken with wire's TakeConn,
// as a client that only reads and writes it would. The caller must close
// the returned socket.
func (s *SwitchboardClient) ConnectFDPipelined(ctx context.Context, h schema.Handle, host string, port uint16) (net.Conn, error) {
	cfut, crel := h.Constrain(ctx, func(p schema.Handle_constrain_Params) error {
		l, err := p.NewLabels()
		if err != nil {
			return err
		}
		if err := l.SetScheme("tcp"); err != nil {
			return err
		}
		if err := l.SetHost(host); err != nil {
			return err
		}
		l.SetPort(port)
		return nil
	})
	defer crel()
	fut, release := cfut.Handle().Connect(ctx, func(p schema.Handle_connect_Params) error {
		p.SetWantFd(true)
		return setTarget(p, host, port)
	})
	return s.takeFD(fut, release, true)
}

// ConnectFD asks h for a tcp connection to host:port with the socket
// handed over, and returns it. The caller must close it.
func (s *SwitchboardClient) ConnectFD(ctx context.Context, h schema.Handle, host string, port uint16) (net.Conn, error) {
	fut, release := h.Connect(ctx, func(p schema.Handle_connect_Params) error {
		p.SetWantFd(true)
		return setTarget(p, host, port)
	})
	return s.takeFD(fut, release, false)
}

// takeFD waits for a connect answer and takes the socket it names: with
// lean, as a wire.SockConn (three system calls); else as the *net.TCPConn
// of net.FileConn (about thirteen, and io.Copy can splice).
func (s *SwitchboardClient) takeFD(fut schema.Handle_connect_Results_Future, release capnp.ReleaseFunc, lean bool) (net.Conn, error) {
	defer release()
	res, err := fut.Struct()
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	seq := res.Fd()
	if seq == 0 {
		if up := res.Upstream(); up.IsValid() {
			return nil, errors.New("connect: the switchboard answered with a ByteStream, not the socket")
		}
		return nil, errors.New("connect: no descriptor in the answer")
	}
	if lean {
		c, err := s.wc.TakeConn(seq)
		if err != nil {
			return nil, fmt.Errorf("connect: taking descriptor %d: %w", seq, err)
		}
		return c, nil
	}
	f, err := s.wc.TakeFD(seq)
	if err != nil {
		return nil, fmt.Errorf("connect: taking descriptor %d: %w", seq, err)
	}
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("connect: using descriptor %d: %w", seq, err)
	}
	return c, nil
}

// downstream receives the remote's bytes of a ByteStream connection.
type downstream struct {
	w *io.PipeWriter
}

func (d *downstream) Write(_ context.Context, call schema.ByteStream_write) error {
	b, err := call.Args().Data()
	if err != nil {
		return err
	}
	_, err = d.w.Write(b)
	return err
}

func (d *downstream) End(context.Context, schema.ByteStream_end) error {
	return d.w.Close()
}

func (d *downstream) Shutdown() { _ = d.w.CloseWithError(errors.New("downstream released")) }

// StreamConn is a ByteStream connection as an io.ReadWriteCloser.
type StreamConn struct {
	up   schema.ByteStream
	r    *io.PipeReader
	once sync.Once
}

// Write sends b upstream in messages of at most 64 KiB, flow controlled.
func (c *StreamConn) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(len(b), streamChunk)
		chunk := b[:k]
		if err := c.up.Write(context.Background(), func(p schema.ByteStream_write_Params) error {
			return p.SetData(chunk)
		}); err != nil {
			return n, err
		}
		n += k
		b = b[k:]
	}
	return n, nil
}

// Read reads what the remote sent.
func (c *StreamConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// Close ends the upstream and releases both streams.
func (c *StreamConn) Close() error {
	var err error
	c.once.Do(func() {
		err = c.up.WaitStreaming()
		fut, release := c.up.End(context.Background(), nil)
		_, _ = fut.Struct()
		release()
		c.up.Release()
		_ = c.r.Close()
	})
	return err
}

// ConnectStream asks h for a tcp connection to host:port without the
// socket (the ByteStream fallback). The caller must Close it.
func ConnectStream(ctx context.Context, h schema.Handle, host string, port uint16) (*StreamConn, error) {
	pr, pw := io.Pipe()
	down := schema.ByteStream_ServerToClient(&downstream{w: pw})
	fut, release := h.Connect(ctx, func(p schema.Handle_connect_Params) error {
		p.SetWantFd(false)
		if err := setTarget(p, host, port); err != nil {
			return err
		}
		return p.SetDownstream(down) // steals down
	})
	defer release()
	res, err := fut.Struct()
	if err != nil {
		_ = pr.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	if res.Fd() != 0 {
		_ = pr.Close()
		return nil, errors.New("connect: a descriptor came back though none was asked for")
	}
	up := res.Upstream().AddRef()
	if !up.IsValid() {
		_ = pr.Close()
		return nil, errors.New("connect: no upstream in the answer")
	}
	up.SetFlowLimiter(flowcontrol.NewFixedLimiter(streamWindow))
	return &StreamConn{up: up, r: pr}, nil
}
