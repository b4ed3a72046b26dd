// Package bridge serves a stdio MCP server as Streamable HTTP.
//
// It maps HTTP sessions and principals to processes of the vat's command,
// mints every request id it sends upstream, and keeps the streams (lazy JSON
// or SSE, keep-alives, resumption) that the stdio transport has none of.
//
// It runs inside the vat's wall (toybox-entry), behind the supervisor,
// which alone reaches it: the supervisor strips /<vat> from the path and
// names who asks in the Toybox-Principal header. A session is bound to its
// principal, and no process serves two principals unless the mode is
// ModeSingle.
package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"toybox/vat/mcp"
)

// Mode is how sessions map to processes.
type Mode string

// Modes.
const (
	// ModeSession gives each legacy session a process of its own.
	ModeSession Mode = "session"
	// ModeShared gives each principal one process for all its sessions.
	ModeShared Mode = "shared"
	// ModeSingle serves every principal from one process (a vat its
	// manifest declares stateless).
	ModeSingle Mode = "single"
)

// ParseMode reads a mode's name; "" is ModeSession.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeSession:
		return ModeSession, nil
	case ModeShared, ModeSingle:
		return Mode(s), nil
	}
	return "", fmt.Errorf("mcp mode %q is not session, shared or single", s)
}

// Paths the bridge serves.
const (
	// Path is the MCP endpoint.
	Path = "/mcp"
	// StatsPath answers the bridge's counters as JSON (Stats).
	StatsPath = "/toybox/mcp-stats"
)

// Config is one bridge's work. Zero values are defaults.
type Config struct {
	// Vat is the vat's id, for log records.
	Vat string
	// Spawner starts the vat's command. Required.
	Spawner Spawner
	// Mode maps sessions to processes. If zero, ModeSession.
	Mode Mode
	// Era is the vat's, from the install-time probe. If zero, the bridge
	// asks the first process it starts for modern clients.
	Era mcp.Era
	// MaxProcs bounds the vat's processes, the spare included. If zero, 8.
	MaxProcs int
	// Idle ends a session with no POST for this long (an open GET stream
	// does not count), and a stateless process with no call. If zero,
	// 10 minutes.
	Idle time.Duration
	// NoSpare keeps no spare process started ahead of the next session.
	NoSpare bool
	// MaxMessage bounds one message each way, in bytes. If zero,
	// mcp.MaxMessage (32 MiB).
	MaxMessage int
	// KeepAlive is the time between SSE comments on a quiet stream. If
	// zero, 15 s (well under the 100 s of common proxies and undici's
	// 300 s body timeout).
	KeepAlive time.Duration
	// LazyWait is how long a POST waits for its first message before it
	// answers with an event stream. If zero, 2 s.
	LazyWait time.Duration
	// Grace is each wait of a stop: after closing stdin, and after
	// SIGTERM. If zero, 2 s.
	Grace time.Duration
	// RequestTimeout ends a call with no answer for this long: the vat
	// gets notifications/cancelled, the client -32001. Progress, and the
	// vat's requests to the client for it, start the time again, up to
	// MaxRequestTime from the call's start. If zero, 120 s; if negative,
	// no timeout.
	RequestTimeout time.Duration
	// MaxRequestTime bounds how long progress can keep a call going. If
	// zero, 30 minutes.
	MaxRequestTime time.Duration
	// Hold is how long a server request waits for a stream to the client
	// before the vat is told there is none. If zero, 10 s.
	Hold time.Duration
	// Restart is the first wait before a shared process that exited on
	// its own is started again; each exit in a row doubles it, up to
	// MaxRestart. If zero, 1 s.
	Restart time.Duration
	// MaxRestart bounds that wait. If zero, 60 s.
	MaxRestart time.Duration
	// Logger receives one JSON record per decision. If nil, discarded.
	Logger *slog.Logger
	// VatLog receives the processes' stderr, line by line. If nil,
	// discarded.
	VatLog io.Writer
}

