package doors

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"toybox/schema"
	"toybox/vat/tokens"
)

// Log keys: every door call is one record with these keys.
const (
	keyVat        = "vat"
	keyDoor       = "door"
	keyMethod     = "method"
	keyPath       = "path"
	keyStatus     = "status"
	keyDurationMS = "duration_ms"
	keyReason     = "reason"
	keyDoors      = "doors"
	keyBackend    = "backend"
	keyUnlogged   = "unlogged"
	// keyUnloggedAllowed counts the calls that reached the backend and
	// went unlogged (the switchboard's and the entry's key for allowed
	// decisions).
	keyUnloggedAllowed = "unlogged_allowed"
)

// Granted is one spawn's doors: the capabilities minted for vat id by Grant,
// and the switch that revokes them all.
type Granted struct {
	g *grant
}

// grant is the state every capability of one Granted shares.
type grant struct {
	vat     string
	set     *Set // nil: no doors
	limits  Limits
	logger  *slog.Logger
	tr      *http.Transport // nil when set is nil
	sem     chan struct{}
	ctx     context.Context // cancelled on revoke; ends in-flight calls
	cancel  context.CancelFunc
	mu      sync.Mutex
	revoked string         // why, once revoked
	calls   sync.WaitGroup // calls going to the backend; Revoke waits for them

	refusals *tokens.Records // calls refused before the backend
	allowed  *tokens.Records // calls that reached it
}

// Calls are logged at most this often per grant (records per second,
// after a burst of as many), the refused ones (before the backend) and the
// ones that reached the backend (answered or failed) each against their own
// count, as the switchboard and toybox-entry log their decisions: past it
// they are counted, and the next record (any call's, or the revocation's)
// says how many of each were not logged. A vat that loops on calls, refused
// or answered by a quick backend, cannot fill the disk or push the
// supervisor's other records (every vat's) past journald's rate limit for
// the unit; a storm of answered calls never costs a refusal its record.
const (
	refusalLogRate  = 20
	refusalLogBurst = 100
	allowedLogRate  = 20
	allowedLogBurst = 100
)

// Grant mints fresh door capabilities for one spawn of vat vatID. The vat gets
// its set only when the table has one for it and marks it first-party;
// otherwise the Granted holds an empty set. logger (nil = discard) receives
// one record per call, and one for the grant and its revocation. The caller
// must Revoke the Granted when the spawn ends (stop, upgrade, delete).
func (t *Table) Grant(vatID string, logger *slog.Logger) *Granted {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var limits Limits
	if t != nil {
		limits = t.Limits
	}
	limits = limits.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	g := &grant{vat: vatID, limits: limits, logger: logger, ctx: ctx, cancel: cancel, sem: make(chan struct{}, limits.MaxInFlight), refusals: tokens.NewRecords(refusalLogRate, refusalLogBurst), allowed: tokens.NewRecords(allowedLogRate, allowedLogBurst)}
	if s, ok := t.Set(vatID); ok && s.FirstParty {
		g.set = &s
		g.tr = newTransport(s.Backend, limits)
	}
	logger.Info("doors granted", slog.String(keyVat, vatID), slog.Any(keyDoors, g.names()), slog.String(keyBackend, g.backendName()))
	return &Granted{g: g}
}

func newTransport(b Backend, l Limits) *http.Transport {
	d := &net.Dialer{}
	return &http.Transport{
		Proxy: nil, // never the environment's proxy
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, b.Network, b.Address)
		},
		DisableCompression:     true,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
}

// Names lists the entries the grant holds ("GET /kiosk/state", ...), for
// status and logs; empty when the vat has no doors.
func (gr *Granted) Names() []string { return gr.g.names() }

// DoorSet returns a new reference to the grant's DoorSet. The caller must
// release it (handing it to rpc.Options.BootstrapClient or a result's Set*
// counts as releasing). Every call on it, and on every Door it hands out,
// fails once the grant is revoked.
func (gr *Granted) DoorSet() schema.DoorSet {
	return schema.DoorSet_ServerToClient(&doorSetServer{g: gr.g})
}

// Revoke ends the grant because the vat stopped: see RevokeBecause.
func (gr *Granted) Revoke() { gr.RevokeBecause("stopped") }

