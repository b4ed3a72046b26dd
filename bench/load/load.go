// Package load generates the benchmarks' traffic.
//
// It holds the bulk protocol (a length, that many bytes, the sink's count), a
// one-byte echo, and the baseline HTTP CONNECT proxy with its client. It is
// shared by the runner and by the vat that measures from inside a wall, so
// both ends speak the same bytes; it needs no cgo, so that vat links
// statically.
package load

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ChunkSize is the size of one write of the bulk sender and one read of
// the sink: the same on every path, so the paths differ only in what lies
// between the two ends.
const ChunkSize = 256 << 10

// The bulk protocol: the sender writes an 8-byte big-endian length n, then
// n bytes; the sink reads exactly n bytes and answers with the 8-byte count
// it read. No half close is needed, so it runs over any relay.

// Upload sends n bytes on c with the bulk protocol and waits for the sink's
// answer. It does not close c.
func Upload(c io.ReadWriter, n int64) error {
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(n))
	if _, err := c.Write(hdr[:]); err != nil {
		return fmt.Errorf("writing length: %w", err)
	}
	buf := make([]byte, ChunkSize)
	for left := n; left > 0; {
		k := min(left, int64(len(buf)))
		w, err := c.Write(buf[:k])
		left -= int64(w)
		if err != nil {
			return fmt.Errorf("writing bulk bytes (%d left): %w", left, err)
		}
	}
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return fmt.Errorf("reading the sink's count: %w", err)
	}
	if got := int64(binary.BigEndian.Uint64(hdr[:])); got != n {
		return fmt.Errorf("sink counted %d bytes; sent %d", got, n)
	}
	return nil
}

// Sink serves the bulk protocol on one connection: it reads the length,
// that many bytes, and answers with the count. It repeats until EOF.
func Sink(c net.Conn) error {
	defer c.Close()
	buf := make([]byte, ChunkSize)
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n := int64(binary.BigEndian.Uint64(hdr[:]))
		var got int64
		for got < n {
			k, err := c.Read(buf[:min(int64(len(buf)), n-got)])
			got += int64(k)
			if err != nil {
				return fmt.Errorf("sink read %d of %d bytes: %w", got, n, err)
			}
		}
		binary.BigEndian.PutUint64(hdr[:], uint64(got))
		if _, err := c.Write(hdr[:]); err != nil {
			return err
		}
	}
}

// Echo writes back every byte it reads on c until EOF.
func Echo(c net.Conn) error {
	defer c.Close()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// EchoOnce writes one byte on c and waits for it to come back.
func EchoOnce(c io.ReadWriter) error {
	b := []byte{'x'}
	if _, err := c.Write(b); err != nil {
		return fmt.Errorf("writing the echo byte: %w", err)
	}
	if _, err := io.ReadFull(c, b); err != nil {
		return fmt.Errorf("reading the echoed byte: %w", err)
	}
	if b[0] != 'x' {
		return fmt.Errorf("echo answered %q; want %q", b[0], 'x')
	}
	return nil
}

// ServeTCP accepts on l and runs fn on each connection until l closes.
func ServeTCP(l net.Listener, fn func(net.Conn) error) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { _ = fn(c) }()
	}
}

// ConnectProxy is the baseline: a plain Go HTTP CONNECT proxy, net/http
// hijack and io.Copy (which splices between TCP sockets), dialling whatever
// it is asked to. It checks nothing, which is what makes it a floor.
type ConnectProxy struct{}

func (ConnectProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	dst, err := net.DialTimeout("tcp", r.Host, 5*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = dst.Close()
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		_ = dst.Close()
		return
	}
	defer c.Close()
	defer dst.Close()
	if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := dst.Write(b); err != nil {
			return
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(dst, c)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, dst)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	wg.Wait()
}

// proxiedConn reads through the buffer that read the proxy's answer.
type proxiedConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *proxiedConn) Read(b []byte) (int, error) {
	if p.r.Buffered() > 0 {
		return p.r.Read(b)
	}
	return p.Conn.Read(b)
}

// CloseWrite half-closes the underlying TCP connection.
func (p *proxiedConn) CloseWrite() error {
	if tc, ok := p.Conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nil
}

// DialConnect dials the HTTP CONNECT proxy at proxy and asks it for target
// (host:port). Anything but a 2xx answer is an error quoting the answer.
// ctx's deadline, if any, becomes the connection's. The caller must close
// the returned connection.
func DialConnect(ctx context.Context, proxy, target string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", proxy)
	if err != nil {
		return nil, fmt.Errorf("dialling proxy %s: %w", proxy, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("writing CONNECT: %w", err)
	}
	br := bufio.NewReaderSize(c, 4096)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("reading the proxy's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_ = c.Close()
		return nil, fmt.Errorf("proxy answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return &proxiedConn{Conn: c, r: br}, nil
}
