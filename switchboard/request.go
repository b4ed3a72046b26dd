package switchboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"toybox/labels"
	"toybox/schema"
)

// maxResponseHeader bounds the status line and header of an answer (a
// request()'s, a WebSocket handshake's). The switchboard holds a parsed
// header, and then its copy in the message to the caller, until the
// caller's responder takes it (up to Config.ResponderTimeout): at 1 MiB, 200
// requests whose server sent 1 MiB of header held 240 MiB, one vat's
// default limits.conns some 2.4 GiB and limits.totalConns ten. 64 KiB is
// four times Node.js's default bound, and well over the 4-8 KiB nginx
// buffers a proxied answer's header in by default.
const maxResponseHeader = 64 << 10

// vettedKey carries the decision of one request into the transport's dial.
type vettedKey struct{}

// vettedDial is what the transport may dial for one request.
type vettedDial struct {
	h      *handle
	d      *decision
	mu     sync.Mutex
	vetted string
	held   *held
}

// newTransport returns the Server's HTTP transport: it dials only the
// address decided for the request, speaks TLS with the system roots plus
// RootCAs, never uses a proxy, and keeps no idle connections (a pooled
// connection would outlive the decision that vetted it).
func (s *Server) newTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			v, ok := ctx.Value(vettedKey{}).(*vettedDial)
			if !ok {
				return nil, labels.Refusef("no decision for a dial to %s", addr)
			}
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if p, _ := strconv.Atoi(port); !strings.EqualFold(strings.Trim(host, "[]"), v.d.req.Host) || p != int(v.d.req.Port) {
				return nil, labels.Refusef("dial to %s does not match the decision for %s", addr, v.d.req.Host)
			}
			return v.dial(ctx)
		},
		TLSClientConfig:        s.tlsConf.Clone(),
		DisableKeepAlives:      true,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
		TLSHandshakeTimeout:    s.cfg.DialTimeout,
		ResponseHeaderTimeout:  0,
		MaxResponseHeaderBytes: maxResponseHeader,
	}
}

// dial dials the vetted address and holds the connection on the handle.
func (v *vettedDial) dial(ctx context.Context) (net.Conn, error) {
	if err := v.h.p.acquireConn(); err != nil {
		return nil, err
	}
	c, vetted, err := v.h.dial(ctx, v.d, false)
	v.mu.Lock()
	v.vetted = vetted
	v.mu.Unlock()
	if err != nil {
		v.h.p.releaseConn()
		return nil, err
	}
	x, err := v.h.hold(c, v.d.req.Host)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.held = x
	v.mu.Unlock()
	return &heldConn{Conn: c, x: x}, nil
}

// heldConn gives the count back when the transport closes it.
type heldConn struct {
	net.Conn
	x *held
}

func (c *heldConn) Close() error { c.x.shut(); return nil }

// hopHeaders are not forwarded in either direction.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// connectionNames are the fields a Connection header names (RFC 9110
// section 7.6.1): options for one hop, never forwarded past it, in either
// direction (a credential the caller meant for its proxy does not reach
// the remote; a field the remote meant for its next hop does not reach
// the caller).
func connectionNames(values []string) map[string]bool {
	names := map[string]bool{}
	for _, v := range values {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				names[http.CanonicalHeaderKey(name)] = true
			}
		}
	}
	return names
}

// connectionListed returns the names the caller's Connection headers list.
func connectionListed(hdrs []schema.HeaderField) map[string]bool {
	var values []string
	for _, h := range hdrs {
		if http.CanonicalHeaderKey(h.Name) == "Connection" {
			values = append(values, h.Value)
		}
	}
	return connectionNames(values)
}

