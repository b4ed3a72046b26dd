package switchboard

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"toybox/labels"
	"toybox/schema"
)

// The WebSocket client is a minimal RFC 6455 implementation written here
// (not golang.org/x/net/websocket, which cannot carry close codes): one
// handshake, masked frames out, fragmented messages reassembled in,
// ping answered, close codes both ways.

const (
	wsGUID       = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
	maxWSMessage = 16 << 20
	// maxWSHandshake bounds the answer to the opening handshake (status
	// line and headers), as request()'s answers are.
	maxWSHandshake = maxResponseHeader
	// maxWSHeld bounds the message bytes all the WebSockets of one peer
	// connection hold at once (frames being read, fragments being
	// reassembled, messages waiting for the flow window): without it a
	// remote could make each of a vat's many WebSockets hold a 16 MiB
	// message and the switchboard's memory run out for every vat.
	maxWSHeld = 4 * maxWSMessage
	opCont    = 0x0
	opText    = 0x1
	opBinary  = 0x2
	opClose   = 0x8
	opPing    = 0x9
	opPong    = 0xA
)

// wsHeaderDrop are caller headers the switchboard sets itself.
var wsHeaderDrop = map[string]bool{
	"Host": true, "Upgrade": true, "Connection": true, "Sec-Websocket-Key": true,
	"Sec-Websocket-Version": true, "Sec-Websocket-Accept": true, "Sec-Websocket-Extensions": true,
	"Content-Length": true, "Transfer-Encoding": true,
}

