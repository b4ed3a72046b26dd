package switchboard

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/flowcontrol"

	"toybox/labels"
	"toybox/schema"
	"toybox/tests/testenv"
)

func TestConnectHandsOverTheSocket(t *testing.T) {
	f := newFixture(t, nil)
	port := echoServer(t, "")
	c := dial(t, f.local)
	conn, err := c.connectFD(context.Background(), c.root, "tcp", "127.0.0.1", port, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "ping"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo = %q, %v; want ping", buf, err)
	}
	mustContain(t, "log", f.log.String(), `"op":"connect","target":"tcp://127.0.0.1:`+itoa(port)+`","addresses":["127.0.0.1"],"vetted":"127.0.0.1:`+itoa(port)+`","allow":true`)
}

func TestConnectServerSpeaksFirst(t *testing.T) {
	f := newFixture(t, nil)
	port := echoServer(t, "220 hello\r\n")
	c := dial(t, f.local)
	if conn, err := c.connectFD(context.Background(), c.root, "tcp", "unknown.test", port, nil); err == nil {
		conn.Close()
		t.Fatal("unknown name connected")
	}
	f.dns.Set("smtp.test", mustAddr("127.0.0.1"))
	conn, err := c.connectFD(context.Background(), c.root, "tcp", "smtp.test", port, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || line != "220 hello\r\n" {
		t.Fatalf("banner = %q, %v", line, err)
	}
}

// TestPublicSocketNeverReachesLoopback tries every way to reach the echo
// server on loopback through the public socket.
func TestPublicSocketNeverReachesLoopback(t *testing.T) {
	f := newFixture(t, nil)
	port := echoServer(t, "")
	f.dns.Set("sneaky.test", mustAddr("127.0.0.1"))
	f.dns.Set("sneaky6.test", mustAddr("::ffff:127.0.0.1"))
	c := dial(t, f.public)
	for _, host := range []string{"127.0.0.1", "::ffff:127.0.0.1", "::1", "sneaky.test", "sneaky6.test", "0.0.0.0", "127.0.0.1.", "2130706433", "0x7f000001", "localhost"} {
		conn, err := c.connectFD(context.Background(), c.root, "tcp", host, port, nil)
		if err == nil {
			conn.Close()
			t.Errorf("public connect(%s) succeeded", host)
			continue
		}
		mustContain(t, "connect("+host+")", err.Error(), "egress refused: ")
	}
}

// TestReleaseShutsHandedOverConnections: releasing the handle that made a
// connection (or one it derives from) shuts the socket the caller holds.
func TestReleaseShutsHandedOverConnections(t *testing.T) {
	f := newFixture(t, nil)
	port := echoServer(t, "")
	c := dial(t, f.local)
	ctx := context.Background()
	for _, which := range []string{"self", "parent"} {
		t.Run(which, func(t *testing.T) {
			parent, err := constrain(t, c.root, labels.Set{Host: "127.0.0.1"})
			if err != nil {
				t.Fatal(err)
			}
			child, err := constrain(t, parent, labels.Set{Vat: "v1"})
			if err != nil {
				t.Fatal(err)
			}
			conn, err := c.connectFD(ctx, child, "tcp", "127.0.0.1", port, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "a"); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1)
			if _, err := io.ReadFull(conn, buf); err != nil {
				t.Fatal(err)
			}
			if which == "self" {
				child.Release()
				defer parent.Release()
			} else {
				parent.Release()
				defer child.Release()
			}
			_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
			n, err := conn.Read(buf)
			if err == nil || errors.Is(err, labels.ErrRefused) || isTimeout(err) {
				t.Fatalf("read after release = %d, %v; want EOF (shut down)", n, err)
			}
			if which == "parent" {
				_, err := check(ctx, child, "tcp", "127.0.0.1", port)
				if err == nil || !strings.Contains(err.Error(), "revoked") {
					t.Errorf("check on a child of a released handle = %v; want revoked", err)
				}
			}
		})
	}
}

// TestPeerCloseShutsConnections: when the peer's connection to the
// switchboard ends, everything its handles made is shut.
func TestPeerCloseShutsConnections(t *testing.T) {
	f := newFixture(t, nil)
	port := echoServer(t, "")
	c := dial(t, f.local)
	conn, err := c.connectFD(context.Background(), c.root, "tcp", "127.0.0.1", port, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = c.wc.Close()
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read after the peer left = %v; want EOF", err)
	}
}

