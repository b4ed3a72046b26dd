package switchboard

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3/flowcontrol"
	"golang.org/x/net/websocket"

	"toybox/labels"
	"toybox/schema"
	"toybox/tests/testenv"
)

// respCollector is a Responder that gathers the answer.
type respCollector struct {
	mu      sync.Mutex
	status  uint16
	headers http.Header
	failed  string
	body    *collector
	done    chan struct{}
	once    sync.Once
}

func newResp() *respCollector {
	return &respCollector{done: make(chan struct{}), body: newCollector(), headers: http.Header{}}
}

func (r *respCollector) Start(ctx context.Context, call schema.Responder_start) error {
	r.mu.Lock()
	r.status = call.Args().Status()
	hs, _ := call.Args().Headers()
	for i := 0; i < hs.Len(); i++ {
		n, _ := hs.At(i).Name()
		v, _ := hs.At(i).Value()
		r.headers.Add(n, v)
	}
	r.mu.Unlock()
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	go func() {
		<-r.body.done
		r.once.Do(func() { close(r.done) })
	}()
	return res.SetBody(schema.ByteStream_ServerToClient(r.body))
}

func (r *respCollector) Fail(ctx context.Context, call schema.Responder_fail) error {
	msg, _ := call.Args().Message_()
	r.mu.Lock()
	r.failed = msg
	r.mu.Unlock()
	r.once.Do(func() { close(r.done) })
	return nil
}

// doRequest sends one request through h and waits for the answer.
func doRequest(t *testing.T, h schema.Handle, method, url string, headers map[string]string, body string) (*respCollector, error) {
	t.Helper()
	ctx := context.Background()
	rc := newResp()
	fut, release := h.Request(ctx, func(p schema.Handle_request_Params) error {
		if err := p.SetMethod(method); err != nil {
			return err
		}
		if err := p.SetUrl(url); err != nil {
			return err
		}
		hl, err := p.NewHeaders(int32(len(headers)))
		if err != nil {
			return err
		}
		i := 0
		for k, v := range headers {
			_ = hl.At(i).SetName(k)
			_ = hl.At(i).SetValue(v)
			i++
		}
		return p.SetResponder(schema.Responder_ServerToClient(rc))
	})
	defer release()
	r, err := fut.Struct()
	if err != nil {
		return nil, err
	}
	bs := r.Body().AddRef()
	defer bs.Release()
	bs.SetFlowLimiter(flowcontrol.NewFixedLimiter(1 << 20))
	for i := 0; i < len(body); i += chunkSize {
		chunk := []byte(body[i:min(i+chunkSize, len(body))])
		if err := bs.Write(ctx, func(p schema.ByteStream_write_Params) error { return p.SetData(chunk) }); err != nil {
			return nil, err
		}
	}
	if err := bs.WaitStreaming(); err != nil {
		return nil, err
	}
	ef, erel := bs.End(ctx, nil)
	_, _ = ef.Struct()
	erel()
	select {
	case <-rc.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10s")
	}
	return rc, nil
}