func (c *Config) defaults() {
	if c.Mode == "" {
		c.Mode = ModeSession
	}
	if c.MaxProcs <= 0 {
		c.MaxProcs = 8
	}
	if c.Idle <= 0 {
		c.Idle = 10 * time.Minute
	}
	if c.MaxMessage <= 0 {
		c.MaxMessage = mcp.MaxMessage
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 15 * time.Second
	}
	if c.LazyWait <= 0 {
		c.LazyWait = 2 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = 2 * time.Second
	}
	if c.Hold <= 0 {
		c.Hold = 10 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 120 * time.Second
	}
	if c.Restart <= 0 {
		c.Restart = time.Second
	}
	if c.MaxRestart <= 0 {
		c.MaxRestart = 60 * time.Second
	}
	if c.MaxRequestTime <= 0 {
		c.MaxRequestTime = 30 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.VatLog == nil {
		c.VatLog = io.Discard
	}
}

// Stats are the bridge's counters, as GET /toybox/mcp-stats answers them.
type Stats struct {
	Sessions  int    `json:"sessions"`  // legacy sessions open
	Processes int    `json:"processes"` // processes running, the spare included
	Spare     bool   `json:"spare"`     // a spare process waits for the next session
	Era       string `json:"era,omitempty"`
	// ServerInfo is the vat's serverInfo from its first initialize or
	// server/discover answer.
	ServerInfo json.RawMessage `json:"serverInfo,omitempty"`
	// Dropped counts stdout lines that were not JSON-RPC; TooLong those
	// past MaxMessage.
	Dropped    int64  `json:"droppedStdoutLines"`
	TooLong    int64  `json:"tooLongMessages"`
	Spawned    int64  `json:"spawned"`
	StderrLost int64  `json:"stderrLinesLost"` // stderr lines the vat's log could not take in time
	Exited     int64  `json:"exited"`          // processes that ended without being stopped
	LastError  string `json:"lastError,omitempty"`
	LastErrorT string `json:"lastErrorAt,omitempty"`
	// Crashing says why the bridge starts no process any more: they
	// kept exiting (CrashLoop). It holds until the wall is restarted.
	Crashing string `json:"crashing,omitempty"`
	// Cache is the tools/list cache's counters; absent while no request
	// came marked for it (the vat's manifest did not opt in).
	Cache *CacheStats `json:"toolsListCache,omitempty"`
	// Held is what the sessions keep for a resume, against its bounds.
	Held HeldStats `json:"held"`
}

// CrashLoop is when processes exiting on their own mean the vat is
// crashing: this many within CrashWindow.
const (
	CrashLoop   = 5
	CrashWindow = 2 * time.Minute
)

// Bridge serves one vat's MCP endpoint.
type Bridge struct {
	cfg Config

	mu       sync.Mutex
	sessions map[string]*session
	procs    map[*proc]bool
	spare    *proc
	spawning int
	modern   map[string]*modernOwner
	shared   map[string]*sharedOwner
	procN    int
	closed   bool
	legacyOK bool // an initialize was answered
	modernOK int  // a server/discover was answered (1) or refused (-1)
	info     json.RawMessage
	lastErr  string
	lastAt   time.Time
	exits    []time.Time // processes that ended unasked, recently
	crashing string      // why no process is started any more
	stateKey []byte      // the MAC key of the requestStates it makes

	stats  struct{ Dropped, TooLong, Spawned, Exited, StderrLost atomic.Int64 }
	bodies budget    // the request bodies held
	held   hold      // the events kept for a resume
	cache  listCache // tools/list answers, for requests the supervisor marks (R48)

	stderr chan []byte
	stop   chan struct{}
	wg     sync.WaitGroup
}

// New starts a bridge (and its spare process, unless cfg.NoSpare).
func New(cfg Config) (*Bridge, error) {
	if cfg.Spawner == nil {
		return nil, errors.New("bridge: no Spawner")
	}
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, err
	}
	cfg.defaults()
	b := &Bridge{
		cfg: cfg, sessions: map[string]*session{}, procs: map[*proc]bool{},
		modern: map[string]*modernOwner{}, shared: map[string]*sharedOwner{},
		stop: make(chan struct{}), stderr: make(chan []byte, stderrQueue),
		stateKey: newStateKey(),
	}
	b.held.per = heldPerHolder * int64(cfg.MaxMessage)
	b.held.all = heldAll * int64(cfg.MaxMessage)
	b.wg.Add(2)
	go b.janitor()
	go b.writeStderr()
	b.refillSpare()
	return b, nil
}

