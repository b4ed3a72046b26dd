package entry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"capnproto.org/go/capnp/v3/flowcontrol"
	"golang.org/x/net/http/httpguts"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/vat/relay"
)

// Limits.
const (
	headerTimeout = 30 * time.Second
	helloTimeout  = 10 * time.Second
	maxTLSRecord  = 16384 + 2048
	maxTLSHello   = 80 << 10 // the records of one ClientHello (the switchboard takes a 64 KiB message)
	streamChunk   = 64 << 10
	streamWindow  = 1 << 20 // each stream's own flow window
	connWindow    = 8 << 20 // all streams together: half the switchboard's default limits.bytes
	proxyAgent    = "toybox-entry"
)

// Proxy serves the CONNECT proxy and forwards through one Handle.
type Proxy struct {
	id      string
	handle  schema.Handle // may be null: the vat has no grant
	conn    *wire.Conn    // where connect()'s descriptors arrive
	logger  *slog.Logger
	limiter flowcontrol.FlowLimiter // shared by every stream we write to
	noFD    bool                    // ask for ByteStreams instead of the socket
	headDue time.Duration           // how long a request's head may take (headerTimeout)
	gate    *gate                   // the connections held open, against the descriptor limit
	direct  *direct                 // the one-hop path (SetDirect); nil: the relay alone
	said    decisionLog             // the decisions logged in the current window
}

// SetLimits bounds the connections the proxy, the forwards and
// transparent egress hold open together to maxConns (if zero, as many as
// the descriptor limit allows beside the entry's own), counting listeners
// listening sockets.
func (p *Proxy) SetLimits(maxConns, listeners int) {
	p.gate.max, p.gate.listeners = maxConns, listeners
}

// SetHeaderTimeout sets how long a client may take to send a request's
// head (30 s unless set): for tests of what comes after it.
func (p *Proxy) SetHeaderTimeout(d time.Duration) { p.headDue = d }

// UseStreams makes the proxy ask the Handle for a ByteStream pair instead
// of the connected socket (wantFd false): for a peer that cannot pass
// descriptors, and for tests of that path.
func (p *Proxy) UseStreams() { p.noFD = true }

// NewProxy serves through handle, whose descriptors arrive on conn. It takes
// ownership of handle (Close releases it); a null handle refuses everything.
func NewProxy(id string, handle schema.Handle, conn *wire.Conn, logger *slog.Logger) *Proxy {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Proxy{id: id, handle: handle, conn: conn, logger: logger, limiter: flowcontrol.NewFixedLimiter(connWindow), gate: &gate{log: logger.With(keyVat, id)}}
}

// Close releases the Handle.
func (p *Proxy) Close() {
	p.handle.Release()
	if p.direct != nil {
		p.direct.close()
	}
}

// target is one destination, as the Handle is asked for it.
type target struct {
	scheme string
	host   string
	port   uint16
}

func (t target) String() string {
	return t.scheme + "://" + net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
}

// ServeProxy accepts proxy clients on l until l is closed or ctx ends. A
// client past the connection limit is answered 503 with the reason.
func (p *Proxy) ServeProxy(ctx context.Context, l net.Listener) error {
	return acceptLoop(ctx, l, p.logger, func(c net.Conn) {
		p.gate.admit(c, func() { p.proxyConn(ctx, c.(*net.TCPConn)) }, func(err error) {
			answer(c, 503, "connection_limit_reached", err.Error())
		})
	})
}