// WebSocket opens a ws/wss connection to a vetted address and relays
// messages both ways.
func (h *handle) WebSocket(ctx context.Context, call schema.Handle_webSocket) error {
	call.Go()
	if err := h.live(); err != nil {
		return err
	}
	ctx, done := h.bound(ctx)
	defer done()
	args := call.Args()
	rawURL, err := args.Url()
	if err != nil {
		return err
	}
	fail := func(addrs []netip.Addr, vetted string, err error) error {
		err = h.cut(err)
		h.logDecision("webSocket", logURL(rawURL), addrs, vetted, false, err.Error())
		return err
	}
	if !strings.HasPrefix(rawURL, "ws://") && !strings.HasPrefix(rawURL, "wss://") {
		return fail(nil, "", labels.Refusef("webSocket takes ws or wss URLs, not %s", logURL(rawURL)))
	}
	lreq, err := labels.ParseURL(rawURL)
	if err != nil {
		return fail(nil, "", labels.Refuse(strings.TrimPrefix(err.Error(), labels.ErrBadLabel.Error()+": ")))
	}
	u, err := url.Parse(rawURL)
	if err != nil { // labels.ParseURL read it: never here
		return fail(nil, "", labels.Refuse("the URL cannot be parsed"))
	}
	// Bounded before anything loops over them (schema.MaxHeaders).
	hdrs, err := schema.ReadHeaders(args.Headers())
	if err != nil {
		return fail(nil, "", labels.Refuse(err.Error()))
	}
	header := http.Header{}
	hopOnly := connectionListed(hdrs)
	for _, hf := range hdrs {
		name, value := hf.Name, hf.Value
		// The handshake is written by hand: a name or value that is not
		// a valid HTTP field would write lines of the caller's (a second
		// Host, a whole request) to a host granted only this handshake.
		if !httpguts.ValidHeaderFieldName(name) {
			return fail(nil, "", labels.Refusef("header name %q is not a valid HTTP field name", name))
		}
		if !httpguts.ValidHeaderFieldValue(value) {
			return fail(nil, "", labels.Refusef("the value of header %s is not a valid HTTP field value", name))
		}
		k := http.CanonicalHeaderKey(name)
		if wsHeaderDrop[k] || hopHeaders[k] || hopOnly[k] {
			continue
		}
		header.Add(k, value)
	}
	if !args.Downstream().IsValid() { // null on the wire included
		return fail(nil, "", errors.New("webSocket needs a downstream MessageStream"))
	}
	d, err := h.p.srv.decide(ctx, h.labels, lreq)
	if err != nil {
		return fail(nil, "", err)
	}
	if !d.allow {
		return fail(d.addrs, "", d.err())
	}
	if err := h.p.acquireConn(); err != nil {
		return fail(d.addrs, "", err)
	}
	conn, vetted, err := h.dial(ctx, d, false)
	if err != nil {
		h.p.releaseConn()
		return fail(d.addrs, vetted, err)
	}
	x, err := h.hold(conn, d.req.Host)
	if err != nil {
		return fail(d.addrs, vetted, err)
	}
	var rw net.Conn = conn
	_ = conn.SetDeadline(time.Now().Add(h.p.srv.cfg.DialTimeout))
	if lreq.Scheme == "https" {
		cfg := h.p.srv.tlsConf.Clone()
		cfg.ServerName = d.req.Host
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			x.shut()
			return fail(d.addrs, vetted, fmt.Errorf("TLS with %s: %w", d.req.Host, err))
		}
		rw = tc
	}
	// The answer to the handshake is read under a bound (http.ReadResponse
	// has none: one endless header line took gigabytes); the frames after
	// it are bounded by maxWSMessage.
	limit := &io.LimitedReader{R: rw, N: maxWSHandshake}
	br := bufio.NewReaderSize(limit, 16<<10)
	protocol, err := wsHandshake(rw, br, u, hostHeader(lreq), header)
	if err != nil {
		x.shut()
		if limit.N <= 0 {
			err = fmt.Errorf("websocket: the handshake's answer is over %d bytes", maxWSHandshake)
		}
		return fail(d.addrs, vetted, err)
	}
	limit.N = math.MaxInt64
	_ = conn.SetDeadline(time.Time{})

	ws := &wsConn{p: h.p, x: x, rw: rw, br: br, down: args.Downstream().AddRef()}
	ws.down.SetFlowLimiter(h.p.streamFlow())
	res, err := call.AllocResults()
	if err != nil {
		ws.down.Release()
		x.shut()
		return err
	}
	if err := res.SetProtocol(protocol); err != nil {
		ws.down.Release()
		x.shut()
		return err
	}
	x.count.keep() // until the peer releases the upstream (wsUpstream.Shutdown)
	up := schema.MessageStream(h.p.export(schema.MessageStream_NewServer(&wsUpstream{ws: ws})))
	if err := res.SetUpstream(up); err != nil {
		up.Release()
		ws.down.Release()
		x.shut()
		return err
	}
	h.logDecision("webSocket", logURL(rawURL), d.addrs, vetted, true, d.reason)
	go ws.readLoop()
	return nil
}

// wsHandshake performs the client opening handshake and returns the
// protocol the server chose.
func wsHandshake(w io.Writer, br *bufio.Reader, u *url.URL, host string, header http.Header) (string, error) {
	var kb [16]byte
	if _, err := rand.Read(kb[:]); err != nil {
		return "", err
	}
	key := base64.StdEncoding.EncodeToString(kb[:])
	path := u.RequestURI()
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n", path, host, key)
	for k, vs := range header {
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") {
				return "", fmt.Errorf("header %s has a line break", k)
			}
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return "", fmt.Errorf("sending the WebSocket handshake: %w", err)
	}
	req := &http.Request{Method: http.MethodGet}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return "", fmt.Errorf("reading the WebSocket handshake answer: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return "", fmt.Errorf("WebSocket upgrade refused by the server: %s", resp.Status)
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") || !headerHasToken(resp.Header, "Connection", "upgrade") {
		return "", errors.New("WebSocket upgrade: the server did not switch to websocket")
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	if resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		return "", errors.New("WebSocket upgrade: wrong Sec-WebSocket-Accept")
	}
	if resp.Header.Get("Sec-WebSocket-Extensions") != "" {
		return "", errors.New("WebSocket upgrade: the server chose an extension that was not offered")
	}
	chosen := resp.Header.Get("Sec-WebSocket-Protocol")
	if chosen != "" && !offered(header, chosen) {
		// RFC 6455 4.1: a subprotocol the client did not offer fails the
		// connection.
		return "", fmt.Errorf("WebSocket upgrade: the server chose the subprotocol %q, which was not offered", chosen)
	}
	return chosen, nil
}