// TestReceiverShutdownEndsTheConnection: the switchboard's duplicate is
// closed when the receiver shuts the socket down, so the remote sees EOF
// and the peer's connection count comes back.
func TestReceiverShutdownEndsTheConnection(t *testing.T) {
	f := newFixture(t, nil)
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan error, 1)
	go func() {
		s, err := l.Accept()
		if err != nil {
			got <- err
			return
		}
		defer s.Close()
		_ = s.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err = io.ReadAll(s) // until EOF
		got <- err
	}()
	c := dial(t, f.local)
	conn, err := c.connectFD(context.Background(), c.root, "tcp", "127.0.0.1", uint16(l.Addr().(*net.TCPAddr).Port), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	if err := <-got; err != nil {
		t.Fatalf("remote read = %v; want EOF", err)
	}
	_ = conn.Close()
	testenv.WaitFor(t, 3*time.Second, func() error {
		if n := f.srv.tracker.count(); n != 0 {
			return fmt.Errorf("%d sockets still tracked after both sides shut down", n)
		}
		return nil
	})
}

// collector is a ByteStream server that gathers what it is sent.
type collector struct {
	mu   sync.Mutex
	buf  []byte
	done chan struct{}
	once sync.Once
}

func newCollector() *collector { return &collector{done: make(chan struct{})} }

func (c *collector) Write(ctx context.Context, call schema.ByteStream_write) error {
	d, err := call.Args().Data()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.buf = append(c.buf, d...)
	c.mu.Unlock()
	return nil
}

func (c *collector) End(ctx context.Context, call schema.ByteStream_end) error {
	c.once.Do(func() { close(c.done) })
	return nil
}

func (c *collector) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.buf...)
}

func TestConnectByteStreamFallback(t *testing.T) {
	f := newFixture(t, nil)
	port := echoServer(t, "hi:")
	c := dial(t, f.local)
	ctx := context.Background()
	col := newCollector()
	r := connectStream(ctx, t, c.root, port, schema.ByteStream_ServerToClient(col))
	if r.Fd() != 0 {
		t.Errorf("fd = %d; want 0 without wantFd", r.Fd())
	}
	up := r.Upstream().AddRef()
	up.SetFlowLimiter(flowcontrol.NewFixedLimiter(1 << 20))
	payload := strings.Repeat("0123456789abcdef", 20000) // 320 KB, several chunks
	for i := 0; i < len(payload); i += chunkSize {
		chunk := []byte(payload[i:min(i+chunkSize, len(payload))])
		if err := up.Write(ctx, func(p schema.ByteStream_write_Params) error { return p.SetData(chunk) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := up.WaitStreaming(); err != nil {
		t.Fatal(err)
	}
	ef, erel := up.End(ctx, nil)
	if _, err := ef.Struct(); err != nil {
		t.Fatal(err)
	}
	erel()
	up.Release()
	select {
	case <-col.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("downstream not ended; got %d bytes", len(col.bytes()))
	}
	if got := string(col.bytes()); got != "hi:"+payload {
		t.Errorf("downstream got %d bytes; want %d (banner + echo)", len(got), len("hi:"+payload))
	}
}

// helloConn captures the first write (the ClientHello) and hands it to
// dialFn, which returns the connection to continue on: how a TLS client
// in a vat uses an https connect.
type helloConn struct {
	net.Conn // nil until the hello was sent
	dialFn   func(hello []byte) (net.Conn, error)
	err      error
}

func (h *helloConn) Write(b []byte) (int, error) {
	if h.Conn == nil {
		if h.err != nil {
			return 0, h.err
		}
		c, err := h.dialFn(append([]byte(nil), b...))
		if err != nil {
			h.err = err
			return 0, err
		}
		h.Conn = c
		return len(b), nil
	}
	return h.Conn.Write(b)
}

func (h *helloConn) Read(b []byte) (int, error) {
	if h.Conn == nil {
		return 0, errors.New("read before the hello")
	}
	return h.Conn.Read(b)
}

func (h *helloConn) Close() error {
	if h.Conn == nil {
		return nil
	}
	return h.Conn.Close()
}

func (h *helloConn) SetDeadline(t time.Time) error      { return nil }
func (h *helloConn) SetReadDeadline(t time.Time) error  { return nil }
func (h *helloConn) SetWriteDeadline(t time.Time) error { return nil }

// testTLSServer is an HTTPS server on loopback with its own CA.
func testTLSServer(t *testing.T, h http.Handler) (*httptest.Server, *x509.CertPool, []byte) {
	t.Helper()
	ts := httptest.NewTLSServer(h)
	t.Cleanup(ts.Close)
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	return ts, pool, pemBytes
}

func TestConnectHTTPS(t *testing.T) {
	ts, pool, _ := testTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "secure "+r.Host)
	}))
	port := uint16(ts.Listener.Addr().(*net.TCPAddr).Port)
	f := newFixture(t, nil)
	f.dns.Set("example.com", mustAddr("127.0.0.1")) // httptest's cert names example.com
	f.dns.Set("other.test", mustAddr("127.0.0.1"))
	c := dial(t, f.local)
	ctx := context.Background()
	get := func(host, sni string) (string, error) {
		hc := &helloConn{dialFn: func(hello []byte) (net.Conn, error) {
			return c.connectFD(ctx, c.root, "https", host, port, hello)
		}}
		tc := tls.Client(hc, &tls.Config{ServerName: sni, RootCAs: pool})
		defer tc.Close()
		if err := tc.HandshakeContext(ctx); err != nil {
			return "", err
		}
		if _, err := io.WriteString(tc, "GET / HTTP/1.0\r\nHost: "+host+"\r\n\r\n"); err != nil {
			return "", err
		}
		b, err := io.ReadAll(tc)
		return string(b), err
	}
	body, err := get("example.com", "example.com")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "body", body, "secure example.com")
	if _, err := get("other.test", "example.com"); err == nil {
		t.Error("an https connect whose SNI names another host succeeded")
	} else {
		mustContain(t, "SNI mismatch", err.Error(), `egress refused: the ClientHello names "example.com", not other.test`)
	}
	// Not a ClientHello at all.
	if _, err := c.connectFD(ctx, c.root, "https", "example.com", port, []byte("GET / HTTP/1.1\r\n\r\n")); err == nil {
		t.Error("an https connect opening with plain HTTP succeeded")
	} else {
		mustContain(t, "plain hello", err.Error(), "egress refused: the stream does not open with a valid TLS ClientHello")
	}
	// An IP literal target takes no SNI.
	if _, err := c.connectFD(ctx, c.root, "https", "127.0.0.1", port, nil); err == nil {
		t.Error("https connect without a hello succeeded")
	}
	if _, err := c.connectFD(ctx, c.root, "tcp", "127.0.0.1", port, []byte{22, 3, 1}); err == nil {
		t.Error("tcp connect with a hello succeeded")
	}
}