// acceptLoop hands each connection accepted on l to serve until l is
// closed or ctx ends. Any other accept error (out of descriptors, or of
// kernel memory: the app can cause both) is waited out, with a warning,
// never taken as the end: a proxy that stopped serving while its wall
// stayed up would fail silently. The warnings are one per logEvery, each
// saying how many failures came since the one before, so that they never
// push their cause out of the wall's log tail.
func acceptLoop(ctx context.Context, l net.Listener, logger *slog.Logger, serve func(net.Conn)) error {
	var wait time.Duration
	var said rateLog
	for {
		c, err := l.Accept()
		if err == nil {
			wait = 0
			serve(c)
			continue
		}
		if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
			return err
		}
		if n, ok := said.allow(time.Now()); ok {
			logger.Warn("accepting a connection failed; retrying", "listener", l.Addr().String(), keyReason, err.Error(), "unlogged", n)
		}
		if wait == 0 {
			wait = 5 * time.Millisecond
		} else {
			wait = min(2*wait, time.Second)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
	}
}

// ServeForward accepts on l and connects each connection to f's target.
func (p *Proxy) ServeForward(ctx context.Context, l net.Listener, f Forward) error {
	fw := &forward{t: target{scheme: "tcp", host: f.Host, port: f.TargetPort}}
	return acceptLoop(ctx, l, p.logger, func(c net.Conn) {
		p.gate.admit(c, func() { p.forwardConn(ctx, c.(*net.TCPConn), fw) }, nil)
	})
}

// forward is one forwarded port's target, and whether plain tcp there was
// refused for its scheme alone (a vat's grant does not change while it
// runs: later connections skip asking).
type forward struct {
	t       target
	schemed atomic.Bool
}

// forwardConn carries one connection to a forwarded port to t. A loopback
// host the owner listed with a scheme (http://localhost:8080,
// https://localhost:8443) is granted in that scheme alone, and its clients
// come here straight (NO_PROXY names loopback), not through the proxy: when
// plain tcp is refused for its scheme alone, the connection is read as
// what it starts with. A TLS ClientHello goes out as an https CONNECT's
// does (checked against the host); anything else is read as origin-form
// HTTP requests to t, each carried as the proxy carries an absolute-form
// one (one request, then the connection ends).
func (p *Proxy) forwardConn(ctx context.Context, client *net.TCPConn, fw *forward) {
	t := fw.t
	if !fw.schemed.Load() {
		up, err := p.dial(ctx, t, nil, client)
		if err == nil {
			up.relay(client, nil)
			return
		}
		if !strings.Contains(err.Error(), labels.SchemeRefused("tcp")) {
			_ = client.Close()
			return
		}
		fw.schemed.Store(true)
	}
	br := bufio.NewReader(client)
	_ = client.SetReadDeadline(time.Now().Add(helloTimeout))
	first, err := br.Peek(1)
	if err != nil {
		_ = client.Close()
		return
	}
	if first[0] == tlsHandshake {
		t.scheme = "https"
		if err := p.check(ctx, t); err != nil {
			_ = client.Close() // no answer a TLS client could read
			return
		}
		hello, err := readTLSHello(br)
		if err != nil {
			p.log(t, false, err.Error(), "")
			_ = client.Close()
			return
		}
		_ = client.SetReadDeadline(time.Time{})
		up, err := p.dial(ctx, t, hello, client)
		if err != nil {
			_ = client.Close()
			return
		}
		up.relay(client, br)
		return
	}
	t.scheme = "http"
	_ = client.SetReadDeadline(time.Now().Add(p.headerDue()))
	req, err := readRequest(br)
	switch {
	case errors.Is(err, io.EOF):
		_ = client.Close()
	case err != nil:
		answer(client, 400, "bad_request", fmt.Sprintf("%v: %v", ErrBadRequest, err))
	case req.Method == "CONNECT" || req.URL.IsAbs() || !strings.HasPrefix(req.Target, "/"):
		answer(client, 400, "bad_request", fmt.Sprintf("%v: this port is forwarded to %s: send origin-form requests (GET /path)", ErrBadRequest, t))
	default:
		req.URL.Scheme, req.URL.Host = "http", net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
		req.Host = req.URL.Host
		p.plainHTTP(ctx, client, br, req)
	}
}

// headerDue is how long a client may take to send a request head.
func (p *Proxy) headerDue() time.Duration {
	if p.headDue <= 0 {
		return headerTimeout
	}
	return p.headDue
}

