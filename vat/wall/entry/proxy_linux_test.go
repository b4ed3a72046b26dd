package entry

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"golang.org/x/sys/unix"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/tests/testenv"
	"toybox/vat/grant"
)

// answerOf runs answer/refuse on one end of a real TCP pair and parses
// what the client reads.
func answerOf(t *testing.T, write func(c net.Conn)) (*http.Response, string) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			write(c)
		}
	}()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestRefuseAnswers: a refusal is a 403 whose body starts "egress
// refused:", with Proxy-Status; any other failure a 502. A plain-HTTP
// request the switchboard refuses only when it dials (the listener-owner
// check of a loopback address) arrives as a failed request (requestFailed)
// and is answered as the same refusal to a CONNECT is.
func TestRefuseAnswers(t *testing.T) {
	refused := func(err error) func(net.Conn) { return func(c net.Conn) { refuse(c, err) } }
	failed := func(msg string) func(net.Conn) { return func(c net.Conn) { requestFailed(c, msg) } }
	tests := []struct {
		name       string
		send       func(net.Conn)
		wantStatus int
		wantBody   string
		wantType   string
	}{
		{"switchboard words", refused(errors.New(`rpc: call failed: egress refused: egress to example.org not granted`)), 403, "egress refused: egress to example.org not granted", "destination_ip_prohibited"},
		{"no grant", refused(ErrNoGrant), 403, "egress refused: this vat has no egress grant", "destination_ip_prohibited"},
		{"refused decision", refused(errors.Join(labels.ErrRefused, errors.New("10.0.0.1 is private"))), 403, "egress refused:", "destination_ip_prohibited"},
		{"transport failure", refused(errors.New("connecting to db: connection refused")), 502, "egress failed: connecting to db", "proxy_internal_error"},
		{"quotes and newlines", refused(errors.New("egress refused: a \"quoted\"\nname")), 403, `egress refused: a "quoted" name`, "destination_ip_prohibited"},
		{"request refused at the dial", failed(`request to 127.0.0.1:8000 failed: egress refused: 127.0.0.1:8000 is held by toybox's own process`), 403, "egress refused: 127.0.0.1:8000 is held by toybox's own process", "destination_ip_prohibited"},
		{"request failed", failed("request to 127.0.0.1:8000 failed: dial tcp 127.0.0.1:8000: connect: connection refused"), 502, "request to 127.0.0.1:8000 failed: dial tcp", "http_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := answerOf(t, tt.send)
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status = %d; want %d", resp.StatusCode, tt.wantStatus)
			}
			if !strings.HasPrefix(body, tt.wantBody) {
				t.Errorf("body = %q; want prefix %q", body, tt.wantBody)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("Content-Type = %q; want text/plain", ct)
			}
			ps := resp.Header.Get("Proxy-Status")
			if !strings.HasPrefix(ps, "toybox-entry; error="+tt.wantType+"; details=\"") {
				t.Errorf("Proxy-Status = %q; want error=%s with details", ps, tt.wantType)
			}
			if !resp.Close {
				t.Error("the answer does not close the connection")
			}
		})
	}
}

func tlsRecord(typ byte, body []byte) []byte {
	return append([]byte{typ, 3, 1, byte(len(body) >> 8), byte(len(body))}, body...)
}

// helloMsg is a handshake message of type client_hello with n body bytes.
func helloMsg(n int) []byte {
	return append([]byte{1, byte(n >> 16), byte(n >> 8), byte(n)}, bytes.Repeat([]byte{7}, n)...)
}