// TestConnectHTTPSRefusesECH: an https connect whose ClientHello names the
// granted host outside and carries an encrypted ClientHello is refused
// before any dial; the same connect with a plain hello goes through.
func TestConnectHTTPSRefusesECH(t *testing.T) {
	dialled := make(chan []byte, 4)
	port := serveTCP(t, func(c net.Conn) {
		b := make([]byte, 5)
		_, _ = io.ReadFull(c, b)
		dialled <- b
	})
	f := newFixture(t, nil)
	f.dns.Set("public.test", mustAddr("127.0.0.1"))
	c := dial(t, f.local)
	ctx := context.Background()
	_, err := c.connectFD(ctx, c.root, "https", "public.test", port, echHello(t, "secret.test", "public.test"))
	if err == nil {
		t.Fatal("an https connect carrying an encrypted ClientHello succeeded")
	}
	mustContain(t, "refusal", err.Error(), "egress refused: the ClientHello carries encrypted_client_hello: an encrypted ClientHello (ECH) hides the name the grant is for")
	conn, err := c.connectFD(ctx, c.root, "https", "public.test", port, realHello(t, "public.test"))
	if err != nil {
		t.Fatalf("https connect with a plain hello: %v", err)
	}
	defer conn.Close()
	select {
	case b := <-dialled:
		if b[0] != 22 {
			t.Errorf("the remote's first bytes = % x; want the ClientHello", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the plain hello never reached the remote")
	}
	select {
	case <-dialled:
		t.Error("the remote saw two connections; the ECH one was dialled")
	default:
	}
}

// TestConnectHandsOverAResetSocket: a remote that resets the connection
// while the switchboard looks for its ServerHello leaves a socket in error,
// which the watch on handed-over sockets reports at once. The connect
// still hands it over (the caller sees the reset for itself, as it would
// without the look); it never fails because the watch shut the
// switchboard's copy first. The race is a narrow one: many rounds.
func TestConnectHandsOverAResetSocket(t *testing.T) {
	port := serveTCP(t, func(c net.Conn) {
		b := make([]byte, 5)
		_, _ = io.ReadFull(c, b)
		_ = c.(*net.TCPConn).SetLinger(0) // close sends a reset
	})
	f := newFixture(t, nil)
	f.dns.Set("public.test", mustAddr("127.0.0.1"))
	c := dial(t, f.local)
	hello := realHello(t, "public.test")
	for i := range 300 {
		conn, err := c.connectFD(context.Background(), c.root, "https", "public.test", port, hello)
		if err != nil {
			t.Fatalf("connect %d to a remote that resets: %v", i, err)
		}
		_ = conn.Close()
	}
}

// TestHTTPSGrantIsItsDefaultPort: a handle constrained to scheme https and
// a host, with no port, reaches https on 443 only. On any port, a
// ClientHello-prefixed stream reached any TCP service of the host (a
// line protocol reads past the hello), so the grant meant plain TCP.
func TestHTTPSGrantIsItsDefaultPort(t *testing.T) {
	dialled := make(chan struct{}, 4)
	port := serveTCP(t, func(c net.Conn) { dialled <- struct{}{} })
	f := newFixture(t, nil)
	f.dns.Set("kv.test", mustAddr("127.0.0.1"))
	c := dial(t, f.local)
	ctx := context.Background()
	h, err := constrain(t, c.root, labels.Set{Host: "kv.test", Scheme: "https"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if _, err := c.connectFD(ctx, h, "https", "kv.test", port, realHello(t, "kv.test")); err == nil {
		t.Fatalf("an https connect to kv.test:%d succeeded on a grant of https without a port", port)
	} else {
		mustContain(t, "refusal", err.Error(), fmt.Sprintf("egress refused: port %d not granted", port))
	}
	select {
	case <-dialled:
		t.Error("the remote was dialled")
	default:
	}
	got, err := check(ctx, h, "https", "kv.test", 443)
	if err != nil || !got.allow {
		t.Errorf("check(https kv.test:443) = %+v, %v; want admitted", got, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

var _ = capnp.Client{}

// TestConnectHTTPSByteStream: the https connect over the ByteStream
// fallback sends the checked ClientHello first, then relays; the TLS
// server answers with its ServerHello downstream.
func TestConnectHTTPSByteStream(t *testing.T) {
	ts, _, _ := testTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	port := uint16(ts.Listener.Addr().(*net.TCPAddr).Port)
	f := newFixture(t, nil)
	f.dns.Set("example.com", mustAddr("127.0.0.1"))
	c := dial(t, f.local)
	ctx := context.Background()
	col := newCollector()
	hello := realHello(t, "example.com")
	fut, release := c.root.Connect(ctx, func(p schema.Handle_connect_Params) error {
		tg, err := p.NewTarget()
		if err != nil {
			return err
		}
		if err := target("https", "example.com", port)(tg); err != nil {
			return err
		}
		if err := p.SetTlsHello(hello); err != nil {
			return err
		}
		return p.SetDownstream(schema.ByteStream_ServerToClient(col))
	})
	defer release()
	r, err := fut.Struct()
	if err != nil {
		t.Fatal(err)
	}
	up := r.Upstream().AddRef()
	defer up.Release()
	testenv.WaitFor(t, 5*time.Second, func() error {
		b := col.bytes()
		if len(b) < 6 {
			return fmt.Errorf("no ServerHello downstream (%d bytes)", len(b))
		}
		if b[0] != 22 || b[5] != 2 {
			t.Fatalf("first bytes downstream = % x; want a ServerHello record", b[:6])
		}
		return nil
	})
}

// TestConnectHTTPSRefusesHelloRetry: a server that does not take the
// client's key share asks for a second ClientHello (a TLS 1.3
// HelloRetryRequest). The switchboard never sees that second hello, and a
// server may serve the name it names (OpenSSL switches context on it), so
// the connect is refused before the socket is handed over. A server that
// takes the first hello is reached as before (TestConnectHTTPS).
func TestConnectHTTPSRefusesHelloRetry(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "secure")
	}))
	ts.TLS = &tls.Config{CurvePreferences: []tls.CurveID{tls.CurveP384}} // Go's client shares X25519(MLKEM768) first
	ts.StartTLS()
	t.Cleanup(ts.Close)
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	port := uint16(ts.Listener.Addr().(*net.TCPAddr).Port)
	f := newFixture(t, nil)
	f.dns.Set("example.com", mustAddr("127.0.0.1"))
	c := dial(t, f.local)
	ctx := context.Background()
	hc := &helloConn{dialFn: func(hello []byte) (net.Conn, error) {
		return c.connectFD(ctx, c.root, "https", "example.com", port, hello)
	}}
	tc := tls.Client(hc, &tls.Config{ServerName: "example.com", RootCAs: pool})
	defer tc.Close()
	err := tc.HandshakeContext(ctx)
	if err == nil {
		t.Fatal("a handshake through a HelloRetryRequest went through")
	}
	mustContain(t, "refusal", err.Error(), "egress refused: the server asked for a second ClientHello (a TLS 1.3 HelloRetryRequest)")
	if !strings.Contains(f.log.String(), "HelloRetryRequest") {
		t.Errorf("the log does not say why: %s", f.log.String())
	}
}

func TestIsHelloRetry(t *testing.T) {
	head := append([]byte{22, 3, 3, 0, 90, 2, 0, 0, 86, 3, 3}, helloRetryRandom[:]...)
	if !isHelloRetry(head) {
		t.Error("a HelloRetryRequest head not recognised")
	}
	other := slices.Clone(head)
	other[20] ^= 1
	if isHelloRetry(other) || isHelloRetry(head[:40]) {
		t.Error("a ServerHello with another random, or a short head, taken for a HelloRetryRequest")
	}
}