func (p *Proxy) proxyConn(ctx context.Context, c *net.TCPConn) {
	_ = c.SetReadDeadline(time.Now().Add(p.headerDue()))
	br := bufio.NewReader(c)
	req, err := readRequest(br)
	switch {
	case errors.Is(err, io.EOF):
		_ = c.Close()
	case err != nil:
		answer(c, 400, "bad_request", fmt.Sprintf("%v: %v", ErrBadRequest, err))
	case req.Method == "CONNECT":
		p.connect(ctx, c, br, req)
	case req.URL.IsAbs() && req.URL.Scheme == "http":
		p.plainHTTP(ctx, c, br, req)
	case req.URL.IsAbs():
		answer(c, 400, "bad_request", fmt.Sprintf("%v: use CONNECT for %s:// targets", ErrBadRequest, req.URL.Scheme))
	default:
		answer(c, 400, "bad_request", fmt.Sprintf("%v: this is a proxy: send CONNECT host:port or an absolute http:// URL", ErrBadRequest))
	}
}

func (p *Proxy) connect(ctx context.Context, c *net.TCPConn, br *bufio.Reader, req *request) {
	host, portText, err := net.SplitHostPort(req.Target)
	port, perr := strconv.ParseUint(portText, 10, 16)
	if err != nil || perr != nil || port == 0 || host == "" {
		answer(c, 400, "bad_request", fmt.Sprintf("%v: CONNECT needs host:port, got %q", ErrBadRequest, req.Target))
		return
	}
	t := target{scheme: "tcp", host: host, port: uint16(port)}
	if port == 443 {
		t.scheme = "https"
	}
	if t.scheme != "https" {
		up, err := p.dial(ctx, t, nil, c)
		if err == nil {
			_ = c.SetReadDeadline(time.Time{})
			if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
				up.close()
				_ = c.Close()
				return
			}
			up.relay(c, br)
			return
		}
		// A grant of TLS on another port ({"scheme":"https","port":8443})
		// refuses plain tcp there for its scheme alone: take the TLS path
		// when it admits https. Any other refusal costs no second look.
		tls := target{scheme: "https", host: t.host, port: t.port}
		if !strings.Contains(err.Error(), labels.SchemeRefused("tcp")) || p.check(ctx, tls) != nil {
			refuse(c, err)
			return
		}
		t = tls
	} else if err := p.check(ctx, t); err != nil {
		// TLS: ask first (so a refusal can still be a 403), then read the
		// client's ClientHello, which the switchboard checks against the host.
		refuse(c, err)
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	hello, err := readTLSHello(br)
	if err != nil {
		p.log(t, false, err.Error(), "")
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	up, err := p.dial(ctx, t, hello, c)
	if err != nil {
		_ = c.Close() // too late for a 403: the tunnel was already open
		return
	}
	up.relay(c, br)
}

// plainHTTP carries one absolute-form request to an http: target through
// the Handle's request() (the switchboard makes the request and decides it
// like a CONNECT), answers with Connection: close, and closes.
func (p *Proxy) plainHTTP(ctx context.Context, c *net.TCPConn, br *bufio.Reader, req *request) {
	// Closing with unread input (a pipelined request, an upload the remote
	// answered early) would reset the connection and lose the answer's
	// tail still on its way: end it as answer does.
	defer linger(c)
	port := 80
	if ps := req.URL.Port(); ps != "" {
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil || n == 0 {
			answer(c, 400, "bad_request", fmt.Sprintf("%v: port %q", ErrBadRequest, ps))
			return
		}
		port = int(n)
	}
	t := target{scheme: "http", host: req.URL.Hostname(), port: uint16(port)}
	// The head's deadline is not the body's: a body may take as long as
	// the client and the remote take (plainHTTPTimeout bounds the whole).
	_ = c.SetReadDeadline(time.Time{})
	if !p.handle.IsValid() {
		p.log(t, false, ErrNoGrant.Error(), "")
		refuse(c, ErrNoGrant)
		return
	}
	// Connection goes on: the switchboard drops the fields it names.
	var hdrs [][2]string
	for k, vs := range req.Header {
		if hopByHop[k] || strings.HasPrefix(k, "Proxy-") {
			continue
		}
		for _, v := range vs {
			hdrs = append(hdrs, [2]string{k, v})
		}
	}
	// No Host: the switchboard sets it from the URL it decided (a Host
	// spelled otherwise, "127.0.0.1:80" for 127.0.0.1, would be refused).
	// A request without framing has no body (RFC 9112 section 6.3): it
	// goes on as Content-Length 0, not as an empty chunked body.
	if req.ContentLength >= 0 {
		hdrs = append(hdrs, [2]string{"Content-Length", strconv.FormatInt(req.ContentLength, 10)})
	}
	resp := &responder{c: c, done: make(chan struct{})}
	fut, rel := p.handle.Request(ctx, func(ps schema.Handle_request_Params) error {
		if err := ps.SetMethod(req.Method); err != nil {
			return err
		}
		if err := ps.SetUrl(req.URL.String()); err != nil {
			return err
		}
		list, err := ps.NewHeaders(int32(len(hdrs)))
		if err != nil {
			return err
		}
		for i, h := range hdrs {
			if err := list.At(i).SetName(h[0]); err != nil {
				return err
			}
			if err := list.At(i).SetValue(h[1]); err != nil {
				return err
			}
		}
		return ps.SetResponder(schema.Responder_ServerToClient(resp))
	})
	defer rel()
	res, err := fut.Struct()
	if err != nil {
		p.log(t, false, err.Error(), "")
		refuse(c, err)
		return
	}
	p.log(t, true, "", "request")
	body := res.Body().AddRef()
	defer body.Release()
	body.SetFlowLimiter(wire.StreamLimiter(p.limiter, streamWindow))
	if req.ContentLength != 0 {
		buf := make([]byte, streamChunk)
		for {
			n, rerr := req.Body.Read(buf)
			if n > 0 {
				chunk := buf[:n]
				if err := body.Write(ctx, func(ps schema.ByteStream_write_Params) error { return ps.SetData(chunk) }); err != nil {
					break
				}
			}
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				// A body cut short or badly framed is not sent on as a
				// shorter complete one: releasing the stream without
				// End aborts the request upstream.
				p.log(t, false, "the request body: "+rerr.Error(), "request")
				body.Release()
				if resp.claim() {
					answer(c, 400, "http_request_error", fmt.Sprintf("%v: the request body: %v", ErrBadRequest, rerr))
				}
				return
			}
		}
	}
	if body.WaitStreaming() == nil {
		efut, erel := body.End(ctx, nil)
		_, _ = efut.Struct()
		erel()
	}
	select {
	case <-resp.done:
	case <-ctx.Done():
	case <-time.After(plainHTTPTimeout):
	}
	_ = br
}