func TestReadTLSHello(t *testing.T) {
	msg := helloMsg(296)
	one := tlsRecord(0x16, msg)
	split := append(tlsRecord(0x16, msg[:2]), tlsRecord(0x16, msg[2:100])...)
	split = append(split, tlsRecord(0x16, msg[100:])...)
	big := helloMsg(40 << 10) // spans three full records
	var bigRecs []byte
	for rest := big; len(rest) > 0; {
		k := min(len(rest), 16384)
		bigRecs = append(bigRecs, tlsRecord(0x16, rest[:k])...)
		rest = rest[k:]
	}
	var tiny []byte // a record per byte: more record bytes than any hello needs
	for _, b := range helloMsg(20 << 10) {
		tiny = append(tiny, tlsRecord(0x16, []byte{b})...)
	}
	tests := []struct {
		name    string
		in      []byte
		want    []byte
		wantErr string
	}{
		{"one handshake record", append(append([]byte{}, one...), tlsRecord(0x17, []byte("early data"))...), one, ""},
		{"a hello split over three records", append(append([]byte{}, split...), "early data"...), split, ""},
		{"a 40 KiB hello", bigRecs, bigRecs, ""},
		{"plain HTTP on a TLS port", []byte("GET / HTTP/1.1\r\n\r\n"), nil, "does not start with a TLS handshake"},
		{"an empty record", tlsRecord(0x16, nil), nil, "TLS record of 0 bytes"},
		{"too long", []byte{0x16, 3, 1, 0xff, 0xff}, nil, "TLS record of 65535 bytes"},
		{"cut short", one[:100], nil, "reading the TLS ClientHello"},
		{"cut short between records", split[:len(split)-len(msg)+100], nil, "reading the TLS ClientHello"},
		{"another record type inside", append(tlsRecord(0x16, msg[:50]), tlsRecord(0x17, msg[50:])...), nil, "a TLS record of type 23 inside the ClientHello"},
		{"too many record bytes", tiny, nil, "in more than 81920 bytes of records"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readTLSHello(bufio.NewReader(bytes.NewReader(tt.in)))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("readTLSHello = %v; want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Errorf("readTLSHello = %d bytes, %v; want the %d bytes of records", len(got), err, len(tt.want))
			}
		})
	}
}

func FuzzReadTLSHello(f *testing.F) {
	f.Add(tlsRecord(0x16, helloMsg(5)))
	f.Add(append(tlsRecord(0x16, helloMsg(5)[:3]), tlsRecord(0x16, helloMsg(5)[3:])...))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := readTLSHello(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			return
		}
		// Whole handshake records, the last one completing the message.
		if len(got) > maxTLSHello {
			t.Fatalf("accepted %d bytes of records", len(got))
		}
		var msg []byte
		for rest := got; len(rest) > 0; {
			if len(rest) < 5 || rest[0] != 0x16 {
				t.Fatalf("accepted a malformed record % x", rest[:min(len(rest), 5)])
			}
			n := int(rest[3])<<8 | int(rest[4])
			if n == 0 || n > maxTLSRecord || len(rest) < 5+n {
				t.Fatalf("accepted a record of %d bytes with %d left", n, len(rest)-5)
			}
			msg = append(msg, rest[5:5+n]...)
			rest = rest[5+n:]
			complete := len(msg) >= 4 && len(msg) >= 4+(int(msg[1])<<16|int(msg[2])<<8|int(msg[3]))
			if complete != (len(rest) == 0) {
				t.Fatalf("records go on past the message, or stop before it is whole")
			}
		}
	})
}

func TestMain(m *testing.M) {
	os.Exit(testenv.RunCheckingLeaks(m))
}

// startSwitchboard runs a real switchboard serving a local root handle on
// a unix socket in dir (--loopback unchecked, so the proxy reaches the
// test's own loopback servers) and returns the socket's path.
func startSwitchboard(t testing.TB, dir string) string {
	t.Helper()
	sock := filepath.Join(dir, "switchboard.sock")
	cmd := exec.Command(testenv.Binary(t, "toybox/cmd/switchboard"), "--listen", "local="+sock, "--loopback", "unchecked")
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(unix.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("switchboard:\n%s", stderr.String())
		}
	})
	testenv.WaitFor(t, 10*time.Second, func() error {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return fmt.Errorf("the switchboard did not listen on %s:\n%s", sock, stderr.String())
		}
		_ = c.Close()
		return nil
	})
	return sock
}

