package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// bridgeTransport is the edge's RoundTripper to a stdio vat's bridge: one
// request at a time on each connection, written and read by the caller's
// own goroutine. http.Transport gives every connection a reader and a
// writer goroutine and hands each request and answer between them; on
// the edge's busiest path (every MCP call of a stdio vat) those hand-offs
// cost more than the proxying itself. The bridge is toybox-entry's own
// server, so nothing else of HTTP/1.1 is needed: no proxy, no TLS, no
// pipelining, no 100-continue.
type bridgeTransport struct {
	in *instance

	mu     sync.Mutex
	idle   []*bridgeConn
	closed bool
}

// maxIdleBridgeConns bounds the connections kept open to one bridge, as
// MaxIdleConnsPerHost does for an app's socket.
const maxIdleBridgeConns = 16

// max1xx bounds the informational answers read before the final one.
const max1xx = 8

// bridgeConn is one connection to the bridge.
type bridgeConn struct {
	c  net.Conn
	lr *limitedReader
	br *bufio.Reader
	bw *bufio.Writer
}

// limitedReader lets the answer's headers read at most n bytes (n < 0:
// no limit, for the body).
type limitedReader struct {
	r io.Reader
	n int
}

var errHeadersTooLong = fmt.Errorf("response headers exceeded %d bytes", maxVatHeaderBytes)

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, errHeadersTooLong
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= n
	return n, err
}

// bridgeBufSize is each connection's read and write buffer.
const bridgeBufSize = 4 << 10

func newBridgeConn(c net.Conn) *bridgeConn {
	lr := &limitedReader{r: c, n: -1}
	return &bridgeConn{c: c, lr: lr, br: bufio.NewReaderSize(lr, bridgeBufSize), bw: bufio.NewWriterSize(c, bridgeBufSize)}
}

// alive reports whether the bridge has not closed an idle connection
// (its wall restarted, say): a peek that would block finds it open. A
// request written to a closed one would be lost with its body, which
// cannot be sent again.
func (bc *bridgeConn) alive() bool {
	sc, ok := bc.c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		// Nothing to read is an open, idle connection; EOF, an error or
		// bytes nobody asked for are not.
		open = errors.Is(err, unix.EAGAIN)
		return true
	})
	return open
}

// get returns an idle connection, or dials a new one; reused says which.
// With peek, an idle one is first checked to be open (alive). A request
// whose body is in memory skips that system call: written to a
// connection the bridge closed, it fails whole (EPIPE on a unix socket)
// and is written again on a new one.
func (t *bridgeTransport) get(ctx context.Context, peek bool) (bc *bridgeConn, reused bool, err error) {
	t.mu.Lock()
	for len(t.idle) > 0 {
		bc := t.idle[len(t.idle)-1]
		t.idle = t.idle[:len(t.idle)-1]
		t.mu.Unlock()
		if !peek || bc.alive() {
			return bc, true, nil
		}
		_ = bc.c.Close()
		t.mu.Lock()
	}
	t.mu.Unlock()
	bc, err = t.dial(ctx)
	return bc, false, err
}

func (t *bridgeTransport) dial(ctx context.Context) (*bridgeConn, error) {
	c, err := dialApp(ctx, t.in.sock)
	t.in.answered(err)
	if err != nil {
		return nil, err
	}
	return newBridgeConn(c), nil
}

// put keeps bc for the next request, or closes it.
func (t *bridgeTransport) put(bc *bridgeConn) {
	t.mu.Lock()
	if !t.closed && len(t.idle) < maxIdleBridgeConns {
		t.idle = append(t.idle, bc)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	_ = bc.c.Close()
}

// closeIdle closes the idle connections and every one returned later
// (the instance ended).
func (t *bridgeTransport) closeIdle() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.closed = nil, true
	t.mu.Unlock()
	for _, bc := range idle {
		_ = bc.c.Close()
	}
}

