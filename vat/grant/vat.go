package grant

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/rpc"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/vat/tokens"
)

// maxInFlight bounds the egress calls one vat may have outstanding, so that
// a vat flooding its Handle cannot fill the supervisor's one switchboard
// connection for every other vat.
const maxInFlight = 64

// DefaultVatLimits returns what one vat's connection may make the
// supervisor hold where VatConfig.Limits leaves a field zero. Past any
// limit the connection ends, with a warning that says which.
func DefaultVatLimits() wire.Limits {
	return wire.Limits{
		Unfinished: 1024, // calls left unfinished; each holds its answer
		// Capabilities not released: each Handle, DoorSet or Door is a
		// server with a goroutine of its own, and so is the stream of
		// each open request, WebSocket or streamed connection.
		Exports:   8192,
		Caps:      64,       // per message; each becomes an import and a queued Release
		CallBytes: 64 << 20, // calls held unanswered: four WebSocket messages of the largest size
		// Answers not yet finished, each held until its Finish. A door's
		// answer is up to 1 MiB and go-capnp finishes 250 ms after the
		// Return. A vat calling a 1 MiB door as fast as it can held 53 to
		// 136 MiB that way on two cores.
		AnswerBytes: 256 << 20,
	}
}

// limits returns l with each zero field taken from DefaultVatLimits; a
// field zero there too is left for wire's own default.
func limits(l wire.Limits) wire.Limits {
	d := DefaultVatLimits()
	orDefault(&l.Unfinished, d.Unfinished)
	orDefault(&l.Backlog, d.Backlog)
	orDefault(&l.BacklogBytes, d.BacklogBytes)
	orDefault(&l.Exports, d.Exports)
	orDefault(&l.Caps, d.Caps)
	orDefault(&l.CallBytes, d.CallBytes)
	orDefault(&l.AnswerBytes, d.AnswerBytes)
	return l
}

// orDefault sets *v to d when it is zero or negative.
func orDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// MaxIdleUpstreams is how many switchboard handles nothing of a vat's
// holds any longer (narrowings it released) the supervisor keeps for it,
// in case it narrows the same way again; past it the least recently used
// is released. Each costs the switchboard a goroutine and a few KiB, and
// counts against its per-connection handle limit.
const MaxIdleUpstreams = 64

// VatConfig describes one vat's authority.
type VatConfig struct {
	// ID is the vat's id, parsed where it entered (labels.ParseVatID); every
	// egress member carries it as the vat label.
	ID labels.VatID
	// Grants are the vat's egress grants. Each becomes one member of the
	// vat's Handle (a union). If empty, the vat has no Handle at all.
	Grants []labels.Set
	// Upstream is the supervisor's switchboard: the vat gets a connection
	// of its own to the same socket (closed by Revoke). Required when
	// Grants is not empty.
	Upstream *Upstream
	// Doors returns a new reference to the vat's DoorSet (the caller
	// releases it). If nil, the vat has an empty door set.
	Doors func() schema.DoorSet
	// Logger receives relay events. If nil, discarded.
	Logger *slog.Logger
	// Dropped are what the vat's manifest asked for and was not granted,
	// with why: a refusal that one of them would have admitted says so.
	Dropped []Dropped
	// OnDecision, if set, is called once for each connect, request and
	// WebSocket the vat asks for, with what became of it, and for each
	// check refused. It must not block.
	OnDecision func(Decision)
	// Limits bound what each of the vat's connections may make the
	// supervisor hold. A zero field takes DefaultVatLimits' value.
	Limits wire.Limits
	// MaxSockets is how many relayed sockets the vat's app may hold open
	// at once. If zero or negative, MaxAppSockets.
	MaxSockets int
	// MaxIdle is how many switchboard handles nothing of the vat's holds
	// any longer it keeps. If zero or negative, MaxIdleUpstreams.
	MaxIdle int
	// HangUpGrace is how long the remote of a relayed socket has, once
	// the app's end is gone, to take what the app wrote before it went.
	// If zero or negative, DefaultHangUpGrace.
	HangUpGrace time.Duration
}

// Vat serves one vat's bootstrap capability on any number of connections
// (the entry's and the app's) until it is revoked.
type Vat struct {
	cfg     VatConfig
	log     *slog.Logger
	sem     chan struct{}
	sockets atomic.Int64 // relayed sockets open (relayed)
	last    lastRefusal  // its most recent egress refusal
	// refusals bounds the records of the refusals the supervisor decides.
	refusals *tokens.Records
	// notifier is toybox-entry's report of its connect() listener.
	notifier notifierReport

	mu      sync.Mutex
	revoked bool
	// members are the grants constrained to {vat: ID}, replaced whole by
	// SetGrants (never changed in place); gen counts the replacements.
	members []labels.Set
	gen     uint64
	changed chan struct{}             // closed (and replaced) when gen moves, and when revoked
	held    []*upstreamEntry          // the members' entries, held for the vat's life
	cache   map[string]*upstreamEntry // switchboard handle per member labels
	idle    *list.List                // of *upstreamEntry no one holds, most recently used first
	conns   map[*rpc.Conn]struct{}
}