// Close ends every session and process (each stopped as the stdio
// transport says) and returns once they are gone.
func (b *Bridge) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	close(b.stop)
	var ss []*session
	for _, s := range b.sessions {
		ss = append(ss, s)
	}
	var ps []*proc
	for p := range b.procs {
		ps = append(ps, p)
	}
	b.mu.Unlock()
	for _, s := range ss {
		b.endSession(s, "the vat is stopping", false)
	}
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
	b.wg.Wait()
}

// Stats returns the bridge's counters now.
func (b *Bridge) Stats() Stats {
	held := b.held.stats()
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Stats{
		Sessions: len(b.sessions), Processes: len(b.procs), Spare: b.spare != nil,
		Era: string(b.eraLocked()), ServerInfo: b.info,
		Dropped: b.stats.Dropped.Load(), TooLong: b.stats.TooLong.Load(),
		Spawned: b.stats.Spawned.Load(), Exited: b.stats.Exited.Load(), StderrLost: b.stats.StderrLost.Load(),
		LastError: b.lastErr, Crashing: b.crashing, Cache: b.cache.stats(),
		Held: held,
	}
	if !b.lastAt.IsZero() {
		st.LastErrorT = b.lastAt.UTC().Format(time.RFC3339)
	}
	return st
}

// ServeHTTP serves Path and StatsPath.
func (b *Bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case Path:
	case StatsPath:
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(b.Stats())
		return
	default:
		http.NotFound(w, r)
		return
	}
	principal := r.Header.Get(mcp.HeaderPrincipal)
	if principal == "" {
		b.decide(r, "", "", "", "", http.StatusBadRequest, "no Toybox-Principal header (the supervisor sets it)")
		writeError(w, http.StatusBadRequest, nil, mcp.CodeInvalidRequest, "no principal", nil)
		return
	}
	if _, err := mcp.DecodeEnv(r.Header.Get(mcp.HeaderPrincipalEnv)); err != nil {
		b.decide(r, principal, "", "", "", http.StatusBadRequest, err.Error())
		writeError(w, http.StatusBadRequest, nil, mcp.CodeInvalidRequest, "bad principal environment", nil)
		return
	}
	switch r.Method {
	case http.MethodPost:
		b.post(w, r, principal)
	case http.MethodGet:
		b.get(w, r, principal)
	case http.MethodDelete:
		b.delete(w, r, principal)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		b.decide(r, principal, "", "", "", http.StatusMethodNotAllowed, "method "+r.Method)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// principalEnv is the secrets of the request's principal (R22), checked
// by ServeHTTP: NAME=value entries set in its processes alone.
func principalEnv(r *http.Request) []string {
	env, _ := mcp.DecodeEnv(r.Header.Get(mcp.HeaderPrincipalEnv))
	return env
}

// post reads one message and serves it in its era.
func (b *Bridge) post(w http.ResponseWriter, r *http.Request, principal string) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "application/json") {
		b.decide(r, principal, "", "", "", http.StatusUnsupportedMediaType, "Content-Type is not application/json")
		writeError(w, http.StatusUnsupportedMediaType, nil, mcp.CodeInvalidRequest, "Content-Type must be application/json", nil)
		return
	}
	limit := int64(b.cfg.MaxMessage)
	// Counted per holder: a client's own header values make it another
	// principal, never another share of the bodies held.
	br := &budgetReader{r: http.MaxBytesReader(w, r.Body, limit), bu: &b.bodies, principal: mcp.Holder(principal), per: bodiesPerPrincipal * limit, all: bodiesAll * limit}
	// Held until the call is written and answered (or the client left):
	// the call keeps none of it (send copies what it keeps).
	defer br.release()
	body, err := io.ReadAll(br)
	if errors.Is(err, errBudget) {
		// The rest is read and dropped, holding nothing: the supervisor
		// writes a request whole before it reads the answer.
		_, _ = io.Copy(io.Discard, br.r)
		reason := fmt.Sprintf("%v: %d MiB per client, %d MiB in all; try again once they are answered", errBudget, br.per>>20, br.all>>20)
		b.decide(r, principal, "", "", "", http.StatusServiceUnavailable, reason)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, nil, mcp.CodeInternal, reason, nil)
		return
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			b.decide(r, principal, "", "", "", http.StatusRequestEntityTooLarge, fmt.Sprintf("a body over %d bytes", b.cfg.MaxMessage))
			writeError(w, http.StatusRequestEntityTooLarge, nil, mcp.CodeInvalidRequest, fmt.Sprintf("the body exceeds %d bytes", b.cfg.MaxMessage), nil)
			return
		}
		b.decide(r, principal, "", "", "", http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	if trimmed := strings.TrimSpace(string(body)); strings.HasPrefix(trimmed, "[") {
		b.postBatch(w, r, principal, body)
		return
	}
	m, err := mcp.Parse(body)
	if err != nil {
		code := mcp.CodeInvalidRequest
		if errors.Is(err, mcp.ErrNotJSON) {
			code = mcp.CodeParse
		}
		reason := err.Error()
		b.decide(r, principal, "", "", "", http.StatusBadRequest, reason)
		writeError(w, http.StatusBadRequest, nil, code, reason, nil)
		return
	}
	hv := r.Header.Get(mcp.HeaderVersion)
	_, metaVersion := m.Get("params", "_meta", mcp.MetaProtocolVersion)
	if mcp.IsModernVersion(hv) || metaVersion {
		b.postModern(w, r, principal, m)
		return
	}
	b.postLegacy(w, r, principal, m)
}

