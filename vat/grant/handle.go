package grant

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
)

// handleServer is a vat's egress Handle: the union of its members, each a
// label set the supervisor's root handle is constrained to. It lives on the
// connection it was handed out on (down), where connected sockets go.
type handleServer struct {
	v    *Vat
	down *wire.Conn
	// narrow are the labels of each constrain that made this handle,
	// in order (none: the vat's own Handle). Its members are the vat's
	// current members narrowed by each: a grant changed by SetGrants
	// applies to every narrowing already handed out.
	narrow []labels.Set
	// entry: down is toybox-entry's connection, which may hold the
	// connected socket itself. Any other peer gets a relayed one
	// (relayed).
	entry bool

	mu      sync.Mutex
	gen     uint64       // the vat's generation members was made from
	members []labels.Set // nil until first asked, or when none is left
	why     error        // why no member is left
	// held are the switchboard handles of a narrowing's members
	// (Vat.hold), kept until go-capnp shuts it down.
	held []*upstreamEntry
}

// narrowedHandle returns a Handle made by constrain: the switchboard
// handles of its members are kept while it lives.
func (v *Vat) narrowedHandle(down *wire.Conn, narrow []labels.Set, members []labels.Set, gen uint64, entry bool) schema.Handle {
	h := &handleServer{v: v, down: down, narrow: narrow, entry: entry, gen: gen, members: members, held: v.hold(members)}
	return schema.Handle_ServerToClient(h)
}

// Shutdown is called by go-capnp once the last reference is released (or
// the connection it lives on ends) and every call on it has returned.
func (h *handleServer) Shutdown() {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	h.v.drop(held)
}