// hopByHop headers are never forwarded (Connection is: the switchboard
// drops it and every field it names).
var hopByHop = map[string]bool{
	"Keep-Alive": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Host": true,
}

// plainHTTPTimeout bounds one plain-HTTP exchange.
const plainHTTPTimeout = 10 * time.Minute

// responder receives the answer to a plain-HTTP request and writes it to
// the client, always with Connection: close.
type responder struct {
	c       *net.TCPConn
	once    sync.Once
	done    chan struct{}
	claimed atomic.Bool // an answer has begun on c
}

func (r *responder) finish() { r.once.Do(func() { close(r.done) }) }

// claim reports whether the caller is the first to answer on c: the
// switchboard's answer and the proxy's own refusal never interleave.
func (r *responder) claim() bool { return r.claimed.CompareAndSwap(false, true) }

func (r *responder) Start(_ context.Context, call schema.Responder_start) error {
	if !r.claim() {
		r.finish()
		return errors.New("the client was already answered")
	}
	args := call.Args()
	status := int(args.Status())
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, statusText(status))
	hs, err := args.Headers()
	if err != nil {
		r.finish()
		return err
	}
	for i := 0; i < hs.Len(); i++ {
		name, _ := hs.At(i).Name()
		value, _ := hs.At(i).Value()
		k := textproto.CanonicalMIMEHeaderKey(name)
		// Only valid field names and values pass: "Transfer-Encoding :"
		// (a space before the colon, which Go's client takes as a name)
		// would be read as framing by a lenient client.
		if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
			continue
		}
		if k == "Connection" || k == "Keep-Alive" || k == "Transfer-Encoding" || k == "Proxy-Status" {
			continue
		}
		fmt.Fprintf(&b, "%s: %s\r\n", k, value)
	}
	b.WriteString("Connection: close\r\n\r\n")
	if _, err := io.WriteString(r.c, b.String()); err != nil {
		r.finish()
		return err
	}
	res, err := call.AllocResults()
	if err != nil {
		r.finish()
		return err
	}
	return res.SetBody(schema.ByteStream_ServerToClient(&respBody{r: r}))
}