// get serves a legacy session's GET stream; a stateless client has none.
func (b *Bridge) get(w http.ResponseWriter, r *http.Request, principal string) {
	if sid, ok := b.sessionOnly(w, r, principal); ok {
		b.getLegacy(w, r, principal, sid)
	}
}

// sessionOnly returns the session id of a GET or DELETE, or answers 405:
// without a session (or from a stateless client) neither means anything.
func (b *Bridge) sessionOnly(w http.ResponseWriter, r *http.Request, principal string) (string, bool) {
	sid := r.Header.Get(mcp.HeaderSession)
	if sid == "" || mcp.IsModernVersion(r.Header.Get(mcp.HeaderVersion)) {
		w.Header().Set("Allow", "POST")
		b.decide(r, principal, "", "", r.Method, http.StatusMethodNotAllowed, "a "+r.Method+" without a session")
		http.Error(w, "method not allowed without a session", http.StatusMethodNotAllowed)
		return "", false
	}
	return sid, true
}

func (b *Bridge) delete(w http.ResponseWriter, r *http.Request, principal string) {
	sid, ok := b.sessionOnly(w, r, principal)
	if !ok {
		return
	}
	s := b.lookup(sid, principal)
	if s == nil {
		b.decide(r, principal, mcp.Legacy, sid, "DELETE", http.StatusNotFound, "no such session for this principal")
		writeError(w, http.StatusNotFound, nil, mcp.CodeRequestTimeout, "Session not found", nil)
		return
	}
	b.endSession(s, "ended by the client (DELETE)", true)
	b.decide(r, principal, mcp.Legacy, sid, "DELETE", http.StatusNoContent, "session ended")
	w.WriteHeader(http.StatusNoContent)
}

// unavailable answers 503 for a request no process could be had for.
func (b *Bridge) unavailable(w http.ResponseWriter, r *http.Request, principal string, era mcp.Era, m mcp.Msg, err error) {
	b.decide(r, principal, era, "", m.Method, http.StatusServiceUnavailable, err.Error())
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, m.ID, mcp.CodeInternal, "could not start the vat's process: "+err.Error(), nil)
}

// writeError answers a JSON-RPC error with an HTTP status.
func writeError(w http.ResponseWriter, status int, id []byte, code int, msg string, data any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(mcp.ErrorResponse(id, code, msg, data))
}

// acceptsSSE reports whether the request's Accept takes an event stream.
func acceptsSSE(r *http.Request) bool {
	ok, _ := accepts(r)
	return ok
}