// RoundTrip writes req on a connection of its own and reads the answer's
// headers; the body is read as the caller reads it, and the connection
// goes back to the pool once it is read to its end. The request's context
// ending closes the connection, so a stream ends with its client.
func (t *bridgeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	body, err := inMemory(req)
	if err != nil {
		return nil, err
	}
	bc, reused, err := t.get(ctx, body == nil)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	resp, written, err := t.exchange(ctx, bc, req, body)
	if err != nil && !written && reused && body != nil && ctx.Err() == nil {
		// An idle connection the bridge had closed: nothing of the
		// request reached it.
		if bc, err = t.dial(ctx); err != nil {
			return nil, err
		}
		resp, _, err = t.exchange(ctx, bc, req, body)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if t.in.unanswered.Load() {
		// An answer on a connection kept open says it answers, as one on
		// a new connection does (answering).
		t.in.answered(nil)
	}
	return resp, nil
}

// exchange writes req on bc (with body instead of req.Body when body is
// not nil) and reads the answer's headers. written says whether the
// request was written whole; on an error bc is closed.
func (t *bridgeTransport) exchange(ctx context.Context, bc *bridgeConn, req *http.Request, body []byte) (*http.Response, bool, error) {
	stop := context.AfterFunc(ctx, func() { _ = bc.c.Close() })
	out := req
	var streamed *bodyError
	switch {
	case body != nil:
		out = new(http.Request)
		*out = *req
		out.Body = io.NopCloser(bytes.NewReader(body))
	case req.Body != nil && req.Body != http.NoBody:
		streamed = &bodyError{ReadCloser: req.Body}
		out = new(http.Request)
		*out = *req
		out.Body = streamed
	}
	resp, written, err := bc.roundTrip(out)
	if err != nil {
		stop()
		_ = bc.c.Close()
		if streamed != nil && streamed.err != nil {
			// Request.Write hides it in a type of its own, without
			// Unwrap: the proxy must see a body over its limit (413).
			err = fmt.Errorf("reading the request body: %w", streamed.err)
		}
		return nil, written, err
	}
	resp.Body = &bridgeBody{body: resp.Body, t: t, bc: bc, stop: stop, keep: !resp.Close && !req.Close}
	return resp, true, nil
}

func (bc *bridgeConn) roundTrip(req *http.Request) (*http.Response, bool, error) {
	if err := req.Write(bc.bw); err != nil {
		return nil, false, err
	}
	if err := bc.bw.Flush(); err != nil {
		return nil, false, err
	}
	if err := bc.c.SetReadDeadline(time.Now().Add(vatHeaderTimeout)); err != nil {
		return nil, true, err
	}
	bc.lr.n = maxVatHeaderBytes
	defer func() { bc.lr.n = -1 }()
	for range max1xx {
		resp, err := http.ReadResponse(bc.br, req)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, true, fmt.Errorf("timeout awaiting response headers: %w", err)
		}
		if err != nil {
			return nil, true, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			_ = resp.Body.Close()
			return nil, true, errors.New("the bridge switched protocols: MCP has no upgrade")
		case resp.StatusCode < 200:
			// Informational: MCP has none; dropped.
			continue
		}
		if err := bc.c.SetReadDeadline(time.Time{}); err != nil {
			return nil, true, err
		}
		return resp, true, nil
	}
	return nil, true, fmt.Errorf("more than %d informational answers", max1xx)
}

// bridgeBody is an answer's body: read to its end, its connection goes
// back to the pool; closed before, the connection is closed.
type bridgeBody struct {
	body io.ReadCloser
	t    *bridgeTransport
	bc   *bridgeConn
	stop func() bool
	keep bool

	mu   sync.Mutex
	done bool
}

func (b *bridgeBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if errors.Is(err, io.EOF) {
		b.finish(true)
	}
	return n, err
}

func (b *bridgeBody) Close() error {
	b.finish(false)
	return nil
}

// finish gives the connection back (whole: the body was read to its end
// and nothing closed it meanwhile) or closes it, once. One with bytes
// read past the answer is closed: nobody asked for them, and kept they
// would be read as the answer to the next request, another principal's
// maybe.
func (b *bridgeBody) finish(whole bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	if whole && b.stop() && b.keep && b.bc.br.Buffered() == 0 {
		_ = b.body.Close() // at its end: reads nothing more
		b.t.put(b.bc)
		return
	}
	// The connection goes first: closing a body not read to its end
	// reads the rest of it, and a stream has no end.
	b.stop()
	_ = b.bc.c.Close()
	_ = b.body.Close()
}

// bodyError is a request body that keeps the error a Read returned, other
// than io.EOF.
type bodyError struct {
	io.ReadCloser
	err error
}

func (b *bodyError) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.err = err
	}
	return n, err
}

// inMemory reads req's body when it is at most bridgeBufSize bytes
// (closing it), or returns nil. Such a body goes out with its headers in
// one write (Request.Write flushes the headers alone before a body it
// does not know to be in memory: one more write, which may wake the
// bridge twice), and can be written again.
func inMemory(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 || req.ContentLength > bridgeBufSize {
		return nil, nil
	}
	body := make([]byte, req.ContentLength)
	_, err := io.ReadFull(req.Body, body)
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	return body, nil
}

// closeBody closes req's body, as a RoundTripper must even on an error.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