// current returns the handle's members under the vat's grant as it is
// now, or why none is left.
func (h *handleServer) current() ([]labels.Set, error) {
	vm, gen := h.v.current()
	if len(h.narrow) == 0 {
		return vm, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen == gen && (h.members != nil || h.why != nil) {
		return h.members, h.why
	}
	ms, why := narrowAll(vm, h.narrow)
	old := h.held
	h.gen, h.members, h.why, h.held = gen, ms, why, h.v.hold(ms)
	h.v.drop(old)
	return ms, why
}

// narrowAll narrows members by each of narrow in turn, dropping the
// members a narrowing conflicts with.
func narrowAll(members, narrow []labels.Set) ([]labels.Set, error) {
	ms := members
	for _, n := range narrow {
		var kept []labels.Set
		var firstErr error
		for _, m := range ms {
			c, err := labels.Constrain(m, n)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			kept = append(kept, c)
		}
		if len(kept) == 0 {
			if firstErr == nil {
				firstErr = errors.New("the vat has no grant")
			}
			return nil, fmt.Errorf("constrain %s: %w", n, firstErr)
		}
		ms = kept
	}
	return ms, nil
}

// Describe returns the labels every member shares (for a single grant, its
// labels): a truthful description of what the union may reach at most.
func (h *handleServer) Describe(_ context.Context, call schema.Handle_describe) error {
	if err := h.v.checkLive(); err != nil {
		return err
	}
	ms, err := h.current()
	if err != nil {
		return labels.Refusef("the vat's grant no longer admits this handle (%w)", err)
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	l, err := res.NewLabels()
	if err != nil {
		return err
	}
	return toSchema(l, common(ms))
}

func common(ms []labels.Set) labels.Set {
	c := ms[0]
	for _, m := range ms[1:] {
		if m.Scheme != c.Scheme {
			c.Scheme = ""
		}
		if m.Host != c.Host {
			c.Host = ""
		}
		if m.Port != c.Port {
			c.Port = 0
		}
		if m.Network != c.Network {
			c.Network = ""
		}
		if m.Vat != c.Vat {
			c.Vat = ""
		}
		if m.Origin != c.Origin {
			c.Origin = "" // at most: a typed member reaches what a manifest one does not
		}
	}
	if c.Port == 0 && labels.DefaultPort(c.Scheme) != 0 {
		// https with no port means 443 (labels.Canonical): members on
		// different ports share no port, so they share no scheme that
		// can be said either.
		c.Scheme = ""
	}
	return c
}

// Constrain narrows every member and drops the members the labels conflict
// with; when none is left, the narrowing is an error.
func (h *handleServer) Constrain(_ context.Context, call schema.Handle_constrain) error {
	if err := h.v.checkLive(); err != nil {
		return err
	}
	sl, err := call.Args().Labels()
	if err != nil {
		return err
	}
	narrow, err := fromSchema(sl)
	if err != nil {
		return fmt.Errorf("constrain: %w", err)
	}
	vm, gen := h.v.current()
	chain := append(append([]labels.Set(nil), h.narrow...), narrow)
	kept, err := narrowAll(vm, chain)
	if err != nil {
		return err
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	return res.SetHandle(h.v.narrowedHandle(h.down, chain, kept, gen, h.entry))
}

// candidates returns the members whose labels admit r, or, when none does,
// a refusal in the words package labels uses (as the switchboard would):
// that of a member which refuses r for its scheme alone if there is one,
// else the first member's. A caller that can speak another scheme to the
// same address (toybox-entry: TLS to a port granted only as https) reads
// the scheme refusal as its cue to ask again, so it must not be hidden
// behind another member's "port not granted".
func (h *handleServer) candidates(op string, r labels.Request) ([]labels.Set, error) {
	members, err := h.current()
	if err != nil {
		return nil, labels.Refusef("the vat's grant no longer admits this handle (%w)", err)
	}
	var out []labels.Set
	var first, scheme labels.Decision
	for i, m := range members {
		d := m.Admit(r)
		switch {
		case d.Allow:
			out = append(out, m)
		case scheme.Reason == "" && d.Reason == labels.SchemeRefused(r.Scheme) && schemeAlone(m, r):
			scheme = d
		}
		if i == 0 {
			first = d
		}
	}
	if len(out) == 0 {
		reason := first.Reason
		if scheme.Reason != "" {
			reason = scheme.Reason
		}
		for _, d := range h.v.cfg.Dropped {
			if d.Set.Admit(r).Allow {
				reason += fmt.Sprintf(" (the manifest asked for %s; it was not granted: %s)", d.Set, d.Why)
				break
			}
		}
		h.v.refused(op, requestTarget(r), reason)
		return nil, labels.Refuse(reason)
	}
	return out, nil
}

// schemeAlone reports whether m, which refuses r for its scheme, would
// admit r in m's own scheme (labels.Admit judges the scheme before the
// port, so its refusal alone does not say the port would pass).
func schemeAlone(m labels.Set, r labels.Request) bool {
	if m.Scheme == "" {
		return false
	}
	r.Scheme = m.Scheme
	return m.Admit(r).Allow
}

// maxSchemeBytes is the longest scheme a Target may name: the schemes
// are http, https and tcp.
const maxSchemeBytes = 16

// urlScheme reports whether s is "" or a URL scheme's spelling.
func urlScheme(s string) bool {
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// targetRequest is what a vat's Target asks to reach. The relay passes
// the Target's fields on (schema.TargetFields.Set), never its struct: a
// deep copy (SetTarget) carried whatever the vat put behind pointers
// beyond the schema's (1 KiB of them cost the supervisor 0.66 s and 63
// MiB).
// A scheme longer than maxSchemeBytes is refused by its length alone,
// and one that is no URL scheme (RFC 3986: a letter, then letters,
// digits, "+", "-" or ".") without quoting it: no record, status or page
// carries a vat's escape sequence or bidi override as a target.
func targetRequest(t schema.TargetFields) (labels.Request, error) {
	if len(t.Scheme) > maxSchemeBytes {
		return labels.Request{}, labels.Refusef("a scheme of %d bytes is not supported (http, https or tcp)", len(t.Scheme))
	}
	if !urlScheme(t.Scheme) {
		return labels.Request{}, labels.Refusef("a scheme that is not a URL scheme is not supported (http, https or tcp)")
	}
	ch, err := labels.CanonicalHost(t.Host)
	if err != nil {
		return labels.Request{}, labels.Refusef("%w", err)
	}
	return labels.Request{Scheme: strings.ToLower(t.Scheme), Host: ch, Port: t.Port}, nil
}

// setDecision writes the switchboard's decision d into the one made by
// newDecision, field by field (as a Target's are).
func setDecision(newDecision func() (schema.Decision, error), d schema.Decision) error {
	nd, err := newDecision()
	if err != nil {
		return err
	}
	nd.SetAllow(d.Allow())
	for _, kv := range []struct {
		get func() (string, error)
		set func(string) error
	}{{d.Reason, nd.SetReason}, {d.Vetted, nd.SetVetted}} {
		v, err := kv.get()
		if err != nil {
			return err
		}
		if err := kv.set(v); err != nil {
			return err
		}
	}
	addrs, err := d.Addresses()
	if err != nil {
		return err
	}
	out, err := nd.NewAddresses(int32(addrs.Len()))
	if err != nil {
		return err
	}
	for i := 0; i < addrs.Len(); i++ {
		a, err := addrs.At(i)
		if err != nil {
			return err
		}
		if err := out.Set(i, a); err != nil {
			return err
		}
	}
	return nil
}

// each runs op against the upstream handle of every candidate member in
// turn until one is not refused; a disconnect is retried once on a fresh
// session.
func (h *handleServer) each(ctx context.Context, ms []labels.Set, op func(m labels.Set, up schema.Handle, sess session) error) error {
	var last error
	for _, m := range ms {
		for attempt := 0; attempt < 2; attempt++ {
			up, sess, err := h.v.upstream(ctx, m)
			if err != nil {
				last = err
				break
			}
			err = op(m, up, sess)
			up.Release()
			if err != nil && capnp.IsDisconnected(err) {
				h.v.cfg.Upstream.broken(sess.gen)
				last = err
				continue
			}
			if err == nil {
				return nil
			}
			last = relayErr(err)
			break
		}
		if _, refused := labels.RefusalReason(last); last != nil && !refused {
			return last // not a refusal: another member would not help
		}
	}
	return last
}

func (h *handleServer) begin(call interface{ Go() }) (func(), error) {
	if err := h.v.checkLive(); err != nil {
		return nil, err
	}
	done, err := h.v.acquire()
	if err != nil {
		return nil, err
	}
	call.Go()
	return done, nil
}

func (h *handleServer) Check(ctx context.Context, call schema.Handle_check) error {
	done, err := h.begin(call)
	if err != nil {
		return err
	}
	defer done()
	t, err := schema.ReadTarget(call.Args().Target())
	if err != nil {
		return err
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	r, err := targetRequest(t)
	var ms []labels.Set
	if err == nil {
		ms, err = h.candidates("check", r)
	}
	if err != nil {
		h.v.decided("check", r, err)
		d, derr := res.NewDecision()
		if derr != nil {
			return derr
		}
		reason, ok := labels.RefusalReason(err)
		if !ok {
			reason = err.Error()
		}
		return d.SetReason(reason)
	}
	// A member's refusal is a decision, not an error: try the next member,
	// and answer with the last decision seen.
	var decided bool
	err = h.each(ctx, ms, func(_ labels.Set, up schema.Handle, _ session) error {
		fut, release := up.Check(ctx, func(p schema.Handle_check_Params) error { return t.Set(p.NewTarget) })
		defer release()
		r, err := fut.Struct()
		if err != nil {
			return err
		}
		d, err := r.Decision()
		if err != nil {
			return err
		}
		if err := setDecision(res.NewDecision, d); err != nil {
			return err
		}
		decided = true
		if !d.Allow() {
			reason, _ := d.Reason()
			return labels.Refuse(reason)
		}
		return nil
	})
	if _, refused := labels.RefusalReason(err); decided && refused {
		// A check that is refused is told; one that is allowed is
		// followed by the call it was asked for, which is.
		h.v.decided("check", r, err)
		return nil
	}
	return err
}

// upstreamConnectTimeout bounds a relayed connect whose vat has given up.
const upstreamConnectTimeout = time.Minute

func (h *handleServer) Connect(ctx context.Context, call schema.Handle_connect) error {
	done, err := h.begin(call)
	if err != nil {
		return err
	}
	defer done()
	args := call.Args()
	t, err := schema.ReadTarget(args.Target())
	if err != nil {
		return err
	}
	r, err := targetRequest(t)
	if err != nil {
		h.v.decided("connect", labels.Request{Scheme: r.Scheme, Port: t.Port}, err)
		return err
	}
	ms, err := h.candidates("connect", r)
	if err != nil {
		h.v.decided("connect", r, err)
		return err
	}
	hello, _ := args.TlsHello()
	wantFd := args.WantFd()
	err = h.each(ctx, ms, func(m labels.Set, up schema.Handle, sess session) error {
		// The upstream call is not cancelled with the vat's: the
		// switchboard may have sent the socket already, and the upstream
		// session is shared by every vat. An unclaimed socket would count
		// against that session's limit, and at the limit the session
		// breaks, with every vat's connections on it. So the answer is
		// always awaited and its socket always taken; if the vat has gone
		// meanwhile, the socket is closed.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), upstreamConnectTimeout)
		defer cancel()
		fut, release := up.Connect(uctx, func(p schema.Handle_connect_Params) error {
			if err := t.Set(p.NewTarget); err != nil {
				return err
			}
			if err := p.SetTlsHello(hello); err != nil {
				return err
			}
			p.SetWantFd(wantFd)
			// Only toybox-entry takes the socket itself; an app's is
			// relayed here, which needs it connected.
			p.SetInProgress(h.entry && wantFd && args.InProgress())
			if args.HasDownstream() {
				return p.SetDownstream(args.Downstream().AddRef())
			}
			return nil
		})
		defer release()
		r, err := fut.Struct()
		if err != nil {
			return err
		}
		if seq := r.Fd(); seq != 0 {
			// Taken first, and shut down on every refusal below: the
			// switchboard holds a duplicate, so a socket only closed
			// would stay connected (shutFile).
			f, err := sess.conn.TakeFD(seq)
			if err != nil {
				return fmt.Errorf("taking the connected socket from the switchboard: %w", err)
			}
			if err := ctx.Err(); err != nil {
				shutFile(f)
				return err
			}
			if !wantFd {
				shutFile(f)
				return errors.New("the switchboard handed over a socket nobody asked for")
			}
			res, err := call.AllocResults()
			if err != nil {
				shutFile(f)
				return err
			}
			if !h.entry {
				// The switchboard's socket lives in its network
				// namespace: connect(AF_UNSPEC) would free it to
				// connect, bind or listen anywhere from there. An app
				// gets a socket of a pair the supervisor relays.
				// The switchboard handle that made it is kept while
				// the relay runs (releasing it would end the
				// connection), however the app lets go of its Handle.
				held := h.v.hold([]labels.Set{m})
				if f, err = h.v.relayed(f, func() { h.v.drop(held) }); err != nil { // takes f
					return fmt.Errorf("relaying the connected socket: %w", err)
				}
			}
			nseq, err := h.down.SendOwned(f) // takes f
			if err != nil {
				return fmt.Errorf("handing the connected socket to the vat: %w", err)
			}
			res.SetFd(nseq)
			return nil
		}
		res, err := call.AllocResults()
		if err != nil {
			return err
		}
		if r.HasUpstream() {
			return res.SetUpstream(r.Upstream().AddRef())
		}
		return nil
	})
	h.v.decided("connect", r, err)
	h.v.noteRefusal("connect", requestTarget(r), err)
	return err
}

// readHeaders reads the headers of a vat's request or WebSocket, bounded
// before anything loops over them (schema.MaxHeaders); the relay writes
// them anew, names and values alone (as a Target's fields), and refuses
// what goes past the bounds as the switchboard would.
func readHeaders(l schema.Header_List, err error) ([]schema.HeaderField, error) {
	hs, err := schema.ReadHeaders(l, err)
	if err != nil {
		return nil, labels.Refusef("%w", err)
	}
	return hs, nil
}

// beginURL starts a call that names a URL (request, webSocket): the
// in-flight slot, then the members whose labels admit the URL. The caller
// must call done.
func (h *handleServer) beginURL(call interface{ Go() }, op, url string) (done func(), ms []labels.Set, err error) {
	done, err = h.begin(call)
	if err != nil {
		return nil, nil, err
	}
	r, err := labels.ParseURL(url)
	if err == nil {
		ms, err = h.candidates(op, r)
	} else {
		err = labels.Refusef("%w", err)
	}
	if err != nil {
		h.v.decided(op, r, err)
		done()
		return nil, nil, err
	}
	return done, ms, nil
}

func (h *handleServer) Request(ctx context.Context, call schema.Handle_request) error {
	args := call.Args()
	url, _ := args.Url()
	hs, err := readHeaders(args.Headers())
	if err != nil {
		return err
	}
	done, ms, err := h.beginURL(call, "request", url)
	if err != nil {
		return err
	}
	defer done()
	err = h.each(ctx, ms, func(_ labels.Set, up schema.Handle, _ session) error {
		fut, release := up.Request(ctx, func(p schema.Handle_request_Params) error {
			m, _ := args.Method()
			if err := p.SetMethod(m); err != nil {
				return err
			}
			if err := p.SetUrl(url); err != nil {
				return err
			}
			if len(hs) > 0 {
				if err := schema.SetHeaderList(p.NewHeaders, hs); err != nil {
					return err
				}
			}
			return p.SetResponder(args.Responder().AddRef())
		})
		defer release()
		r, err := fut.Struct()
		if err != nil {
			return err
		}
		res, err := call.AllocResults()
		if err != nil {
			return err
		}
		return res.SetBody(r.Body().AddRef())
	})
	h.v.decidedURL("request", url, err)
	return err
}

func (h *handleServer) WebSocket(ctx context.Context, call schema.Handle_webSocket) error {
	args := call.Args()
	url, _ := args.Url()
	hs, err := readHeaders(args.Headers())
	if err != nil {
		return err
	}
	done, ms, err := h.beginURL(call, "webSocket", url)
	if err != nil {
		return err
	}
	defer done()
	err = h.each(ctx, ms, func(_ labels.Set, up schema.Handle, _ session) error {
		fut, release := up.WebSocket(ctx, func(p schema.Handle_webSocket_Params) error {
			if err := p.SetUrl(url); err != nil {
				return err
			}
			if len(hs) > 0 {
				if err := schema.SetHeaderList(p.NewHeaders, hs); err != nil {
					return err
				}
			}
			return p.SetDownstream(args.Downstream().AddRef())
		})
		defer release()
		r, err := fut.Struct()
		if err != nil {
			return err
		}
		res, err := call.AllocResults()
		if err != nil {
			return err
		}
		proto, _ := r.Protocol()
		if err := res.SetProtocol(proto); err != nil {
			return err
		}
		return res.SetUpstream(r.Upstream().AddRef())
	})
	h.v.decidedURL("webSocket", url, err)
	return err
}