// offered reports whether the handshake sent offered the subprotocol p
// (tokens are compared exactly).
func offered(sent http.Header, p string) bool {
	for _, v := range sent.Values("Sec-WebSocket-Protocol") {
		for _, t := range strings.Split(v, ",") {
			if strings.TrimSpace(t) == p {
				return true
			}
		}
	}
	return false
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// wsConn is one WebSocket connection.
type wsConn struct {
	p    *peer
	held int64 // message bytes this connection holds of p's maxWSHeld (read loop only)
	x    *held
	rw   net.Conn
	br   *bufio.Reader
	down schema.MessageStream // owned; released when the read loop ends

	wmu        sync.Mutex
	closeSent  bool
	closedOnce sync.Once
}

// writeFrame writes one masked frame.
func (w *wsConn) writeFrame(op byte, payload []byte) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.closeSent {
		return errors.New("websocket: close already sent")
	}
	if op == opClose {
		w.closeSent = true
	}
	hdr := make([]byte, 0, 14)
	hdr = append(hdr, 0x80|op)
	n := len(payload)
	switch {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n <= 0xffff:
		hdr = append(hdr, 0x80|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	var mask [4]byte
	if _, err := rand.Read(mask[:]); err != nil {
		return err
	}
	hdr = append(hdr, mask[:]...)
	buf := make([]byte, len(hdr)+n)
	copy(buf, hdr)
	for i, c := range payload {
		buf[len(hdr)+i] = c ^ mask[i&3]
	}
	_, err := w.rw.Write(buf)
	return err
}

// readFrame reads one frame from the server (which must not mask).
func (w *wsConn) readFrame() (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(w.br, h[:]); err != nil {
		return
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0f
	if h[0]&0x70 != 0 {
		return false, 0, nil, errors.New("websocket: reserved bits set")
	}
	if h[1]&0x80 != 0 {
		return false, 0, nil, errors.New("websocket: the server masked a frame")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(w.br, b[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(w.br, b[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if op >= opClose && (n > 125 || !fin) {
		return false, 0, nil, errors.New("websocket: bad control frame")
	}
	if n > maxWSMessage {
		return false, 0, nil, fmt.Errorf("websocket: frame of %d bytes over the %d limit", n, maxWSMessage)
	}
	// Grown as the bytes come, not allocated whole from the length the
	// remote declares, and held against the peer's maxWSHeld as they do.
	hb := &heldBuffer{w: w}
	hb.buf.Grow(int(min(n, 64<<10)))
	if _, err = io.CopyN(hb, w.br, int64(n)); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return false, 0, nil, err
	}
	payload = hb.buf.Bytes()
	return
}

// heldBuffer is a frame's payload, each byte held of the peer's
// maxWSHeld before it is taken.
type heldBuffer struct {
	w   *wsConn
	buf bytes.Buffer
}

func (b *heldBuffer) Write(p []byte) (int, error) {
	if err := b.w.p.holdWS(int64(len(p))); err != nil {
		return 0, err
	}
	b.w.held += int64(len(p))
	return b.buf.Write(p)
}

// letGo gives back n bytes this connection held.
func (w *wsConn) letGo(n int) {
	w.held -= int64(n)
	w.p.releaseWS(int64(n))
}

// readLoop relays the server's messages downstream.
func (w *wsConn) readLoop() {
	ctx := context.Background()
	defer w.finish()
	var msg []byte
	var msgOp byte
	for {
		fin, op, payload, err := w.readFrame()
		if err != nil {
			code := uint16(1006)
			if errors.Is(err, ErrLimit) {
				code = 1009 // message too big
			}
			w.closeDown(ctx, code, err.Error())
			return
		}
		if op >= opClose {
			w.letGo(len(payload)) // a control frame is at most 125 bytes, used at once
		}
		switch op {
		case opPing:
			_ = w.writeFrame(opPong, payload)
			continue
		case opPong:
			continue
		case opClose:
			code, reason := uint16(1005), ""
			if len(payload) >= 2 {
				code, reason = binary.BigEndian.Uint16(payload), string(payload[2:])
			}
			_ = w.writeFrame(opClose, payload[:min(len(payload), 2)])
			w.closeDown(ctx, code, reason)
			return
		case opText, opBinary:
			if msg != nil {
				w.closeDown(ctx, 1002, "new message inside a fragmented one")
				return
			}
			msgOp, msg = op, payload
		case opCont:
			if msg == nil {
				w.closeDown(ctx, 1002, "continuation without a message")
				return
			}
			if len(msg)+len(payload) > maxWSMessage {
				w.closeDown(ctx, 1009, "message too big")
				return
			}
			msg = append(msg, payload...)
		default:
			w.closeDown(ctx, 1002, fmt.Sprintf("unknown opcode %d", op))
			return
		}
		if !fin {
			continue
		}
		data, binaryMsg := msg, msgOp == opBinary
		msg = nil
		err = w.down.Send(ctx, func(p schema.MessageStream_send_Params) error {
			p.SetBinary(binaryMsg)
			return p.SetData(data)
		})
		w.letGo(len(data)) // copied into the call, which the flow window bounds
		if err != nil {
			return
		}
	}
}

// closeDown ends the read loop's side: what it held is given back at once
// (not after the close call's round trip, while the vat's other WebSockets
// may need it), then the caller is told.
func (w *wsConn) closeDown(ctx context.Context, code uint16, reason string) {
	w.letGo(int(w.held))
	w.closedOnce.Do(func() {
		if w.down.WaitStreaming() != nil {
			return
		}
		f, release := w.down.Close(ctx, func(p schema.MessageStream_close_Params) error {
			p.SetCode(code)
			return p.SetReason(reason)
		})
		_, _ = f.Struct()
		release()
	})
}

func (w *wsConn) finish() {
	w.letGo(int(w.held))
	w.down.Release()
	w.x.shut()
}

// wsUpstream is the MessageStream the caller sends messages to.
type wsUpstream struct {
	ws   *wsConn
	once sync.Once
}

// Send writes one message (in order; no call.Go).
func (u *wsUpstream) Send(ctx context.Context, call schema.MessageStream_send) error {
	data, err := call.Args().Data()
	if err != nil {
		return err
	}
	op := byte(opText)
	if call.Args().Binary() {
		op = opBinary
	}
	if err := u.ws.writeFrame(op, data); err != nil {
		return fmt.Errorf("websocket send: %w", err)
	}
	return nil
}

// Close sends a close frame with the caller's code and reason.
func (u *wsUpstream) Close(ctx context.Context, call schema.MessageStream_close) error {
	code := call.Args().Code()
	reason, _ := call.Args().Reason()
	if len(reason) > 123 {
		reason = reason[:123]
	}
	if code == 0 {
		code = 1000
	}
	payload := binary.BigEndian.AppendUint16(nil, code)
	payload = append(payload, reason...)
	u.once.Do(func() { _ = u.ws.writeFrame(opClose, payload) })
	return nil
}

// Shutdown without Close ends the connection with 1001 (going away). The
// connection's count is given back once it is shut too.
func (u *wsUpstream) Shutdown() {
	u.once.Do(func() { _ = u.ws.writeFrame(opClose, binary.BigEndian.AppendUint16(nil, 1001)) })
	u.ws.x.count.drop()
}