// prefersSSE reports whether the request's Accept prefers an event
// stream to JSON.
func prefersSSE(r *http.Request) bool {
	_, p := accepts(r)
	return p
}

// accepts reads the request's Accept: whether it takes an event stream,
// and whether it prefers one to JSON (a higher q, or the same q and named
// first).
func accepts(r *http.Request) (sse, prefersSSE bool) {
	sseQ, jsonQ := -1.0, -1.0
	ssePos, jsonPos := -1, -1
	pos := 0
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			mt = strings.ToLower(strings.TrimSpace(mt))
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(strings.TrimSpace(k), "q") {
					if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
						q = f
					}
				}
			}
			pos++
			switch mt {
			case "text/event-stream":
				sseQ, ssePos = q, pos
			case "application/json":
				jsonQ, jsonPos = q, pos
			case "*/*", "text/*":
				if sseQ < 0 {
					sseQ = q
				}
			}
		}
	}
	sse = sseQ > 0
	prefersSSE = sse && (sseQ > jsonQ || (sseQ == jsonQ && ssePos > 0 && (jsonPos < 0 || ssePos < jsonPos)))
	return sse, prefersSSE
}

var (
	errClosed = errors.New("the vat is stopping")
	errFull   = errors.New("the vat runs as many processes as it may, each in use")
)

// acquire gives o a process: the spare if there is one, else a new one
// (ending a session when the vat is at its bound: lruLocked).
// A process for a principal with secrets (env) is always a new one: the
// spare was started without them.
func (b *Bridge) acquire(o owner, env []string) (*proc, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, errClosed
	}
	if b.crashing != "" {
		b.mu.Unlock()
		return nil, errString("crashing: " + b.crashing)
	}
	if sp := b.spare; sp != nil && len(env) == 0 {
		b.spare = nil
		// A spare that ended just now is not handed out: gone() read
		// its owner (none) under the same lock, and would tell o
		// nothing. A new process is started instead, below.
		sp.mu.Lock()
		alive := sp.exitText == ""
		if alive {
			sp.owner = o
			sp.lastUse = time.Now()
		}
		sp.mu.Unlock()
		if alive {
			b.mu.Unlock()
			b.refillSpare()
			return sp, nil
		}
	}
	for len(b.procs)+b.spawning >= b.cfg.MaxProcs {
		victim := b.lruLocked(principalOf(o))
		if victim == nil {
			b.mu.Unlock()
			return nil, errFull
		}
		b.mu.Unlock()
		victim()
		b.mu.Lock()
	}
	b.spawning++
	b.mu.Unlock()
	p, err := b.spawn(env, func(p *proc) {
		b.spawning--
		p.owner = o
		b.procs[p] = true
	})
	if err != nil {
		b.mu.Lock()
		b.spawning--
		b.mu.Unlock()
		b.setLastError(err.Error())
		return nil, err
	}
	b.refillSpare()
	return p, nil
}

// refillSpare starts a spare process when there is none and room for one.
func (b *Bridge) refillSpare() {
	b.mu.Lock()
	if b.cfg.NoSpare || b.closed || b.crashing != "" || b.spare != nil || b.spawning > 0 || len(b.procs) >= b.cfg.MaxProcs {
		b.mu.Unlock()
		return
	}
	b.spawning++
	b.mu.Unlock()
	go func() {
		extra := false
		p, err := b.spawn(nil, func(p *proc) {
			b.spawning--
			b.procs[p] = true
			if b.closed || b.spare != nil {
				extra = true
				return
			}
			b.spare = p
		})
		if err != nil {
			b.mu.Lock()
			b.spawning--
			b.mu.Unlock()
			b.setLastError("starting a spare process: " + err.Error())
			return
		}
		if extra {
			p.stop()
		}
	}()
}

// principalOf is the principal o serves: a session's, or the key of a
// shared or stateless process ("" in ModeSingle, and for no owner).
func principalOf(o owner) string {
	switch o := o.(type) {
	case *session:
		return o.principal
	case *sharedOwner:
		return o.key
	case *modernOwner:
		return o.key
	}
	return ""
}