func (r *responder) Fail(_ context.Context, call schema.Responder_fail) error {
	msg, _ := call.Args().Message_()
	if r.claim() {
		requestFailed(r.c, msg)
	}
	r.finish()
	return nil
}

// requestFailed answers a plain-HTTP request the switchboard could not
// carry: a 502, unless it refused it after its first decision (the
// listener-owner check, which judges a loopback address when it dials),
// which is a refusal like any other: a 403 whose body starts "egress
// refused:".
func requestFailed(c net.Conn, msg string) {
	if reason, ok := labels.RefusalText(msg); ok {
		answer(c, 403, "destination_ip_prohibited", labels.Refuse(reason).Error())
		return
	}
	answer(c, 502, "http_request_error", msg)
}

// Shutdown: the switchboard let go without an answer.
func (r *responder) Shutdown() { r.finish() }

// respBody writes a plain-HTTP answer's body to the client.
type respBody struct{ r *responder }

func (b *respBody) Write(_ context.Context, call schema.ByteStream_write) error {
	data, err := call.Args().Data()
	if err != nil {
		return err
	}
	_, err = b.r.c.Write(data)
	return err
}

func (b *respBody) End(context.Context, schema.ByteStream_end) error {
	b.r.finish()
	return nil
}

func (b *respBody) Shutdown() { b.r.finish() }

// check asks the Handle for its decision without dialling: a direct
// connection's first, the relay's when none admits t (the relay words
// and reports a refusal).
func (p *Proxy) check(ctx context.Context, t target) error {
	if !p.handle.IsValid() {
		return ErrNoGrant
	}
	if p.direct != nil && !p.noFD {
		if err := p.direct.check(ctx, t); !errors.Is(err, errRelay) {
			return err
		}
	}
	fut, rel := p.handle.Check(ctx, func(ps schema.Handle_check_Params) error {
		return setTarget(ps.NewTarget, t)
	})
	defer rel()
	res, err := fut.Struct()
	if err != nil {
		p.log(t, false, err.Error(), "")
		return err
	}
	d, err := res.Decision()
	if err != nil {
		return err
	}
	if !d.Allow() {
		reason, _ := d.Reason()
		p.log(t, false, reason, "")
		return labels.Refuse(strings.TrimPrefix(reason, labels.RefusedPrefix))
	}
	return nil
}

func setTarget(newTarget func() (schema.Target, error), t target) error {
	return schema.TargetFields{Scheme: t.scheme, Host: t.host, Port: t.port}.Set(newTarget)
}

// upstream is a connection the Handle granted: the socket itself, or a
// ByteStream pair when no socket could be handed over.
type upstream struct {
	nc     net.Conn          // the socket (fd path)
	bs     schema.ByteStream // where to write (stream path); released by close
	ds     *downstream       // where the remote's bytes arrive (stream path)
	proxy  *Proxy
	target target
}

