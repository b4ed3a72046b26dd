//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/vat/grant"
	"toybox/vat/wall/entry"
)

// inProcessProxy runs the entry's proxy in this process (no wall) over a
// real grant.Vat and switchboard, and returns its address.
func inProcessProxy(t testing.TB, grants []labels.Set, opts ...func(*entry.Proxy)) string {
	t.Helper()
	dir := t.TempDir()
	sock := startSwitchboard(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	u := grant.NewUpstream(grant.UpstreamConfig{Path: sock})
	t.Cleanup(func() { _ = u.Close() })
	v, err := grant.NewVat(grant.VatConfig{ID: "inproc", Grants: grants, Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Revoke)
	f := serveVat(t, ctx, v.ServeEntry) // this process plays the entry
	conn, err := wire.FromFile(f, true)
	if err != nil {
		t.Fatal(err)
	}
	rc := conn.RPC(capnp.Client{}, nil)
	t.Cleanup(func() { _ = rc.Close() })
	vc := schema.Vat(rc.Bootstrap(ctx))
	defer vc.Release()
	fut, rel := vc.Egress(ctx, nil)
	defer rel()
	res, err := fut.Struct()
	if err != nil {
		t.Fatal(err)
	}
	p := entry.NewProxy("inproc", res.Handle().AddRef(), conn, nil)
	t.Cleanup(p.Close)
	for _, o := range opts {
		o(p)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() { _ = p.ServeProxy(ctx, l) }()
	return l.Addr().String()
}

// connectVia dials the proxy at addr, asks CONNECT target and reads the
// answer; the connection is closed when the test ends.
func connectVia(t testing.TB, addr, target string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %.200v", target, err)
	}
	return c, br, resp
}

func TestProxyInProcess(t *testing.T) {
	tests := []struct {
		name string
		opts []func(*entry.Proxy)
		size int
	}{
		{"socket handed over", nil, 1 << 20},
		{"ByteStream pair", []func(*entry.Proxy){(*entry.Proxy).UseStreams}, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			echo := echoServer(t)
			addr := inProcessProxy(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(echo)}}, tt.opts...)
			c, br, resp := connectVia(t, addr, fmt.Sprintf("127.0.0.1:%d", echo))
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT = %s", resp.Status)
			}
			msg := bytes.Repeat([]byte("through the proxy "), tt.size/18)
			go func() {
				_, _ = c.Write(msg)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
			got, err := io.ReadAll(br)
			if err != nil {
				t.Fatalf("reading the echo: %v", err)
			}
			if !bytes.Equal(got, msg) {
				t.Errorf("echo = %d bytes; want the %d sent", len(got), len(msg))
			}
		})
	}
}

// TestProbeAgainstInProcessProxy runs the in-wall probe program (as a
// separate process, outside any wall) against the in-process proxy: the
// probe's own checks, without bubblewrap.
func TestProbeAgainstInProcessProxy(t *testing.T) {
	echo := echoServer(t)
	addr := inProcessProxy(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(echo)}})
	_, probeBin := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, probeBin)
	cmd.Env = []string{probeEnv + "=connect", fmt.Sprintf("PROBE_ARG=127.0.0.1:%d|hello", echo), "HTTP_PROXY=http://" + addr}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v; output:\n%s", err, out)
	}
	want(t, string(out), "STATUS 200", "ECHO hello")
}