// lruLocked picks what to end to make room for a process of principal
// asking: a session, or stateless process with no call in flight, of
// the holder (mcp.Holder) holding the most processes (asking counted with
// the one it asks for), the one used longest ago among them. So a client
// that opens session after session, under one principal or under many of
// its own header values, ends its own, never one of a client holding
// fewer. A shared process (ModeShared) serves all its principal's
// sessions and goes only when its holder holds more than the one asking,
// or is the one asking and holds another. It returns the func that ends
// it, or nil when nothing may go.
func (b *Bridge) lruLocked(asking string) func() {
	asker := mcp.Holder(asking)
	held := map[string]int{asker: 1}
	for p := range b.procs {
		p.mu.Lock()
		o := p.owner
		p.mu.Unlock()
		if o != nil {
			held[mcp.Holder(principalOf(o))]++
		}
	}
	var oldest time.Time
	most := 0
	var pick func()
	better := func(principal string, t time.Time) bool {
		n := held[mcp.Holder(principal)]
		if pick == nil || n > most || n == most && t.Before(oldest) {
			most, oldest = n, t
			return true
		}
		return false
	}
	for _, s := range b.sessions {
		s.mu.Lock()
		t := s.lastPOST
		s.mu.Unlock()
		if s.own && better(s.principal, t) {
			pick = func() {
				b.endSession(s, "ended to make room: the vat is at its process limit", false)
				s.p.stop() // gone (and so uncounted) before the room is taken
			}
		}
	}
	for p := range b.procs {
		p.mu.Lock()
		t, n, o := p.lastUse, len(p.calls), p.owner
		p.mu.Unlock()
		if mo, ok := o.(*modernOwner); ok && n == 0 && better(mo.key, t) {
			pick = func() { p.stop() }
		}
	}
	for _, o := range b.shared {
		p := o.proc()
		h := mcp.Holder(o.key)
		if o.key == "" || p == nil || !b.procs[p] || !(held[h] > held[asker] || h == asker && held[h] > 1) {
			continue // ModeSingle's, one restarting, or a fair share
		}
		p.mu.Lock()
		t := p.lastUse
		p.mu.Unlock()
		if better(o.key, t) {
			pick = func() { p.stop() } // its sessions end with it (exited)
		}
	}
	return pick
}

// procGone forgets a process that has ended.
func (b *Bridge) procGone(p *proc, msg string, stopped bool) {
	b.mu.Lock()
	delete(b.procs, p)
	if b.spare == p {
		b.spare = nil
	}
	for k, m := range b.modern {
		if m.p == p {
			delete(b.modern, k)
		}
	}
	for k, sh := range b.shared {
		if sh.proc() == p {
			delete(b.shared, k)
		}
	}
	if !stopped {
		now := time.Now()
		b.exits = append(b.exits, now)
		for len(b.exits) > 0 && now.Sub(b.exits[0]) > CrashWindow {
			b.exits = b.exits[1:]
		}
		if len(b.exits) >= CrashLoop && b.crashing == "" {
			b.crashing = fmt.Sprintf("its process exited %d times in %v (last: %s); no more are started until the vat is restarted", len(b.exits), CrashWindow, msg)
		}
	}
	b.mu.Unlock()
	if !stopped {
		b.stats.Exited.Add(1)
		b.logVat(p, "exited", msg)
	}
	b.refillSpare()
}

// janitor ends idle sessions and stateless processes.
func (b *Bridge) janitor() {
	defer b.wg.Done()
	tick := time.NewTicker(max(b.cfg.Idle/4, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-tick.C:
		}
		cut := time.Now().Add(-b.cfg.Idle)
		b.mu.Lock()
		var idle []*session
		for _, s := range b.sessions {
			s.mu.Lock()
			if s.lastPOST.Before(cut) {
				idle = append(idle, s)
			}
			s.mu.Unlock()
		}
		var quiet []*proc
		for p := range b.procs {
			p.mu.Lock()
			o := p.owner
			idle := len(p.calls) == 0 && p.lastUse.Before(cut)
			p.mu.Unlock()
			switch o := o.(type) {
			case *modernOwner:
				if idle {
					quiet = append(quiet, p)
				}
			case *sharedOwner:
				o.mu.Lock()
				empty := len(o.sessions) == 0
				o.mu.Unlock()
				if idle && empty {
					quiet = append(quiet, p)
				}
			}
		}
		b.mu.Unlock()
		for _, s := range idle {
			b.endSession(s, fmt.Sprintf("idle for %v", b.cfg.Idle), true)
		}
		for _, p := range quiet {
			go p.stop()
		}
		b.sweepStreams()
	}
}