func (u *upstream) close() {
	if u.nc != nil {
		relay.Shutdown(u.nc)
	}
	if u.ds != nil {
		u.ds.open() // anything still to come fails on the closed client
	}
	if u.bs.IsValid() {
		u.bs.Release()
	}
}

// dial asks the Handle for a connection to t; the remote's bytes go to
// client on the stream path.
func (p *Proxy) dial(ctx context.Context, t target, hello []byte, client *net.TCPConn) (*upstream, error) {
	if !p.handle.IsValid() {
		p.log(t, false, ErrNoGrant.Error(), "")
		return nil, ErrNoGrant
	}
	if f, err := p.dialDirect(ctx, t, hello, false, "fd"); !errors.Is(err, errRelay) {
		if err != nil {
			return nil, err
		}
		return p.fileUpstream(t, f)
	}
	ds := newDownstream(client)
	fut, rel := p.handle.Connect(ctx, func(ps schema.Handle_connect_Params) error {
		if err := setTarget(ps.NewTarget, t); err != nil {
			return err
		}
		if len(hello) > 0 {
			if err := ps.SetTlsHello(hello); err != nil {
				return err
			}
		}
		ps.SetWantFd(!p.noFD)
		if !p.noFD {
			// The socket itself comes back: no stream to export (a
			// capability passed through the supervisor costs messages
			// both ways on every connect).
			return nil
		}
		return ps.SetDownstream(schema.ByteStream_ServerToClient(ds))
	})
	defer rel()
	res, err := fut.Struct()
	if err != nil {
		p.log(t, false, err.Error(), "")
		return nil, err
	}
	if seq := res.Fd(); seq != 0 {
		fd, err := p.conn.TakeRawFD(seq)
		if err != nil {
			p.log(t, false, "taking the connected socket: "+err.Error(), "")
			return nil, fmt.Errorf("taking the connected socket: %w", err)
		}
		p.log(t, true, "", "fd")
		return p.fileUpstream(t, fd)
	}
	up := res.Upstream()
	if !up.IsValid() {
		p.log(t, false, "the Handle returned neither a socket nor a stream", "")
		return nil, errors.New("the Handle returned neither a socket nor a stream")
	}
	bs := up.AddRef()
	bs.SetFlowLimiter(wire.StreamLimiter(p.limiter, streamWindow))
	p.log(t, true, "", "stream")
	return &upstream{bs: bs, ds: ds, proxy: p, target: t}, nil
}

// log writes the one record of a decision the entry made or was told,
// with the keys the switchboard's and the supervisor's records use, unless
// the window's records of its kind are spent (decisionLog).
func (p *Proxy) log(t target, allow bool, reason, path string) {
	unlogged, unloggedAllowed, ok := p.said.allow(allow, time.Now())
	if !ok {
		return
	}
	op := "connect"
	if path == "request" {
		op = "request"
	}
	attrs := []any{keyVat, p.id, keyOp, op, keyTarget, t.String(), keyScheme, t.scheme, keyAllow, allow, keyReason, strings.TrimPrefix(reason, labels.RefusedPrefix), keyPath, path}
	if unlogged > 0 {
		attrs = append(attrs, keyUnlogged, unlogged)
	}
	if unloggedAllowed > 0 {
		attrs = append(attrs, keyUnloggedAllowed, unloggedAllowed)
	}
	p.logger.Info(DecisionMsg, attrs...)
}

// The decisions' records go to the vat's log, a ring of 64 KiB by
// default: a storm of allowed connects (a crawler, a client without
// keep-alive) would push out of it, within a few hundred connects, the
// refusal or the crash an operator opens the log to find, and cost the
// entry and the supervisor a record each. So the entry logs, as the
// switchboard does, at most allowedPerWindow allowed decisions and
// refusalsPerWindow refusals per decisionWindow, each kind against its own
// count; past that they are counted, and the next record says how many of
// each went unlogged (unlogged, unlogged_allowed). No record is written
// for those counted after the last one: the entry ends with its app, and
// a record written then would race the process's exit. The vat's status
// and metrics count every decision all the same: they come from the
// reports, not from the log.
const (
	decisionWindow     = 5 * time.Second
	refusalsPerWindow  = 100
	allowedPerWindow   = 100
	keyUnlogged        = "unlogged"
	keyUnloggedAllowed = "unlogged_allowed"
)

