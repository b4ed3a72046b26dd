package switchboard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"toybox/labels"
	"toybox/schema"
)

// handle is one Handle capability: labels, the peer it was made for, and
// what it made. Revoking a handle (its capability released, its connection
// closed, or a handle it derives from revoked) shuts down every connection
// it or its descendants made and makes later calls fail.
type handle struct {
	p      *peer
	labels labels.Set
	text   string // labels.String(), for the log record of each decision

	ctx    context.Context // done when revoked
	cancel context.CancelFunc

	counted bool // counts against the peer's handle limit until revoked

	mu       sync.Mutex
	revoked  bool
	children map[*handle]struct{}
	conns    map[*held]struct{}
	parent   *handle
}

// held is one connection a handle made: a socket handed over (the
// switchboard keeps this duplicate) or relayed.
type held struct {
	conn  net.Conn
	owner *handle
	// host is the host the connection was asked for (a name, or the
	// address itself): Reload judges it again.
	host    string
	fd      int    // watched by the tracker when >= 0
	trackID uint64 // the tracker's registration id
	// untracked is set (under the tracker's lock) once shut began.
	untracked bool
	once      sync.Once
	// count is the connection's count of limits.conns: shut drops it,
	// and so does the stream handed back for the connection once the
	// peer releases it.
	count *sharedConn
}

// newHandle makes a handle with labels l under parent (nil for a root).
// counted says the handle holds one count of the peer's handle limit,
// given back when it is revoked.
func (p *peer) newHandle(l labels.Set, parent *handle, counted bool) *handle {
	ctx, cancel := context.WithCancel(context.Background())
	h := &handle{
		p: p, labels: l, text: l.String(), ctx: ctx, cancel: cancel, parent: parent, counted: counted,
		children: map[*handle]struct{}{}, conns: map[*held]struct{}{},
	}
	if parent != nil {
		parent.mu.Lock()
		if parent.revoked {
			h.revoked = true
			cancel()
			if counted {
				p.releaseHandle()
			}
		} else {
			parent.children[h] = struct{}{}
		}
		parent.mu.Unlock()
	}
	return h
}

// client exports h; the caller owns the returned client.
func (h *handle) client() schema.Handle {
	return schema.Handle(h.p.export(schema.Handle_NewServer(h)))
}

// Shutdown is called by go-capnp when the last reference is released.
func (h *handle) Shutdown() { h.revoke() }

// revoke shuts down everything h and its descendants made.
func (h *handle) revoke() {
	h.mu.Lock()
	if h.revoked {
		h.mu.Unlock()
		return
	}
	h.revoked = true
	h.cancel()
	kids := h.children
	h.children = map[*handle]struct{}{}
	conns := h.conns
	h.conns = map[*held]struct{}{}
	parent := h.parent
	h.mu.Unlock()
	if h.counted {
		h.p.releaseHandle()
	}
	for c := range conns {
		c.shut()
	}
	for k := range kids {
		k.revoke()
	}
	if parent != nil {
		parent.mu.Lock()
		delete(parent.children, h)
		parent.mu.Unlock()
	}
}

// bound returns ctx, done too once h is revoked: revoke() answers at once,
// and a call in flight then (resolving, dialling) must not go on to reach
// the remote for the revoked handle. The caller must call the returned
// func.
func (h *handle) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(h.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// cut returns err, or the revocation if h was revoked meanwhile: what cut
// a call short, whatever error that made on its way (a lookup or a dial
// cancelled).
func (h *handle) cut(err error) error {
	if rerr := h.live(); rerr != nil {
		return rerr
	}
	return err
}

// live returns an error when h is revoked.
func (h *handle) live() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.revoked {
		return fmt.Errorf("%w: this handle was released, or one it derives from was", ErrRevoked)
	}
	return nil
}

// hold records c as made by h. If h is already revoked, or the deny list
// as it is now refuses c, c is shut at once and an error returned. The peer's connection count is already taken; it
// is given back when the connection is shut (and the stream handed back
// for it, if any, released).
func (h *handle) hold(c net.Conn, host string) (*held, error) {
	x := &held{conn: c, owner: h, fd: -1, host: host, count: newSharedConn(h.p)}
	srv := h.p.srv
	srv.heldMu.Lock()
	srv.helds[x] = struct{}{}
	srv.heldMu.Unlock()
	h.mu.Lock()
	if h.revoked {
		h.mu.Unlock()
		x.shut()
		return nil, fmt.Errorf("%w: this handle was released, or one it derives from was", ErrRevoked)
	}
	h.conns[x] = struct{}{}
	h.mu.Unlock()
	// Judged again under the deny list as it is now: a Reload whose pass
	// over the open connections came while this one's call was deciding
	// or dialling did not see it. Reload stores the list before its pass,
	// and c is among the connections it passes over or this sees the list.
	if why := srv.refusedNow(x); why != "" {
		x.shut()
		return nil, labels.Refuse(why + " (the deny list changed meanwhile)")
	}
	return x, nil
}