// serveVat serves a Vat (serve: its ServeEntry, the entry's own
// connection) on one end of a socketpair and returns the other.
func serveVat(t testing.TB, ctx context.Context, serve func(context.Context, *wire.Conn) error) *os.File {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine := os.NewFile(uintptr(fds[0]), "vat-server")
	nc, err := net.FileConn(mine)
	_ = mine.Close()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = serve(ctx, wire.NewConn(nc.(*net.UnixConn), false)) }()
	return os.NewFile(uintptr(fds[1]), "vat-client")
}

// echoServer echoes every connection; serve runs h on every connection
// to a loopback port and returns the port.
func echoServer(t testing.TB) int {
	t.Helper()
	return testenv.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// tlsServer serves HTTPS on 127.0.0.1:443 (a self-signed certificate).
func tlsServer(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:443")
	if err != nil {
		testenv.Unavailable(t, "cannot listen on 127.0.0.1:443: "+err.Error())
	}
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { fmt.Fprint(rw, "secret over tls") }),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
	}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
}

// inProcessProxy runs the entry's proxy in this process (no wall) over a
// real grant.Vat and switchboard, and returns its address.
func inProcessProxy(t testing.TB, grants []labels.Set, opts ...func(*Proxy)) string {
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
	p := NewProxy("inproc", res.Handle().AddRef(), conn, nil)
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
		opts []func(*Proxy)
		size int
	}{
		{"socket handed over", nil, 1 << 20},
		{"ByteStream pair", []func(*Proxy){(*Proxy).UseStreams}, 1 << 20},
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

// TestStalledStreamHoldsUpNoOther: on the ByteStream path, a client that
// stops reading its download, or a remote that stops reading an upload,
// holds only that stream's own flow window; the vat's other streams go on.
// (The windows of every stream of one connection used to be one, so one
// unread download stopped every other download of the vat.)
func TestStalledStreamHoldsUpNoOther(t *testing.T) {
	flood := testenv.ServeTCP(t, func(c net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	hold := testenv.ServeTCP(t, func(c net.Conn) {
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
	}, (*Proxy).UseStreams)
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
	port := testenv.ServeTCP(t, func(c net.Conn) {})
	addr := inProcessProxy(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(port)}}, (*Proxy).UseStreams)
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
		func(p *Proxy) { p.SetHeaderTimeout(300 * time.Millisecond) })
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
	port := testenv.ServeTCP(t, func(c net.Conn) {
		_, _ = io.WriteString(c, banner)
		_, _ = io.Copy(io.Discard, c)
	})
	addr := inProcessProxy(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(port)}}, (*Proxy).UseStreams)
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

// TestDecisionLog: each kind has its own budget per window; what is past
// it is counted and given back, once, with the next record of either
// kind; a new window starts the budgets again.
func TestDecisionLog(t *testing.T) {
	var d decisionLog
	t0 := time.Unix(1000, 0)
	for i := range allowedPerWindow {
		if _, _, ok := d.allow(true, t0); !ok {
			t.Fatalf("allowed decision %d not logged; want the first %d logged", i+1, allowedPerWindow)
		}
	}
	for range 7 {
		if _, _, ok := d.allow(true, t0.Add(time.Second)); ok {
			t.Fatalf("an allowed decision past %d in a window was logged", allowedPerWindow)
		}
	}
	// A storm of allowed connects leaves the refusals their own records.
	u, ua, ok := d.allow(false, t0.Add(2*time.Second))
	if !ok || u != 0 || ua != 7 {
		t.Fatalf("refusal after the storm = (%d, %d, %v); want logged, with 7 allowed unlogged", u, ua, ok)
	}
	for range refusalsPerWindow - 1 {
		d.allow(false, t0.Add(2*time.Second))
	}
	d.allow(false, t0.Add(3*time.Second))
	d.allow(true, t0.Add(3*time.Second))
	u, ua, ok = d.allow(true, t0.Add(decisionWindow))
	if !ok || u != 1 || ua != 1 {
		t.Errorf("first decision of a new window = (%d, %d, %v); want logged, with (1, 1) unlogged", u, ua, ok)
	}
	if u, ua, ok := d.allow(false, t0.Add(decisionWindow)); !ok || u != 0 || ua != 0 {
		t.Errorf("the next = (%d, %d, %v); want logged, with (0, 0): the counts are given back once", u, ua, ok)
	}
}