// RevokeBecause ends the grant: every Door and DoorSet minted from it,
// including references the vat passed to other processes, fails from now on
// with "door revoked: vat <id> <why>" (why: "stopped", "deleted",
// "upgraded without its doors"), and calls in flight are cancelled. It
// returns once they have ended: no more of the grant reaches the backend.
// It is idempotent; the first reason stays.
func (gr *Granted) RevokeBecause(why string) {
	g := gr.g
	g.mu.Lock()
	if g.revoked != "" {
		g.mu.Unlock()
		return
	}
	if why == "" {
		why = "stopped"
	}
	g.revoked = why
	g.mu.Unlock()
	g.cancel()
	// A call admitted just before may not have seen the cancel yet: wait
	// until every call that entered has ended, so that nothing of this
	// grant reaches the backend once Revoke returns.
	g.calls.Wait()
	if g.tr != nil {
		g.tr.CloseIdleConnections()
	}
	attrs := []any{slog.String(keyVat, g.vat), slog.Any(keyDoors, g.names()), slog.String(keyReason, why)}
	if n := g.refusals.Drain(); n > 0 {
		attrs = append(attrs, slog.Int(keyUnlogged, n))
	}
	if n := g.allowed.Drain(); n > 0 {
		attrs = append(attrs, slog.Int(keyUnloggedAllowed, n))
	}
	g.logger.Info("doors revoked", attrs...)
}

// Revoked reports whether the grant was revoked.
func (gr *Granted) Revoked() bool { return gr.g.live() != nil }

// enter counts a call going to the backend, or returns the revocation
// error. The caller calls g.calls.Done when the call has ended.
func (g *grant) enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.revoked != "" {
		return fmt.Errorf("%w: vat %s %s", ErrRevoked, g.vat, g.revoked)
	}
	g.calls.Add(1)
	return nil
}

// live returns the revocation error, or nil while the grant stands.
func (g *grant) live() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.revoked != "" {
		return fmt.Errorf("%w: vat %s %s", ErrRevoked, g.vat, g.revoked)
	}
	return nil
}

func (g *grant) entries() []Entry {
	if g.set == nil {
		return nil
	}
	return g.set.Entries
}

func (g *grant) names() []string {
	es := g.entries()
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func (g *grant) backendName() string {
	if g.set == nil {
		return ""
	}
	return g.set.Backend.String()
}

// doorSetServer serves schema.DoorSet for one grant.
type doorSetServer struct {
	g *grant
}

func (s *doorSetServer) List(_ context.Context, call schema.DoorSet_list) error {
	if err := s.g.live(); err != nil {
		return err
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	return fillEntries(s.g.entries(), res.NewEntries)
}

func (s *doorSetServer) All(_ context.Context, call schema.DoorSet_all) error {
	if err := s.g.live(); err != nil {
		return err
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	// SetDoor steals the new reference.
	return res.SetDoor(schema.Door_ServerToClient(&doorServer{g: s.g, name: "all", entries: s.g.entries()}))
}

func (s *doorSetServer) Get(_ context.Context, call schema.DoorSet_get) error {
	if err := s.g.live(); err != nil {
		return err
	}
	name, err := call.Args().Name()
	if err != nil {
		return fmt.Errorf("reading the door name: %w", err)
	}
	var found *Entry
	for _, e := range s.g.entries() {
		if e.Name() == name {
			found = &e
			break
		}
	}
	if found == nil {
		return fmt.Errorf("%w: vat %s has no door %q", ErrRefused, s.g.vat, clip(name))
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	return res.SetDoor(schema.Door_ServerToClient(&doorServer{g: s.g, name: name, entries: []Entry{*found}}))
}

func fillEntries(es []Entry, alloc func(int32) (schema.DoorEntry_List, error)) error {
	l, err := alloc(int32(len(es)))
	if err != nil {
		return err
	}
	for i, e := range es {
		de := l.At(i)
		if err := de.SetName(e.Name()); err != nil {
			return err
		}
		if err := de.SetMethod(e.Method); err != nil {
			return err
		}
		if err := de.SetPath(e.Path); err != nil {
			return err
		}
	}
	return nil
}

// doorServer serves schema.Door: the entries it was narrowed to.
type doorServer struct {
	g       *grant
	name    string // "all", or the one entry's name
	entries []Entry
}

func (d *doorServer) Entries(_ context.Context, call schema.Door_entries) error {
	if err := d.g.live(); err != nil {
		return err
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	return fillEntries(d.entries, res.NewEntries)
}