// shut shuts the connection down both ways (reaching every duplicate of
// the socket, the one handed over included), closes the switchboard's
// copy and forgets it.
func (x *held) shut() {
	x.once.Do(func() {
		x.owner.p.srv.tracker.remove(x)
		shutdownConn(x.conn)
		_ = x.conn.Close()
		x.owner.mu.Lock()
		delete(x.owner.conns, x)
		x.owner.mu.Unlock()
		srv := x.owner.p.srv
		srv.heldMu.Lock()
		delete(srv.helds, x)
		srv.heldMu.Unlock()
		x.count.drop()
	})
}

// Describe returns the handle's labels.
func (h *handle) Describe(ctx context.Context, call schema.Handle_describe) error {
	if err := h.live(); err != nil {
		return err
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	l, err := res.NewLabels()
	if err != nil {
		return err
	}
	return toSchema(l, h.labels)
}

// Revoke revokes h and everything made through it before it answers.
func (h *handle) Revoke(context.Context, schema.Handle_revoke) error {
	h.revoke()
	return nil
}

// Constrain returns a narrower handle.
func (h *handle) Constrain(ctx context.Context, call schema.Handle_constrain) error {
	if err := h.live(); err != nil {
		return err
	}
	l, err := call.Args().Labels()
	if err != nil {
		return err
	}
	narrow, err := fromSchema(l)
	if err != nil {
		h.logDecision("constrain", "", nil, "", false, err.Error())
		return fmt.Errorf("constrain: %w", err)
	}
	out, err := labels.Constrain(h.labels, narrow)
	if err != nil {
		h.logDecision("constrain", narrow.String(), nil, "", false, err.Error())
		return fmt.Errorf("constrain: %w", err)
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	if err := h.p.acquireHandle(); err != nil {
		h.logDecision("constrain", narrow.String(), nil, "", false, err.Error())
		return err
	}
	child := h.p.newHandle(out, h, true)
	h.logDecision("constrain", narrow.String(), nil, "", true, "narrowed to "+out.String())
	return res.SetHandle(child.client())
}

// Check returns the full decision without dialling.
func (h *handle) Check(ctx context.Context, call schema.Handle_check) error {
	call.Go()
	if err := h.live(); err != nil {
		return err
	}
	ctx, done := h.bound(ctx)
	defer done()
	t, err := call.Args().Target()
	if err != nil {
		return err
	}
	req, err := targetRequest(t)
	if err != nil {
		return err
	}
	d, err := h.p.srv.decide(ctx, h.labels, req)
	target := targetString(req)
	if err != nil {
		err = h.cut(err)
		h.logDecision("check", target, nil, "", false, err.Error())
		return err
	}
	vetted := ""
	if d.allow && len(d.vetted) > 0 {
		vetted = d.vetted[0].String()
		if d.local[0] {
			ap := netip.AddrPortFrom(d.vetted[0], d.req.Port)
			if ok, why := h.p.srv.loopbackCheck(ctx, ap, h.labels); !ok {
				d.allow, d.reason = false, why
			}
		}
	}
	h.logDecision("check", target, d.addrs, vetted, d.allow, d.reason)
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	dec, err := res.NewDecision()
	if err != nil {
		return err
	}
	dec.SetAllow(d.allow)
	if err := dec.SetReason(d.reason); err != nil {
		return err
	}
	if err := dec.SetVetted(vetted); err != nil {
		return err
	}
	list, err := dec.NewAddresses(int32(len(d.addrs)))
	if err != nil {
		return err
	}
	for i, a := range d.addrs {
		if err := list.Set(i, a.String()); err != nil {
			return err
		}
	}
	return nil
}

// loopbackCheck applies the configured listener-owner check.
func (s *Server) loopbackCheck(ctx context.Context, ap netip.AddrPort, h labels.Set) (bool, string) {
	if s.cfg.LoopbackCheck == nil {
		return true, ""
	}
	ok, why := s.cfg.LoopbackCheck(ctx, ap, h)
	if !ok && why == "" {
		why = fmt.Sprintf("the listener on %s is not reachable from this handle", ap)
	}
	return ok, why
}

// targetRequest reads a schema Target.
func targetRequest(t schema.Target) (labels.Request, error) {
	scheme, err := t.Scheme()
	if err != nil {
		return labels.Request{}, err
	}
	host, err := t.Host()
	if err != nil {
		return labels.Request{}, err
	}
	return labels.Request{Scheme: scheme, Host: host, Port: t.Port()}, nil
}

func targetString(r labels.Request) string {
	port := r.Port
	if port == 0 {
		port = labels.DefaultPort(r.Scheme)
	}
	return r.Scheme + "://" + net.JoinHostPort(r.Host, strconv.Itoa(int(port)))
}

// fromSchema reads and canonicalises a schema Labels.
func fromSchema(l schema.Labels) (labels.Set, error) {
	f, err := l.Fields()
	if err != nil {
		return labels.Set{}, err
	}
	return labels.Canonical(labels.Set(f))
}

func toSchema(l schema.Labels, s labels.Set) error {
	return l.SetFields(schema.LabelFields(s))
}
