package switchboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
)

// Connect opens a TCP stream to a vetted address and hands it over: the
// socket itself (wantFd), or a ByteStream pair.
func (h *handle) Connect(ctx context.Context, call schema.Handle_connect) error {
	call.Go()
	if err := h.live(); err != nil {
		return err
	}
	ctx, done := h.bound(ctx)
	defer done()
	args := call.Args()
	t, err := args.Target()
	if err != nil {
		return err
	}
	req, err := targetRequest(t)
	if err != nil {
		return err
	}
	target := targetString(req)
	hello, err := args.TlsHello()
	if err != nil {
		return err
	}
	fail := func(addrs []netip.Addr, vetted string, err error) error {
		err = h.cut(err)
		h.logDecision("connect", target, addrs, vetted, false, err.Error())
		return err
	}
	switch req.Scheme {
	case "tcp":
		if len(hello) > 0 {
			return fail(nil, "", labels.Refuse("tlsHello is only for scheme https; scheme tcp carries no hello"))
		}
	case "https":
		if len(hello) == 0 {
			return fail(nil, "", labels.Refuse("an https connect must carry the stream's TLS ClientHello in tlsHello"))
		}
	default:
		return fail(nil, "", labels.Refusef("connect takes scheme tcp or https, not %q", req.Scheme))
	}
	d, err := h.p.srv.decide(ctx, h.labels, req)
	if err != nil {
		return fail(nil, "", err)
	}
	if !d.allow {
		return fail(d.addrs, "", d.err())
	}
	if req.Scheme == "https" {
		if err := checkHello(hello, d.req.Host); err != nil {
			return fail(d.addrs, "", err)
		}
	}
	// Each step below that takes something registers its release; an early
	// return releases them all, last first.
	var undo cleanup
	defer undo.run()
	wantFd := args.WantFd()
	var down schema.ByteStream
	if !wantFd {
		// A capability null on the wire is absent too: a flow limiter set
		// on it dereferences nothing.
		if !args.Downstream().IsValid() {
			return fail(d.addrs, "", errors.New("connect without wantFd needs a downstream ByteStream"))
		}
		down = args.Downstream().AddRef()
		undo.add(down.Release)
	}
	if err := h.p.acquireConn(); err != nil {
		return fail(d.addrs, "", err)
	}
	// The socket and its count are released here until hold takes them.
	var sock cleanup
	undo.add(sock.run)
	sock.add(h.p.releaseConn)
	// A ClientHello is written here with a deadline, which only a socket in
	// the runtime's poller keeps: the lean dial is for sockets handed over
	// untouched.
	// A caller whose own connect was non-blocking may take the socket
	// with its handshake under way: then one vetted address only (no
	// fallback to try after a failure it would see itself).
	inProgress := wantFd && len(hello) == 0 && args.InProgress() && len(d.vetted) == 1
	conn, vetted, err := h.dialMode(ctx, d, wantFd && len(hello) == 0, inProgress)
	if err != nil {
		return fail(d.addrs, vetted, err)
	}
	sock.add(func() { _ = conn.Close() })
	// Held before the ClientHello is sent: revoking the handle shuts the
	// connection, so no byte of the caller's leaves once revoke() answered.
	x, err := h.hold(conn, d.req.Host)
	sock.release() // hold took the socket and its count, even when it failed
	if err != nil {
		return fail(d.addrs, vetted, err)
	}
	undo.add(x.shut)
	if len(hello) > 0 {
		_ = conn.SetWriteDeadline(time.Now().Add(h.p.srv.cfg.DialTimeout))
		if _, err := conn.Write(hello); err != nil {
			return fail(d.addrs, vetted, fmt.Errorf("sending the ClientHello to %s: %w", vetted, err))
		}
		_ = conn.SetWriteDeadline(time.Time{})
		if err := awaitServerHello(conn, time.Now().Add(h.p.srv.cfg.DialTimeout)); err != nil {
			return fail(d.addrs, vetted, err)
		}
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	if wantFd {
		// A caller that gave up meanwhile would never take the socket;
		// unclaimed, it would count against its connection's limit.
		if err := ctx.Err(); err != nil {
			return fail(d.addrs, vetted, fmt.Errorf("the caller gave up before the socket was handed over: %w", err))
		}
		seq, err := h.handOver(x)
		if err != nil {
			return fail(d.addrs, vetted, err)
		}
		res.SetFd(seq)
	} else {
		r := &relay{x: x, down: down}
		down.SetFlowLimiter(h.p.streamFlow())
		x.count.keep() // until the peer releases up (upstream.Shutdown)
		up := schema.ByteStream(h.p.export(schema.ByteStream_NewServer(&upstream{r: r})))
		if err := res.SetUpstream(up); err != nil {
			up.Release()
			return err
		}
		go r.pump()
	}
	undo.release() // the socket is handed over, or the relay owns it
	h.logDecision("connect", target, d.addrs, vetted, true, d.reason)
	return nil
}

// checkHello requires hello to be a ClientHello whose SNI is host (when
// host is a name); an IP literal target takes no SNI. A hello that carries
// an encrypted ClientHello (ECH) or encrypted SNI is refused: a front
// shared by many names would serve the one inside, which the switchboard
// cannot read, whatever the outer SNI says. That refuses ECH GREASE too
// (a client sending it with no ECH config at hand), which cannot be told
// from the real thing.
func checkHello(hello []byte, host string) error {
	sni, encrypted, err := parseClientHello(hello)
	if err != nil {
		return labels.Refusef("the stream does not open with a valid TLS ClientHello: %v", err)
	}
	if encrypted != 0 {
		what := "encrypted_client_hello"
		switch {
		case encrypted == extESNI:
			what = "encrypted_server_name (ESNI, ECH's earlier draft)"
		case encrypted != extECH:
			what = fmt.Sprintf("encrypted_client_hello of an ECH draft (extension %#x)", encrypted)
		}
		return labels.Refusef("the ClientHello carries %s: an encrypted ClientHello (ECH) hides the name the grant is for; connect with ECH off (ECH GREASE included)", what)
	}
	if _, isIP := parseLiteral(host); isIP {
		if sni != "" {
			return labels.Refusef("the ClientHello names %q but the target is the address %s", sni, host)
		}
		return nil
	}
	if sni == "" {
		return labels.Refusef("the ClientHello names no server (SNI); it must name %s", host)
	}
	c, err := labels.CanonicalHost(sni)
	if err != nil || c != host {
		return labels.Refusef("the ClientHello names %q, not %s", sni, host)
	}
	return nil
}

// dial connects to the first vetted address that answers, after the
// loopback check for addresses of this host. It never resolves.
// dial connects to the first vetted address that answers. A socket that
// will be handed over (handOver) is dialled the lean way; one the
// switchboard relays itself is a net.TCPConn.
func (h *handle) dial(ctx context.Context, d *decision, handOver bool) (net.Conn, string, error) {
	return h.dialMode(ctx, d, handOver, false)
}

// dialMode is dial; with inProgress (and handOver) a connect still under
// way is not waited for (startHandOver).
func (h *handle) dialMode(ctx context.Context, d *decision, handOver, inProgress bool) (net.Conn, string, error) {
	var errs []error
	for i, a := range d.vetted {
		ap := netip.AddrPortFrom(a, d.req.Port)
		if d.local[i] {
			if ok, why := h.p.srv.loopbackCheck(ctx, ap, h.labels); !ok {
				return nil, ap.String(), labels.Refuse(why)
			}
		}
		var c net.Conn
		var err error
		switch {
		case handOver && inProgress:
			c, err = startHandOver(ctx, ap, h.p.srv.cfg.DialTimeout)
		case handOver:
			c, err = dialHandOver(ctx, ap, h.p.srv.cfg.DialTimeout)
		default:
			c, err = h.p.srv.dialer.DialContext(ctx, "tcp", ap.String())
		}
		if err == nil {
			return c, ap.String(), nil
		}
		errs = append(errs, err)
	}
	return nil, "", fmt.Errorf("connecting to %s: %w", d.req.Host, errors.Join(errs...))
}

// handOver queues a duplicate of x's socket on the peer's connection and
// watches the switchboard's copy; it returns the descriptor's sequence
// number.
func (h *handle) handOver(x *held) (uint64, error) {
	sc, ok := x.conn.(syscall.Conn)
	if !ok {
		return 0, errors.New("handing over: not a socket connection")
	}
	// The duplicate is taken before the watch starts: a socket the remote
	// has reset already is reported at once, and the watch closes the
	// switchboard's copy, maybe before a later duplicate could be taken.
	// The caller then gets a socket that shows the reset, as it would
	// have without the switchboard.
	// The duplicate is in blocking mode: the receiver gets it as a freshly
	// accepted socket comes. The switchboard does no I/O on its own copy
	// after this point.
	blocking := false
	if b, ok := x.conn.(interface{ isBlocking() bool }); ok {
		blocking = b.isBlocking()
	}
	fd, err := wire.DupConn(sc, !blocking)
	if err != nil {
		return 0, fmt.Errorf("passing the socket: %w", err)
	}
	if err := h.p.srv.tracker.add(x); err != nil {
		_ = unix.Close(fd)
		return 0, fmt.Errorf("watching the handed-over socket: %w", err)
	}
	return h.p.wc.SendOwnedFD(fd), nil
}

// relay carries a connection over a ByteStream pair.
type relay struct {
	x    *held
	down schema.ByteStream // owned; released when the pump ends

	mu       sync.Mutex
	downDone bool
	upDone   bool
}

// pump copies the remote's bytes to down, then ends it.
func (r *relay) pump() {
	ctx := context.Background()
	buf := make([]byte, chunkSize)
	var err error
	for {
		var n int
		n, err = r.x.conn.Read(buf)
		if n > 0 {
			data := buf[:n]
			if werr := r.down.Write(ctx, func(p schema.ByteStream_write_Params) error { return p.SetData(data) }); werr != nil {
				err = werr
				break
			}
		}
		if err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) {
		if r.down.WaitStreaming() == nil {
			_, release := r.down.End(ctx, nil)
			release()
		}
	}
	r.down.Release()
	r.finish(true)
}

func (r *relay) finish(down bool) {
	r.mu.Lock()
	if down {
		r.downDone = true
	} else {
		r.upDone = true
	}
	both := r.downDone && r.upDone
	r.mu.Unlock()
	if both {
		r.x.shut()
	}
}

// upstream is the ByteStream the caller writes its bytes to.
type upstream struct {
	r    *relay
	once sync.Once
}

// Write sends bytes to the remote. It runs in order (no call.Go).
func (u *upstream) Write(ctx context.Context, call schema.ByteStream_write) error {
	data, err := call.Args().Data()
	if err != nil {
		return err
	}
	if _, err := u.r.x.conn.Write(data); err != nil {
		return fmt.Errorf("writing to the remote: %w", err)
	}
	return nil
}

// End half-closes the connection towards the remote.
func (u *upstream) End(ctx context.Context, call schema.ByteStream_end) error {
	u.end()
	return nil
}

// Shutdown runs when the caller releases the stream: as End, and the
// connection's count is given back once it is shut too.
func (u *upstream) Shutdown() {
	u.end()
	u.r.x.count.drop()
}

func (u *upstream) end() {
	u.once.Do(func() {
		if tc, ok := u.r.x.conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		u.r.finish(false)
	})
}