// Request performs one HTTP(S) request: decided before it returns; the
// caller writes the body to the returned stream; the answer goes to the
// responder.
func (h *handle) Request(ctx context.Context, call schema.Handle_request) error {
	call.Go()
	if err := h.live(); err != nil {
		return err
	}
	ctx, done := h.bound(ctx)
	defer done()
	args := call.Args()
	method, err := args.Method()
	if err != nil {
		return err
	}
	rawURL, err := args.Url()
	if err != nil {
		return err
	}
	fail := func(addrs []netip.Addr, err error) error {
		err = h.cut(err)
		h.logDecision("request", logURL(rawURL), addrs, "", false, err.Error())
		return err
	}
	if !validMethod(method) {
		return fail(nil, fmt.Errorf("bad HTTP method %q", method))
	}
	lreq, err := labels.ParseURL(rawURL)
	if err != nil {
		return fail(nil, labels.Refuse(strings.TrimPrefix(err.Error(), labels.ErrBadLabel.Error()+": ")))
	}
	if strings.HasPrefix(rawURL, "ws") {
		return fail(nil, labels.Refusef("request takes http or https URLs; use webSocket for %s", logURL(rawURL)))
	}
	// Bounded before anything loops over them (schema.MaxHeaders).
	hdrs, err := schema.ReadHeaders(args.Headers())
	if err != nil {
		return fail(nil, labels.Refuse(err.Error()))
	}
	header := http.Header{}
	var contentLength int64 = -1
	hopOnly := connectionListed(hdrs)
	for _, hf := range hdrs {
		value := hf.Value
		k := http.CanonicalHeaderKey(hf.Name)
		switch {
		case k == "Host":
			want := hostHeader(lreq)
			if !strings.EqualFold(value, want) && !strings.EqualFold(value, lreq.Host) {
				return fail(nil, labels.Refusef("Host header %q does not match the URL's host %s", value, want))
			}
			continue
		case k == "Content-Length":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || n < 0 {
				return fail(nil, fmt.Errorf("bad Content-Length %q", value))
			}
			contentLength = n
			continue
		case hopHeaders[k] || hopOnly[k]:
			continue
		}
		header.Add(k, value)
	}
	d, err := h.p.srv.decide(ctx, h.labels, lreq)
	if err != nil {
		return fail(nil, err)
	}
	if !d.allow {
		return fail(d.addrs, d.err())
	}
	if !args.Responder().IsValid() { // null on the wire included
		return fail(d.addrs, errors.New("request needs a responder"))
	}
	// The request counts as one of the peer's connections until its
	// answer has gone to the responder and the peer has released the body
	// stream (its TCP connection counts as another while open): the call
	// returns at once, and a peer could otherwise leave any number of
	// requests waiting on its responder, or of bodies, each a server with
	// a goroutine, held.
	if err := h.p.acquireConn(); err != nil {
		return fail(d.addrs, err)
	}
	slot := newSharedConn(h.p)
	responder := args.Responder().AddRef()

	// The request body: what the caller writes to the returned stream.
	pr, pw := io.Pipe()
	var body io.ReadCloser = pr
	if contentLength == 0 || (contentLength < 0 && noBodyMethod(method)) {
		body = http.NoBody
	}
	rctx, cancel := context.WithCancel(h.ctx)
	hreq, err := http.NewRequestWithContext(rctx, method, rawURL, body)
	if err != nil {
		cancel()
		responder.Release()
		slot.drop()
		return fail(d.addrs, fmt.Errorf("building the request: %w", err))
	}
	// The request goes to the canonical host the decision was made for
	// (lower case, A-labels), whatever the caller's spelling.
	hreq.URL.Host = hostHeader(d.req)
	hreq.Host = hreq.URL.Host
	hreq.Header = header
	hreq.ContentLength = contentLength
	if body == http.NoBody {
		hreq.ContentLength = 0
	}
	vd := &vettedDial{h: h, d: d}
	hreq = hreq.WithContext(context.WithValue(rctx, vettedKey{}, vd))

	res, err := call.AllocResults()
	if err != nil {
		cancel()
		responder.Release()
		slot.drop()
		return err
	}
	slot.keep() // until the peer releases the body (bodyStream.Shutdown)
	bs := &bodyStream{w: pw, noBody: body == http.NoBody, slot: slot}
	bc := schema.ByteStream(h.p.export(schema.ByteStream_NewServer(bs)))
	if err := res.SetBody(bc); err != nil {
		bc.Release()
		cancel()
		responder.Release()
		slot.drop()
		return err
	}
	h.logDecision("request", logURL(rawURL), d.addrs, firstVetted(d), true, d.reason)
	go h.roundTrip(hreq, cancel, responder, pr, slot)
	return nil
}