// TestStalledStreamHoldsUpNoOther: on the ByteStream path, a client that
// stops reading its download, or a remote that stops reading an upload,
// holds only that stream's own flow window; the vat's other streams go on.
// (The windows of every stream of one connection used to be one, so one
// unread download stopped every other download of the vat.)
func TestStalledStreamHoldsUpNoOther(t *testing.T) {
	flood := serve(t, func(c net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	hold := serve(t, func(c net.Conn) {
		// Accepts, never reads; lets go when the client does.
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		_, _ = c.Read(make([]byte, 0))
		time.Sleep(time.Minute)
	})
	echo := echoServer(t)
	addr := inProcessProxy(t, []labels.Set{
		{Host: "127.0.0.1", Port: uint16(flood)},
		{Host: "127.0.0.1", Port: uint16(hold)},
		{Host: "127.0.0.1", Port: uint16(echo)},
	}, (*entry.Proxy).UseStreams)
	tunnel := func(t *testing.T, port int) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, br, resp := connectVia(t, addr, fmt.Sprintf("127.0.0.1:%d", port))
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT 127.0.0.1:%d = %s", port, resp.Status)
		}
		return c, br
	}
	// An echo of 8 MiB each way must go through while the others stall.
	// A stalled echo is one that stops moving: each read has 20 seconds,
	// however slow the machine makes the whole.
	echoes := func(t *testing.T) {
		t.Helper()
		c, br := tunnel(t, echo)
		_ = c.SetDeadline(time.Time{})
		msg := bytes.Repeat([]byte("x"), 8<<20)
		go func() { _, _ = c.Write(msg) }()
		buf := make([]byte, 256<<10)
		for got := 0; got < len(msg); {
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			n, err := br.Read(buf)
			got += n
			if err != nil {
				t.Fatalf("the echo stalled behind the stopped stream after %d of %d bytes: %v", got, len(msg), err)
			}
		}
	}

	t.Run("unread downloads", func(t *testing.T) {
		for range 3 {
			_, _ = tunnel(t, flood) // never read
		}
		time.Sleep(time.Second) // the socket buffers fill, then the windows
		echoes(t)
	})
	t.Run("uploads the remote does not read", func(t *testing.T) {
		for range 3 {
			c, _ := tunnel(t, hold)
			go func() {
				buf := make([]byte, 64<<10)
				_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
		time.Sleep(time.Second)
		echoes(t)
	})
}

// TestStreamPathRemoteClosesFirst: on the ByteStream path a remote that
// accepts and closes at once may end the stream before the proxy has
// answered the CONNECT; the client must still read the 200, then the end.
func TestStreamPathRemoteClosesFirst(t *testing.T) {
	port := serve(t, func(c net.Conn) {})
	addr := inProcessProxy(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(port)}}, (*entry.Proxy).UseStreams)
	target := fmt.Sprintf("127.0.0.1:%d", port)
	for i := range 30 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		_ = c.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("connect %d: %v %.200v; want 200", i+1, resp, err)
		}
	}
}

// TestPlainHTTPSlowBody: the head of a request must come within the
// header timeout, its body may take longer (the remote or the client may
// be slow).
func TestPlainHTTPSlowBody(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(rw, "got %q %v", b, err)
	})}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := l.Addr().(*net.TCPAddr).Port
	addr := inProcessProxy(t, []labels.Set{{Scheme: "http", Host: "127.0.0.1", Port: uint16(port)}},
		func(p *entry.Proxy) { p.SetHeaderTimeout(300 * time.Millisecond) })
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST http://127.0.0.1:%d/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello", port)
	time.Sleep(time.Second) // past the head's timeout
	_, _ = io.WriteString(c, "world")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != `got "helloworld" <nil>` {
		t.Errorf("a slow body: %s %q; want 200 and the whole body", resp.Status, b)
	}
}

// TestStreamPathRemoteSpeaksFirst: on the ByteStream path a remote that
// speaks first (an SSH or SMTP banner) may send before the proxy has
// answered the CONNECT; the client must still read the 200 first, then the
// banner.
func TestStreamPathRemoteSpeaksFirst(t *testing.T) {
	const banner = "SSH-2.0-banner-first\r\n"
	port := serve(t, func(c net.Conn) {
		_, _ = io.WriteString(c, banner)
		_, _ = io.Copy(io.Discard, c)
	})
	addr := inProcessProxy(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(port)}}, (*entry.Proxy).UseStreams)
	target := fmt.Sprintf("127.0.0.1:%d", port)
	for i := range 20 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			_ = c.Close()
			t.Fatalf("connect %d: the answer to CONNECT: %.200v", i+1, err)
		}
		got := make([]byte, len(banner))
		_, err = io.ReadFull(br, got)
		_ = c.Close()
		if resp.StatusCode != 200 || err != nil || string(got) != banner {
			t.Fatalf("connect %d: %s, then %q (%v); want 200, then the banner", i+1, resp.Status, got, err)
		}
	}
}