func (b *Bridge) setLastError(msg string) {
	b.mu.Lock()
	b.lastErr = msg
	b.lastAt = time.Now()
	b.mu.Unlock()
}

func (b *Bridge) count(c *atomic.Int64) { c.Add(1) }

// touch starts a call's timeout again (it showed progress), while it has
// run less than MaxRequestTime.
func (b *Bridge) touch(c *call) {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	if c.timer == nil {
		return
	}
	left := b.cfg.MaxRequestTime - time.Since(c.started)
	c.timer.Reset(max(0, min(left, b.cfg.RequestTimeout)))
}

// Log attribute keys: one record per decision carries all of them.
const (
	keyVat       = "vat"
	keyPrincipal = "principal"
	keyEra       = "era"
	keySession   = "session"
	keyMethod    = "method"
	keyResult    = "result"
	keyReason    = "reason"
	keyProc      = "proc"
)

// decide logs one decision about a request.
func (b *Bridge) decide(r *http.Request, principal string, era mcp.Era, session, method string, status int, reason string) {
	level := slog.LevelInfo
	if status >= 400 {
		level = slog.LevelWarn
	}
	b.cfg.Logger.LogAttrs(r.Context(), level, "mcp", slog.String(keyVat, b.cfg.Vat), slog.String(keyPrincipal, principal),
		slog.String(keyEra, string(era)), slog.String(keySession, session), slog.String(keyMethod, method),
		slog.Int(keyResult, status), slog.String(keyReason, reason))
}

// logVat logs one decision about what a process did.
func (b *Bridge) logVat(p *proc, result, reason string) {
	b.cfg.Logger.Warn("mcp", keyVat, b.cfg.Vat, keyPrincipal, "", keyEra, "", keySession, "", keyMethod, "",
		keyResult, result, keyReason, reason, keyProc, p.n)
}

// noiseLogged is how many dropped lines of one process are logged one
// by one; past it, one record in every noiseEvery says how many.
const (
	noiseLogged = 20
	noiseEvery  = 1000
)

// dropped counts and logs a stdout line that is not a message.
func (b *Bridge) dropped(p *proc, line []byte, err error) {
	b.count(&b.stats.Dropped)
	p.mu.Lock()
	p.noise++
	n := p.noise
	p.mu.Unlock()
	if n > noiseLogged {
		if n%noiseEvery == 0 {
			b.logVat(p, "dropped", fmt.Sprintf("%d stdout lines that are not JSON-RPC so far (the first %d were logged)", n, noiseLogged))
		}
		return
	}
	shown := line
	if len(shown) > 200 {
		shown = shown[:200]
	}
	b.logVat(p, "dropped", fmt.Sprintf("a stdout line that is %v: %q", err, shown))
}

// vatLog queues one line of a process's stderr for the vat's log. It
// never blocks: a log slower than the processes' stderr loses lines
// (counted), never a process's stdout, which a blocked stderr would stop.
func (b *Bridge) vatLog(line []byte) {
	buf := make([]byte, 0, len(line)+1)
	select {
	case b.stderr <- append(append(buf, line...), '\n'):
	default:
		b.count(&b.stats.StderrLost)
	}
}

// stderrQueue is how many stderr lines wait for the vat's log.
const stderrQueue = 4096

// writeStderr writes the queued stderr lines to the vat's log.
func (b *Bridge) writeStderr() {
	defer b.wg.Done()
	for {
		select {
		case line := <-b.stderr:
			_, _ = b.cfg.VatLog.Write(line)
		case <-b.stop:
			for {
				select {
				case line := <-b.stderr:
					_, _ = b.cfg.VatLog.Write(line)
				default:
					return
				}
			}
		}
	}
}