// upstreamEntry is the switchboard handle constrained to one member's
// labels. It is kept while anything holds the member (hold): the vat's
// grants, for good; each narrowed Handle, until go-capnp shuts it down;
// each relayed app socket it made, until the relay ends. Once nothing
// does, it waits among the idle entries for a narrowing that needs it
// again; past the vat's MaxIdle of those, the least recently used is
// released (and with it, at the switchboard, whatever it made that is
// still open).
type upstreamEntry struct {
	key  string
	set  labels.Set
	refs int
	gen  uint64
	h    schema.Handle // null until first used
	idle *list.Element // in Vat.idle while refs is 0
}

// NewVat returns the authority of one vat. A grant that conflicts with the
// vat's own id (it names another vat) is an error.
func NewVat(cfg VatConfig) (*Vat, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	v := &Vat{
		cfg: cfg, log: log.With("vat", cfg.ID), sem: make(chan struct{}, maxInFlight),
		refusals: tokens.NewRecords(refusalLogRate, refusalLogBurst),
		cache:    map[string]*upstreamEntry{}, idle: list.New(), conns: map[*rpc.Conn]struct{}{},
		changed: make(chan struct{}),
	}
	v.cfg.Limits = limits(cfg.Limits)
	orDefault(&v.cfg.MaxSockets, MaxAppSockets)
	orDefault(&v.cfg.MaxIdle, MaxIdleUpstreams)
	orDefault(&v.cfg.HangUpGrace, DefaultHangUpGrace)
	members, err := memberSets(cfg.ID, cfg.Grants)
	if err != nil {
		return nil, err
	}
	v.members = members
	v.held = v.hold(members) // for the vat's life: its Handle is made again and again
	if len(v.members) > 0 && cfg.Upstream == nil {
		return nil, errors.New("a vat with a grant needs the supervisor's switchboard upstream")
	}
	if cfg.Upstream != nil {
		// A connection of its own: the switchboard's per-connection
		// limits (open connections, calls, handles) are then this vat's
		// alone, and one vat that fills them leaves the others their
		// egress. Revoke closes it.
		v.cfg.Upstream = cfg.Upstream.forVat(cfg.ID)
	}
	return v, nil
}