// splitHello writes the first TLS record it is given (the ClientHello) as
// two records, the way a client that fragments its hello does.
type splitHello struct {
	net.Conn
	done bool
}

func (s *splitHello) Write(b []byte) (int, error) {
	if s.done || len(b) < 5+8 || b[0] != 0x16 {
		return s.Conn.Write(b)
	}
	s.done = true
	n := int(b[3])<<8 | int(b[4])
	body := b[5 : 5+n]
	rec := func(p []byte) []byte { return append([]byte{0x16, b[1], b[2], byte(len(p) >> 8), byte(len(p))}, p...) }
	out := append(rec(body[:7]), rec(body[7:])...)
	out = append(out, b[5+n:]...)
	if _, err := s.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// A ClientHello split over records passes the proxy and the switchboard's
// check, and the TLS session goes through.
func TestTLSHelloOverTwoRecords(t *testing.T) {
	tlsServer(t)
	addr := inProcessProxy(t, []labels.Set{{Scheme: "https", Host: "127.0.0.1", Port: 443}})
	c, _, resp := connectVia(t, addr, "127.0.0.1:443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %s", resp.Status)
	}
	split := &splitHello{Conn: c}
	tc := tls.Client(split, &tls.Config{ServerName: "127.0.0.1", InsecureSkipVerify: true}) //nolint:gosec // the test server's own certificate
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS through the proxy with a hello in two records: %v", err)
	}
	if !split.done {
		t.Fatal("the hello was not split")
	}
	fmt.Fprint(tc, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	body, _ := io.ReadAll(tc)
	if !bytes.Contains(body, []byte("secret over tls")) {
		t.Errorf("answer over TLS = %q", body)
	}
}

// TestTLSGrantOnAnotherPort: a grant of TLS on a port other than 443
// ({"scheme":"https","port":N}, what a manifest's https://host:N becomes)
// is reached through the proxy: the CONNECT tries tcp, which that grant
// refuses, then the TLS path. A plain stream to that port is still refused
// (the switchboard finds no ClientHello).
func TestTLSGrantOnAnotherPort(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "tls on another port")
	}))
	t.Cleanup(ts.Close)
	port := ts.Listener.Addr().(*net.TCPAddr).Port
	addr := inProcessProxy(t, []labels.Set{{Scheme: "https", Host: "127.0.0.1", Port: uint16(port)}})
	target := fmt.Sprintf("127.0.0.1:%d", port)
	c, _, resp := connectVia(t, addr, target)
	if code := resp.StatusCode; code != 200 {
		t.Fatalf("CONNECT to a TLS grant on port %d = %d; want 200", port, code)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "127.0.0.1", InsecureSkipVerify: true}) //nolint:gosec // the test server's own certificate
	fmt.Fprint(tc, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	body, _ := io.ReadAll(tc)
	if !bytes.Contains(body, []byte("tls on another port")) {
		t.Errorf("answer over TLS = %q", body)
	}
	// Plain bytes instead of a ClientHello: the tunnel closes, nothing is sent on.
	c2, br2, resp := connectVia(t, addr, target)
	if resp.StatusCode != 200 {
		t.Fatalf("second CONNECT = %s", resp.Status)
	}
	_, _ = io.WriteString(c2, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if b, _ := io.ReadAll(br2); len(b) != 0 {
		t.Errorf("a plain stream to a TLS grant got %q", b)
	}
}