func TestRequestHTTP(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Len", fmt.Sprint(len(b)))
			_, _ = w.Write(b)
		default:
			_, _ = fmt.Fprintf(w, "%s %s host=%s", r.Method, r.URL.Path, r.Host)
		}
	}))
	defer hs.Close()
	port := hs.Listener.Addr().(*net.TCPAddr).Port
	f := newFixture(t, nil)
	f.dns.Set("web.test", mustAddr("127.0.0.1"))
	c := dial(t, f.local)
	base := fmt.Sprintf("http://web.test:%d", port)

	rc, err := doRequest(t, c.root, "GET", base+"/hello", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if rc.status != 200 || string(rc.body.bytes()) != fmt.Sprintf("GET /hello host=web.test:%d", port) {
		t.Errorf("GET = %d %q", rc.status, rc.body.bytes())
	}

	rc, err = doRequest(t, c.root, "GET", fmt.Sprintf("http://WEB.Test:%d/case", port), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("GET /case host=web.test:%d", port); rc.status != 200 || string(rc.body.bytes()) != want {
		t.Errorf("GET with a mixed-case host = %d %q; want %q", rc.status, rc.body.bytes(), want)
	}

	big := strings.Repeat("x", 300_000)
	rc, err = doRequest(t, c.root, "POST", base+"/echo", map[string]string{"Content-Type": "text/plain"}, big)
	if err != nil {
		t.Fatal(err)
	}
	if rc.status != 200 || len(rc.body.bytes()) != len(big) || rc.headers.Get("X-Len") != fmt.Sprint(len(big)) {
		t.Errorf("POST echo = %d, %d bytes, X-Len %s; want 200, %d", rc.status, len(rc.body.bytes()), rc.headers.Get("X-Len"), len(big))
	}

	rc, err = doRequest(t, c.root, "GET", base+"/redirect", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if rc.status != http.StatusFound || !strings.Contains(rc.headers.Get("Location"), "169.254.169.254") {
		t.Errorf("redirect = %d %v; want the 302 itself, not followed", rc.status, rc.headers)
	}

	if _, err := doRequest(t, c.root, "GET", base+"/", map[string]string{"Host": "169.254.169.254"}, ""); err == nil {
		t.Error("a Host header naming another host was sent")
	} else {
		mustContain(t, "Host mismatch", err.Error(), "egress refused: Host header")
	}

	pub := dial(t, f.public)
	if _, err := doRequest(t, pub.root, "GET", base+"/", nil, ""); err == nil {
		t.Error("the public socket requested a loopback name")
	} else {
		mustContain(t, "public", err.Error(), "egress refused: web.test resolves to 127.0.0.1, a loopback address")
	}
	for _, u := range []string{"http://user:pw@web.test/", "ftp://web.test/", "http://169.254.169.254/", "http://[::ffff:169.254.169.254]/", "http://0x7f.1/"} {
		if _, err := doRequest(t, c.root, "GET", u, nil, ""); err == nil {
			t.Errorf("request(%s) succeeded", u)
		} else {
			mustContain(t, u, err.Error(), "egress refused: ")
		}
	}
}

func TestRequestHTTPSWithRootCAs(t *testing.T) {
	ts, _, pemBytes := testTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "tls ok")
	}))
	port := ts.Listener.Addr().(*net.TCPAddr).Port
	url := fmt.Sprintf("https://example.com:%d/", port)

	without := newFixture(t, nil)
	without.dns.Set("example.com", mustAddr("127.0.0.1"))
	rc, err := doRequest(t, dial(t, without.local).root, "GET", url, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if rc.failed == "" || !strings.Contains(rc.failed, "certificate") {
		t.Errorf("without rootCAs: failed = %q, status %d; want a certificate failure", rc.failed, rc.status)
	}

	with := newFixture(t, func(c *Config) { c.RootCAs = pemBytes })
	with.dns.Set("example.com", mustAddr("127.0.0.1"))
	rc, err = doRequest(t, dial(t, with.local).root, "GET", url, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if rc.status != 200 || string(rc.body.bytes()) != "tls ok" {
		t.Errorf("with rootCAs = %d %q (%s)", rc.status, rc.body.bytes(), rc.failed)
	}
}

// msgCollector is a MessageStream that gathers messages.
type msgCollector struct {
	mu     sync.Mutex
	msgs   []string
	binary []bool
	code   uint16
	reason string
	got    chan struct{}
	closed chan struct{}
	once   sync.Once
}

func (m *msgCollector) Send(ctx context.Context, call schema.MessageStream_send) error {
	d, _ := call.Args().Data()
	m.mu.Lock()
	m.msgs = append(m.msgs, string(d))
	m.binary = append(m.binary, call.Args().Binary())
	m.mu.Unlock()
	m.got <- struct{}{}
	return nil
}

func (m *msgCollector) Close(ctx context.Context, call schema.MessageStream_close) error {
	m.mu.Lock()
	m.code = call.Args().Code()
	m.reason, _ = call.Args().Reason()
	m.mu.Unlock()
	m.once.Do(func() { close(m.closed) })
	return nil
}

func TestWebSocket(t *testing.T) {
	hs := httptest.NewServer(websocket.Server{
		Handshake: func(cfg *websocket.Config, r *http.Request) error {
			cfg.Protocol = []string{"chat"}
			return nil
		},
		Handler: func(ws *websocket.Conn) {
			for {
				var data []byte
				var typ byte
				codec := websocket.Codec{
					Marshal: func(v any) ([]byte, byte, error) { return v.([]byte), typ, nil },
					Unmarshal: func(b []byte, pt byte, v any) error {
						*v.(*[]byte) = b
						typ = pt
						return nil
					},
				}
				if err := codec.Receive(ws, &data); err != nil {
					return
				}
				if err := codec.Send(ws, append([]byte("echo:"), data...)); err != nil {
					return
				}
			}
		},
	})
	defer hs.Close()
	port := hs.Listener.Addr().(*net.TCPAddr).Port
	f := newFixture(t, nil)
	f.dns.Set("ws.test", mustAddr("127.0.0.1"))
	c := dial(t, f.local)
	ctx := context.Background()
	mc := &msgCollector{got: make(chan struct{}, 16), closed: make(chan struct{})}
	fut, release := c.root.WebSocket(ctx, func(p schema.Handle_webSocket_Params) error {
		if err := p.SetUrl(fmt.Sprintf("ws://ws.test:%d/chat", port)); err != nil {
			return err
		}
		hl, err := p.NewHeaders(2)
		if err != nil {
			return err
		}
		_ = hl.At(0).SetName("Sec-WebSocket-Protocol")
		_ = hl.At(0).SetValue("chat")
		_ = hl.At(1).SetName("Origin")
		_ = hl.At(1).SetValue(fmt.Sprintf("http://ws.test:%d", port))
		return p.SetDownstream(schema.MessageStream_ServerToClient(mc))
	})
	defer release()
	r, err := fut.Struct()
	if err != nil {
		t.Fatal(err)
	}
	if proto, _ := r.Protocol(); proto != "chat" {
		t.Errorf("protocol = %q; want chat", proto)
	}
	up := r.Upstream().AddRef()
	defer up.Release()
	up.SetFlowLimiter(flowcontrol.NewFixedLimiter(1 << 20))
	send := func(s string, bin bool) {
		if err := up.Send(ctx, func(p schema.MessageStream_send_Params) error {
			p.SetBinary(bin)
			return p.SetData([]byte(s))
		}); err != nil {
			t.Fatal(err)
		}
	}
	send("hello", false)
	send(strings.Repeat("b", 70000), true)
	for i := 0; i < 2; i++ {
		select {
		case <-mc.got:
		case <-time.After(5 * time.Second):
			t.Fatal("no echo")
		}
	}
	mc.mu.Lock()
	if mc.msgs[0] != "echo:hello" || mc.binary[0] || len(mc.msgs[1]) != 70005 || !mc.binary[1] {
		t.Errorf("messages = %q.. binary %v", mc.msgs[0], mc.binary)
	}
	mc.mu.Unlock()
	cf, crel := up.Close(ctx, func(p schema.MessageStream_close_Params) error { p.SetCode(1000); return nil })
	_, _ = cf.Struct()
	crel()
	select {
	case <-mc.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("no close downstream")
	}
	pub := dial(t, f.public)
	fut2, rel2 := pub.root.WebSocket(ctx, func(p schema.Handle_webSocket_Params) error {
		_ = p.SetUrl(fmt.Sprintf("ws://ws.test:%d/chat", port))
		return p.SetDownstream(schema.MessageStream_ServerToClient(&msgCollector{got: make(chan struct{}, 1), closed: make(chan struct{})}))
	})
	defer rel2()
	if _, err := fut2.Struct(); err == nil {
		t.Error("public webSocket to a loopback name succeeded")
	} else {
		mustContain(t, "public ws", err.Error(), "egress refused: ws.test resolves to 127.0.0.1")
	}
}

func TestWebSocketTLS(t *testing.T) {
	ts, _, pemBytes := testTLSServer(t, websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil },
		Handler:   func(c *websocket.Conn) { _, _ = io.Copy(c, c) },
	})
	port := ts.Listener.Addr().(*net.TCPAddr).Port
	f := newFixture(t, func(c *Config) { c.RootCAs = pemBytes })
	f.dns.Set("example.com", mustAddr("127.0.0.1"))
	c := dial(t, f.local)
	ctx := context.Background()
	mc := &msgCollector{got: make(chan struct{}, 4), closed: make(chan struct{})}
	fut, release := c.root.WebSocket(ctx, func(p schema.Handle_webSocket_Params) error {
		if err := p.SetUrl(fmt.Sprintf("wss://example.com:%d/", port)); err != nil {
			return err
		}
		return p.SetDownstream(schema.MessageStream_ServerToClient(mc))
	})
	defer release()
	r, err := fut.Struct()
	if err != nil {
		t.Fatal(err)
	}
	up := r.Upstream().AddRef()
	defer up.Release()
	up.SetFlowLimiter(flowcontrol.NewFixedLimiter(1 << 20))
	if err := up.Send(ctx, func(p schema.MessageStream_send_Params) error { return p.SetData([]byte("secure hello")) }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-mc.got:
	case <-time.After(5 * time.Second):
		t.Fatal("no echo over wss")
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.msgs[0] != "secure hello" {
		t.Errorf("wss echo = %q", mc.msgs[0])
	}
}