func memberSets(id labels.VatID, grants []labels.Set) ([]labels.Set, error) {
	var out []labels.Set
	for _, g := range grants {
		m, err := labels.Constrain(g, labels.Set{Vat: string(id)})
		if err != nil {
			return nil, fmt.Errorf("grant %s for vat %s: %w", g, id, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// Members returns the vat's egress members (its grants with its id).
func (v *Vat) Members() []labels.Set {
	ms, _ := v.current()
	return append([]labels.Set(nil), ms...)
}

// current returns the members and their generation.
func (v *Vat) current() ([]labels.Set, uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.members, v.gen
}

// Serve serves the Vat bootstrap on c until the peer hangs up, ctx ends or
// the vat is revoked. It takes ownership of c. A socket the peer asks for
// (connect with wantFd) is one end of a socketpair the supervisor relays
// to the connected socket: the peer is the app.
func (v *Vat) Serve(ctx context.Context, c *wire.Conn) error { return v.serve(ctx, c, false) }

// ServeEntry is Serve for toybox-entry's own connection (pid 1 of the
// wall, which the app cannot reach into): it gets the switchboard's
// connected socket itself, which its proxy splices with no relay between.
func (v *Vat) ServeEntry(ctx context.Context, c *wire.Conn) error { return v.serve(ctx, c, true) }

func (v *Vat) serve(ctx context.Context, c *wire.Conn, entry bool) error {
	srv := &vatServer{v: v, down: c, entry: entry}
	rc := c.RPCWith(capnp.Client(schema.Vat_ServerToClient(srv)), wire.Logger(v.log), v.cfg.Limits)
	v.mu.Lock()
	if v.revoked {
		v.mu.Unlock()
		_ = rc.Close()
		return fmt.Errorf("vat %s: %w", v.cfg.ID, ErrRevoked)
	}
	v.conns[rc] = struct{}{}
	v.mu.Unlock()
	defer func() {
		v.mu.Lock()
		delete(v.conns, rc)
		v.mu.Unlock()
		_ = rc.Close()
	}()
	select {
	case <-rc.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Revoke stops every capability this vat was given: its Handles fail, the
// upstream handles are released (so the switchboard shuts the connections
// they made) and its served connections are closed. Doors are revoked by
// whoever made them.
func (v *Vat) Revoke() {
	v.mu.Lock()
	if v.revoked {
		v.mu.Unlock()
		return
	}
	v.revoked = true
	close(v.changed)
	cache := v.cache
	v.cache = map[string]*upstreamEntry{}
	v.idle.Init()
	conns := v.conns
	v.conns = map[*rpc.Conn]struct{}{}
	v.mu.Unlock()
	for _, e := range cache {
		e.h.Release()
	}
	for rc := range conns {
		_ = rc.Close()
	}
	if v.cfg.Upstream != nil {
		// The switchboard shuts every connection this vat still has open.
		_ = v.cfg.Upstream.Close()
	}
}

func (v *Vat) checkLive() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.revoked {
		return fmt.Errorf("egress revoked: vat %s stopped", v.cfg.ID)
	}
	return nil
}

// acquire takes one in-flight slot, or fails at once when the vat has too
// many calls outstanding.
func (v *Vat) acquire() (func(), error) {
	select {
	case v.sem <- struct{}{}:
		return func() { <-v.sem }, nil
	default:
		return nil, fmt.Errorf("vat %s: %w (limit %d)", v.cfg.ID, ErrBusy, maxInFlight)
	}
}

// hold keeps the switchboard handle of each member of ms (made when first
// used) until drop gives the holds it returns back.
func (v *Vat) hold(ms []labels.Set) []*upstreamEntry {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.revoked {
		return nil // Revoke has released them all
	}
	es := make([]*upstreamEntry, 0, len(ms))
	for _, m := range ms {
		key := m.String()
		e := v.cache[key]
		if e == nil {
			e = &upstreamEntry{key: key, set: m}
			v.cache[key] = e
		}
		if e.idle != nil {
			v.idle.Remove(e.idle)
			e.idle = nil
		}
		e.refs++
		es = append(es, e)
	}
	return es
}

// drop gives back holds hold returned. A switchboard handle nothing holds
// any longer joins the idle ones. An entry SetGrants revoked meanwhile is
// no longer cached: its hold is gone with it.
func (v *Vat) drop(es []*upstreamEntry) {
	var gone []schema.Handle
	v.mu.Lock()
	if !v.revoked {
		for _, e := range es {
			if v.cache[e.key] == e && e.refs > 0 {
				e.refs--
				if e.refs == 0 {
					gone = v.idleLocked(e, gone)
				}
			}
		}
	}
	v.mu.Unlock()
	for _, h := range gone {
		h.Release()
	}
}

// idleLocked files e, which nothing holds, first among the idle entries
// (or forgets it, when it has no switchboard handle to keep), and forgets
// the least recently used past the vat's MaxIdle. It returns gone with the
// handles of the entries forgotten appended, for the caller to release
// once it has let go of v.mu.
func (v *Vat) idleLocked(e *upstreamEntry, gone []schema.Handle) []schema.Handle {
	if !e.h.IsValid() {
		delete(v.cache, e.key)
		return gone
	}
	e.idle = v.idle.PushFront(e)
	for v.idle.Len() > v.cfg.MaxIdle {
		old := v.idle.Remove(v.idle.Back()).(*upstreamEntry)
		old.idle = nil
		delete(v.cache, old.key)
		gone = append(gone, old.h)
		old.h = schema.Handle{}
	}
	return gone
}

// upstream returns the switchboard handle for member m on the current
// session (constraining the root anew after a reconnect). The returned
// handle is a new reference: the caller must release it.
func (v *Vat) upstream(ctx context.Context, m labels.Set) (schema.Handle, session, error) {
	sess, err := v.cfg.Upstream.current(ctx)
	if err != nil {
		return schema.Handle{}, session{}, err
	}
	key := m.String()
	v.mu.Lock()
	if v.revoked {
		v.mu.Unlock()
		return schema.Handle{}, session{}, fmt.Errorf("egress revoked: vat %s stopped", v.cfg.ID)
	}
	if e := v.cache[key]; e != nil && e.h.IsValid() && e.gen == sess.gen {
		if e.idle != nil {
			v.idle.MoveToFront(e.idle)
		}
		h := e.h.AddRef()
		v.mu.Unlock()
		return h, sess, nil
	}
	v.mu.Unlock()

	fut, release := sess.root.Constrain(ctx, func(p schema.Handle_constrain_Params) error {
		l, err := p.NewLabels()
		if err != nil {
			return err
		}
		return toSchema(l, m)
	})
	defer release()
	res, err := fut.Struct()
	if err != nil {
		if capnp.IsDisconnected(err) {
			v.cfg.Upstream.broken(sess.gen)
		}
		return schema.Handle{}, session{}, relayErr(err)
	}
	h := res.Handle().AddRef()

	var gone []schema.Handle
	defer func() {
		for _, g := range gone {
			g.Release()
		}
	}()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.revoked {
		gone = append(gone, h)
		return schema.Handle{}, session{}, fmt.Errorf("egress revoked: vat %s stopped", v.cfg.ID)
	}
	e := v.cache[key]
	switch {
	case e != nil && e.h.IsValid() && e.gen == sess.gen:
		// Another call constrained the same meanwhile: keep that one
		// (releasing it would end what it made); this one has made
		// nothing yet.
		gone = append(gone, h)
		h = e.h.AddRef()
	case e != nil && e.h.IsValid() && e.gen > sess.gen:
		// This session has ended since: h is for this call alone.
	default:
		if e == nil {
			e = &upstreamEntry{key: key, set: m}
			v.cache[key] = e
		}
		if e.h.IsValid() {
			gone = append(gone, e.h) // an older session's
		}
		e.h, e.gen = h.AddRef(), sess.gen
		switch {
		case e.idle != nil:
			v.idle.MoveToFront(e.idle)
		case e.refs == 0:
			gone = v.idleLocked(e, gone) // nothing holds it: a Handle shut down meanwhile
		}
	}
	return h, sess, nil
}

// relayErr keeps the words the switchboard chose: an error that carries a
// refusal is passed on as exactly that refusal.
func relayErr(err error) error {
	if reason, ok := labels.RefusalReason(err); ok {
		return labels.Refuse(reason)
	}
	return err
}

func toSchema(l schema.Labels, s labels.Set) error {
	return l.SetFields(schema.LabelFields(s))
}

func fromSchema(l schema.Labels) (labels.Set, error) {
	f, err := l.Fields()
	if err != nil {
		return labels.Set{}, err
	}
	return labels.Canonical(labels.Set(f))
}

// Dropped is an address a vat's manifest asked for that it was not
// granted, and why.
type Dropped struct {
	Set labels.Set
	Why string
}

func (d Dropped) String() string { return d.Set.String() + ": " + d.Why }

// vatServer is the Vat bootstrap on one connection.
type vatServer struct {
	v     *Vat
	down  *wire.Conn
	entry bool // down is toybox-entry's (see handleServer.entry)

	mu     sync.Mutex
	handed int // direct connections handed to this entry (Direct)
}

func (s *vatServer) Id(_ context.Context, call schema.Vat_id) error {
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	return res.SetId(string(s.v.cfg.ID))
}

func (s *vatServer) Egress(_ context.Context, call schema.Vat_egress) error {
	if err := s.v.checkLive(); err != nil {
		return err
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	if s.entry {
		if p, err := call.Args().Notifier(); err == nil {
			s.v.notifier.note(p)
		} else {
			s.v.notifier.note(schema.Notifier{})
		}
	}
	if ms, _ := s.v.current(); len(ms) == 0 {
		return nil // no grant: no Handle
	}
	h := &handleServer{v: s.v, down: s.down, entry: s.entry}
	return res.SetHandle(schema.Handle_ServerToClient(h))
}

func (s *vatServer) Doors(_ context.Context, call schema.Vat_doors) error {
	if err := s.v.checkLive(); err != nil {
		return err
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	if s.v.cfg.Doors == nil {
		return res.SetDoors(schema.DoorSet_ServerToClient(emptyDoors{}))
	}
	return res.SetDoors(s.v.cfg.Doors())
}

// emptyDoors is the door set of a vat that has none.
type emptyDoors struct{}

func (emptyDoors) List(_ context.Context, call schema.DoorSet_list) error {
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	_, err = res.NewEntries(0)
	return err
}

func (emptyDoors) All(context.Context, schema.DoorSet_all) error {
	return errors.New("door refused: this vat has no doors")
}

func (emptyDoors) Get(_ context.Context, call schema.DoorSet_get) error {
	name, _ := call.Args().Name()
	if len(name) > maxDoorName {
		name = name[:maxDoorName] + "..."
	}
	return fmt.Errorf("door refused: this vat has no door %q", name)
}

// maxDoorName bounds the part of an asked-for door name a refusal quotes,
// in bytes, as vat/doors does: the name is the vat's, up to a whole
// message long.
const maxDoorName = 200