// roundTrip sends hreq and delivers the answer to responder (owned); it
// drops its keep of the slot Request took.
func (h *handle) roundTrip(hreq *http.Request, cancel context.CancelFunc, responder schema.Responder, pr *io.PipeReader, slot *sharedConn) {
	defer slot.drop()
	defer cancel()
	defer responder.Release()
	// A caller that never takes the outcome does not keep the request
	// (and its slot) past Config.ResponderTimeout.
	ctx := context.Background()
	wait := h.p.srv.cfg.ResponderTimeout
	resp, err := h.p.srv.http.RoundTrip(hreq)
	if err != nil {
		_ = pr.CloseWithError(err)
		fctx, fcancel := context.WithTimeout(ctx, wait)
		defer fcancel()
		f, release := responder.Fail(fctx, func(p schema.Responder_fail_Params) error {
			return p.SetMessage_(fmt.Sprintf("request to %s failed: %v", hreq.URL.Host, err))
		})
		_, _ = f.Struct()
		release()
		return
	}
	defer resp.Body.Close()
	sctx, scancel := context.WithTimeout(ctx, wait)
	defer scancel()
	hopOnly := connectionNames(resp.Header["Connection"])
	for k := range resp.Header {
		if hopHeaders[k] || hopOnly[k] {
			delete(resp.Header, k)
		}
	}
	f, release := responder.Start(sctx, func(p schema.Responder_start_Params) error {
		p.SetStatus(uint16(resp.StatusCode))
		n := 0
		for _, vs := range resp.Header {
			n += len(vs)
		}
		list, err := p.NewHeaders(int32(n))
		if err != nil {
			return err
		}
		i := 0
		for k, vs := range resp.Header {
			for _, v := range vs {
				if err := list.At(i).SetName(k); err != nil {
					return err
				}
				if err := list.At(i).SetValue(v); err != nil {
					return err
				}
				i++
			}
		}
		return nil
	})
	defer release()
	r, err := f.Struct()
	if err != nil {
		return
	}
	out := r.Body().AddRef()
	defer out.Release()
	if !out.IsValid() {
		return // the responder took the start and no body: it goes nowhere
	}
	out.SetFlowLimiter(h.p.streamFlow())
	buf := make([]byte, chunkSize)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			data := buf[:n]
			if err := out.Write(ctx, func(p schema.ByteStream_write_Params) error { return p.SetData(data) }); err != nil {
				return
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) && out.WaitStreaming() == nil {
				_, rel := out.End(ctx, nil)
				rel()
			}
			return
		}
	}
}

// bodyStream is the request body stream the caller writes to.
type bodyStream struct {
	w      *io.PipeWriter
	noBody bool
	once   sync.Once
	slot   *sharedConn // the request's count, kept until Shutdown
}

func (b *bodyStream) Write(ctx context.Context, call schema.ByteStream_write) error {
	data, err := call.Args().Data()
	if err != nil {
		return err
	}
	if b.noBody {
		if len(data) == 0 {
			return nil
		}
		return errors.New("this request has no body (no Content-Length, and a method without one)")
	}
	if _, err := b.w.Write(data); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

func (b *bodyStream) End(ctx context.Context, call schema.ByteStream_end) error {
	b.once.Do(func() { _ = b.w.Close() })
	return nil
}

// Shutdown without End aborts the body. The request's count is given
// back once its answer is delivered too.
func (b *bodyStream) Shutdown() {
	b.once.Do(func() { _ = b.w.CloseWithError(errors.New("request body stream released before end")) })
	b.slot.drop()
}

func firstVetted(d *decision) string {
	if len(d.vetted) == 0 {
		return ""
	}
	return netip.AddrPortFrom(d.vetted[0], d.req.Port).String()
}

func hostHeader(r labels.Request) string {
	h := r.Host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if r.Port != labels.DefaultPort(r.Scheme) {
		h += ":" + strconv.Itoa(int(r.Port))
	}
	return h
}

func validMethod(m string) bool {
	if m == "" || len(m) > 32 {
		return false
	}
	for _, c := range m {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return m != "CONNECT"
}

func noBodyMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "DELETE", "OPTIONS", "TRACE":
		return true
	}
	return false
}