// decisionLog is the count of a window's records (see above).
type decisionLog struct {
	mu                        sync.Mutex
	from                      time.Time // the window's start
	refusals, allowed         int       // logged in it
	unlogged, unloggedAllowed int       // not logged since the last record
}

// allow reports whether a decision gets its record, and how many of each
// kind went unlogged before it (given back once).
func (d *decisionLog) allow(allow bool, now time.Time) (unlogged, unloggedAllowed int, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if now.Sub(d.from) >= decisionWindow {
		d.from, d.refusals, d.allowed = now, 0, 0
	}
	switch {
	case allow && d.allowed >= allowedPerWindow:
		d.unloggedAllowed++
		return 0, 0, false
	case !allow && d.refusals >= refusalsPerWindow:
		d.unlogged++
		return 0, 0, false
	case allow:
		d.allowed++
	default:
		d.refusals++
	}
	unlogged, unloggedAllowed = d.unlogged, d.unloggedAllowed
	d.unlogged, d.unloggedAllowed = 0, 0
	return unlogged, unloggedAllowed, true
}

// relay moves bytes both ways until both sides are done, then closes
// everything. Bytes the client sent early (still in br) go first.
func (u *upstream) relay(client *net.TCPConn, br *bufio.Reader) {
	var early []byte
	if br != nil && br.Buffered() > 0 {
		early, _ = br.Peek(br.Buffered())
	}
	if u.nc != nil {
		defer u.close()
		defer client.Close()
		if len(early) > 0 {
			if _, err := u.nc.Write(early); err != nil {
				return
			}
		}
		up, down, err := relay.Pair(client, u.nc)
		u.proxy.logger.Debug("relay ended", keyVat, u.proxy.id, keyTarget, u.target.String(), "up", up, "down", down)
		if err != nil {
			u.proxy.logger.Warn("relay ended with an error", keyVat, u.proxy.id, keyTarget, u.target.String(), keyReason, err.Error())
		}
		return
	}
	u.streamRelay(client, early)
}

// streamRelay is the ByteStream path: client bytes are written to u.bs in
// chunks under the flow limiter; the remote's arrive at u.ds.
func (u *upstream) streamRelay(client *net.TCPConn, early []byte) {
	defer client.Close()
	defer u.close()
	u.ds.open() // the client has its answer: the remote's bytes may follow
	ctx := context.Background()
	send := func(b []byte) error {
		return u.bs.Write(ctx, func(ps schema.ByteStream_write_Params) error { return ps.SetData(b) })
	}
	up := make(chan struct{})
	go func() {
		defer close(up)
		if len(early) > 0 {
			if err := send(early); err != nil {
				return
			}
		}
		buf := make([]byte, streamChunk)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if werr := send(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				break
			}
		}
		if err := u.bs.WaitStreaming(); err != nil {
			return
		}
		fut, rel := u.bs.End(ctx, nil)
		_, _ = fut.Struct()
		rel()
	}()
	<-u.ds.done
	<-up
}

// downstream receives the remote's bytes on the stream path.
type downstream struct {
	c    *net.TCPConn
	once sync.Once
	done chan struct{}
	// The remote may speak first, and its bytes can arrive before the
	// proxy has answered the client: they wait until ready is closed
	// (open), so the client reads the 200 first.
	ready     chan struct{}
	readyOnce sync.Once
}

func newDownstream(c *net.TCPConn) *downstream {
	return &downstream{c: c, done: make(chan struct{}), ready: make(chan struct{})}
}