// TestReleaseCancelsRequest: releasing the handle ends a request that is
// still waiting for its answer.
func TestReleaseCancelsRequest(t *testing.T) {
	arrived := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // never answers; ends when the connection does
	}))
	defer hs.Close()
	port := hs.Listener.Addr().(*net.TCPAddr).Port
	f := newFixture(t, nil)
	c := dial(t, f.local)
	h, err := constrain(t, c.root, labels.Set{Host: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rc := newResp()
	fut, release := h.Request(ctx, func(p schema.Handle_request_Params) error {
		_ = p.SetMethod("GET")
		_ = p.SetUrl(fmt.Sprintf("http://127.0.0.1:%d/slow", port))
		return p.SetResponder(schema.Responder_ServerToClient(rc))
	})
	defer release()
	res, err := fut.Struct()
	if err != nil {
		t.Fatal(err)
	}
	ef, erel := res.Body().End(ctx, nil)
	_, _ = ef.Struct()
	erel()
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("request never arrived")
	}
	h.Release()
	select {
	case <-rc.done:
		if rc.failed == "" {
			t.Errorf("request ended with status %d; want a failure", rc.status)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("request still pending after its handle was released")
	}
}

// TestWebSocketHeaderInjection: the switchboard writes the handshake
// itself, so a header name or value that is not a valid HTTP field (line
// breaks: a second Host, a whole smuggled request) is refused, and nothing
// reaches the remote. A handle granted only http to one host must not
// become raw bytes to it.
func TestWebSocketHeaderInjection(t *testing.T) {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan []byte, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			b, _ := io.ReadAll(c)
			_ = c.Close()
			accepted <- b
		}
	}()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	f := newFixture(t, nil)
	f.dns.Set("ws.test", mustAddr("127.0.0.1"))
	c := dial(t, f.local)
	h, err := constrain(t, c.root, labels.Set{Scheme: "http", Host: "ws.test", Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	for _, tt := range []struct{ name, value, want string }{
		{"X-A: 1\r\nHost: other-tenant.internal\r\n\r\nPOST /admin/delete HTTP/1.1\r\nX-B", "x", "is not a valid HTTP field name"},
		{"X-A", "1\r\nHost: other-tenant.internal", "is not a valid HTTP field value"},
		{"Bad Name", "x", "is not a valid HTTP field name"},
		{"", "x", "is not a valid HTTP field name"},
	} {
		fut, release := h.WebSocket(context.Background(), func(p schema.Handle_webSocket_Params) error {
			if err := p.SetUrl(fmt.Sprintf("ws://ws.test:%d/chat", port)); err != nil {
				return err
			}
			hl, err := p.NewHeaders(1)
			if err != nil {
				return err
			}
			_ = hl.At(0).SetName(tt.name)
			_ = hl.At(0).SetValue(tt.value)
			return p.SetDownstream(schema.MessageStream_ServerToClient(&msgCollector{got: make(chan struct{}, 1), closed: make(chan struct{})}))
		})
		_, err := fut.Struct()
		release()
		if err == nil {
			t.Errorf("header %q: %q admitted", tt.name, tt.value)
			continue
		}
		mustContain(t, "header "+strconv.Quote(tt.name), err.Error(), "egress refused: ")
		mustContain(t, "header "+strconv.Quote(tt.name), err.Error(), tt.want)
	}
	select {
	case b := <-accepted:
		t.Errorf("the remote was reached and received %q", b)
	case <-time.After(200 * time.Millisecond):
	}
}

// stuckResponder never returns from fail or start (until released).
type stuckResponder struct{ block chan struct{} }

func (r *stuckResponder) Start(ctx context.Context, call schema.Responder_start) error {
	select {
	case <-r.block:
	case <-ctx.Done():
	}
	return errors.New("never")
}

func (r *stuckResponder) Fail(ctx context.Context, call schema.Responder_fail) error {
	select {
	case <-r.block:
	case <-ctx.Done():
	}
	return nil
}

// TestRequestsWaitingOnResponderAreBounded: request() answers at once and
// delivers the outcome to the caller's responder later. A caller whose
// responder never takes a failure used to leave one goroutine per request
// for ever, past every limit (10000 requests with limits of 16). A request
// now holds one of the peer's connection slots until its outcome is
// delivered, and the switchboard waits Config.ResponderTimeout for the
// responder.
func TestRequestsWaitingOnResponderAreBounded(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	_ = l.Close() // nothing listens there: every request fails at the dial
	// The first part must not depend on the machine's speed: an hour.
	c := dial(t, newFixture(t, func(c *Config) {
		c.Limits = Limits{Conns: 16}
		c.ResponderTimeout = time.Hour
	}).local)
	ctx := context.Background()
	request := func(block chan struct{}) error {
		fut, release := c.root.Request(ctx, func(p schema.Handle_request_Params) error {
			_ = p.SetMethod("GET")
			_ = p.SetUrl(fmt.Sprintf("http://127.0.0.1:%d/", closed))
			return p.SetResponder(schema.Responder_ServerToClient(&stuckResponder{block: block}))
		})
		defer release()
		_, err := fut.Struct()
		return err
	}
	block := make(chan struct{})
	before := runtime.NumGoroutine()
	refused := 0
	for range 100 {
		if err := request(block); err != nil {
			if !strings.Contains(err.Error(), "per-connection limit reached") {
				t.Fatalf("request: %v; want accepted or refused for the limit", err)
			}
			refused++
		}
	}
	if refused < 100-16 {
		t.Errorf("%d of 100 requests refused with 16 slots; want at least %d: requests waiting on a responder are not counted", refused, 100-16)
	}
	if g := runtime.NumGoroutine() - before; g > 16*20 {
		t.Errorf("%d more goroutines for 16 admitted requests", g)
	}
	// Once the responders take their failures, the slots are free.
	close(block)
	waitAccepted := func(what string) {
		t.Helper()
		testenv.WaitFor(t, 10*time.Second, func() error {
			if request(make(chan struct{})) != nil {
				return fmt.Errorf("no request accepted %s", what)
			}
			return nil
		})
	}
	waitAccepted("once the responders took their failures")
	// A responder that never takes it is given up after ResponderTimeout.
	c = dial(t, newFixture(t, func(c *Config) {
		c.Limits = Limits{Conns: 16}
		c.ResponderTimeout = 300 * time.Millisecond
	}).local)
	never := make(chan struct{})
	defer close(never)
	for range 20 {
		_ = request(never)
	}
	waitAccepted("once the stuck responders timed out")
}

// TestAnswerHeaderBounded: the header of an answer (a request()'s, a
// WebSocket handshake's) is held until the caller takes it, so it is
// bounded by maxResponseHeader. At 1 MiB, one vat's requests to a server
// sending 1 MiB of header held ~1.2 MiB each (2.4 GiB at the default
// limits.conns).
func TestAnswerHeaderBounded(t *testing.T) {
	pad := strings.Repeat("a", 1000)
	bigHeader := func(w io.Writer) {
		for i := range 2 * maxResponseHeader / len(pad) {
			fmt.Fprintf(w, "X-Pad-%d: %s\r\n", i, pad)
		}
	}
	port := serveTCP(t, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		w := bufio.NewWriter(c)
		if req.Header.Get("Upgrade") == "websocket" {
			sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + wsGUID))
			fmt.Fprintf(w, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n", base64.StdEncoding.EncodeToString(sum[:]))
		} else {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n")
		}
		bigHeader(w)
		_, _ = w.WriteString("\r\nhi")
		_ = w.Flush()
		time.Sleep(time.Second)
	})
	f := newFixture(t, nil)
	c := dial(t, f.local)
	rc, err := doRequest(t, c.root, "GET", fmt.Sprintf("http://127.0.0.1:%d/", port), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if rc.status != 0 || !strings.Contains(rc.failed, "exceeded") {
		t.Errorf("request answered with %d of header = status %d, failure %q; want a failure naming the bound", 2*maxResponseHeader, rc.status, rc.failed)
	}
	mc := &msgCollector{got: make(chan struct{}, 1), closed: make(chan struct{})}
	up, err := openWebSocket(c.root, fmt.Sprintf("ws://127.0.0.1:%d/", port), mc)
	if err == nil {
		up.Release()
	}
	if err == nil || !strings.Contains(err.Error(), "handshake's answer is over") {
		t.Errorf("webSocket answered with %d of header = %v; want a refusal naming the bound", 2*maxResponseHeader, err)
	}
}