// open lets the remote's bytes through to the client.
func (d *downstream) open() { d.readyOnce.Do(func() { close(d.ready) }) }

func (d *downstream) Write(ctx context.Context, call schema.ByteStream_write) error {
	select {
	case <-d.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	data, err := call.Args().Data()
	if err != nil {
		return err
	}
	_, err = d.c.Write(data)
	return err
}

func (d *downstream) End(ctx context.Context, _ schema.ByteStream_end) error {
	// Not before the client has its answer: a remote that closes at once
	// would otherwise end the client's stream ahead of the 200.
	select {
	case <-d.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	_ = d.c.CloseWrite()
	d.once.Do(func() { close(d.done) })
	return nil
}

// Shutdown runs when the switchboard lets go of the stream.
func (d *downstream) Shutdown() { d.once.Do(func() { close(d.done) }) }

// tlsHandshake is the content type of a TLS handshake record, the first
// byte of every TLS client's stream.
const tlsHandshake = 0x16

// readTLSHello reads the handshake records that carry the client's
// ClientHello: one record usually, several when the client splits it (RFC
// 8446 section 5.1 allows a handshake message to span records; large
// post-quantum key shares and deliberately fragmented hellos do). It stops
// at the record that completes the message; what follows stays in br.
func readTLSHello(br *bufio.Reader) ([]byte, error) {
	var recs, msg []byte
	for {
		hdr, err := br.Peek(5)
		if err != nil {
			return nil, fmt.Errorf("reading the TLS ClientHello: %w", err)
		}
		if hdr[0] != tlsHandshake {
			if recs == nil {
				return nil, labels.Refusef("the stream to a TLS port does not start with a TLS handshake (first byte %#x)", hdr[0])
			}
			return nil, labels.Refusef("a TLS record of type %d inside the ClientHello", hdr[0])
		}
		n := int(hdr[3])<<8 | int(hdr[4])
		if n == 0 || n > maxTLSRecord {
			return nil, labels.Refusef("TLS record of %d bytes", n)
		}
		if len(recs)+5+n > maxTLSHello {
			return nil, labels.Refusef("a TLS ClientHello in more than %d bytes of records", maxTLSHello)
		}
		at := len(recs)
		recs = append(recs, make([]byte, 5+n)...)
		if _, err := io.ReadFull(br, recs[at:]); err != nil {
			return nil, fmt.Errorf("reading the TLS ClientHello: %w", err)
		}
		msg = append(msg, recs[at+5:]...)
		if len(msg) >= 4 && len(msg) >= 4+(int(msg[1])<<16|int(msg[2])<<8|int(msg[3])) {
			return recs, nil
		}
	}
}

// refuse answers a refused or failed connection.
func refuse(c net.Conn, err error) {
	if reason, ok := labels.RefusalReason(err); ok {
		answer(c, 403, "destination_ip_prohibited", labels.Refuse(reason).Error())
		return
	}
	if errors.Is(err, labels.ErrRefused) {
		answer(c, 403, "destination_ip_prohibited", labels.Refuse(err.Error()).Error())
		return
	}
	answer(c, 502, "proxy_internal_error", "egress failed: "+err.Error())
}

// answer writes a complete text answer with an RFC 9209 Proxy-Status and
// closes c.
func answer(c net.Conn, status int, errType, text string) {
	text = strings.ReplaceAll(text, "\n", " ")
	body := text + "\n"
	details := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(text)
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, statusText(status))
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\n")
	fmt.Fprintf(&b, "Proxy-Status: %s; error=%s; details=\"%s\"\r\n", proxyAgent, errType, details)
	b.WriteString("Connection: close\r\n")
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.WriteString(body)
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, b.String())
	linger(c)
}

// linger ends c once its answer is written: a half-close, then what the
// client still sends is read and dropped for a moment, so that the close
// does not reset the connection (which would lose the answer's unread
// tail) while the client is still sending.
func linger(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		_ = tc.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(tc, 1<<20))
	}
	_ = c.Close()
}
