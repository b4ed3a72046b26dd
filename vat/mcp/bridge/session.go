package bridge

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"toybox/vat/mcp"
)

// session is one legacy-era session: a client's, bound to its principal.
type session struct {
	id, principal string
	env           []string // the principal's secrets (R22), for its processes
	b             *Bridge
	p             *proc
	own           bool         // the process is the session's alone (ModeSession)
	sh            *sharedOwner // the process it shares (ModeShared, ModeSingle)
	// fwd is set for a session bridged to a modern-only vat: the
	// client's capabilities, sent in each request's _meta.
	fwd []byte

	mu       sync.Mutex
	version  string // negotiated
	lastPOST time.Time
	ended    bool
	get      *stream
	streams  map[string]*stream // POST streams a client may resume
	inflight map[*call]bool
	batched  int               // calls of batches being sent, not yet in inflight
	srvReqs  map[string]srvReq // ids toybox gave the vat's requests
	nextSrv  int64
	subs     map[string]bool // resources subscribed (shared process)
	level    int             // its logging/setLevel (shared process; 0: not set)
	ring     ring            // what its streams keep for a resume, together
}

// proc is the process serving s now (a shared one may be replaced).
func (s *session) proc() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

// srvReq is a request from the vat waiting for the client's answer.
type srvReq struct {
	vatID []byte
	p     *proc
}

// streamID is a random stream id within a session: no '_' (the event id
// separator).
func streamID() string { return rand.Text()[:12] }

func (b *Bridge) newSession(principal string, env []string) *session {
	s := &session{
		id: mcp.NewSessionID(), principal: principal, env: env, b: b,
		lastPOST: time.Now(), streams: map[string]*stream{},
		inflight: map[*call]bool{}, srvReqs: map[string]srvReq{}, subs: map[string]bool{},
		ring: ring{h: &b.held, holder: mcp.Holder(principal)},
	}
	s.get = s.newStream()
	s.get.get = true
	return s
}

// newStream returns a resumable stream of s, bounded by its ring.
func (s *session) newStream() *stream {
	st := newStream(streamID(), true)
	st.ring = &s.ring
	return st
}

// lookup returns the session sid of principal, or nil: a session of
// another principal is as unknown as one that never was.
func (b *Bridge) lookup(sid, principal string) *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[sid]
	if s == nil || s.principal != principal {
		return nil
	}
	return s
}

// postLegacy serves one message of the 2025 revisions.
func (b *Bridge) postLegacy(w http.ResponseWriter, r *http.Request, principal string, m mcp.Msg) {
	sid := r.Header.Get(mcp.HeaderSession)
	if sid == "" {
		if m.Kind == mcp.KindRequest && m.Method == "initialize" {
			b.initialize(w, r, principal, m)
			return
		}
		b.decide(r, principal, mcp.Legacy, "", m.Method, http.StatusBadRequest, "no Mcp-Session-Id and not an initialize")
		writeError(w, http.StatusBadRequest, m.ID, mcp.CodeInvalidRequest, "Bad Request: no Mcp-Session-Id (send initialize first)", nil)
		return
	}
	s := b.lookup(sid, principal)
	if s == nil {
		b.decide(r, principal, mcp.Legacy, sid, m.Method, http.StatusNotFound, "no such session for this principal")
		writeError(w, http.StatusNotFound, m.ID, mcp.CodeRequestTimeout, "Session not found", nil)
		return
	}
	if hv := r.Header.Get(mcp.HeaderVersion); hv != "" && !slices.Contains(mcp.LegacyVersions, hv) {
		b.decide(r, principal, mcp.Legacy, sid, m.Method, http.StatusBadRequest, "unsupported MCP-Protocol-Version "+hv)
		writeError(w, http.StatusBadRequest, m.ID, mcp.CodeInvalidRequest, "Bad Request: unsupported protocol version "+strconv.Quote(hv), map[string]any{"supported": mcp.LegacyVersions})
		return
	}
	s.mu.Lock()
	s.lastPOST = time.Now()
	s.mu.Unlock()
	switch m.Kind {
	case mcp.KindRequest:
		s.request(w, r, m)
	case mcp.KindNotification:
		s.notification(m)
		b.decide(r, principal, mcp.Legacy, sid, m.Method, http.StatusAccepted, "forwarded")
		w.WriteHeader(http.StatusAccepted)
	case mcp.KindResponse:
		if err := s.answer(m); err != "" {
			b.decide(r, principal, mcp.Legacy, sid, "", http.StatusBadRequest, err)
			writeError(w, http.StatusBadRequest, nil, mcp.CodeInvalidRequest, err, nil)
			return
		}
		b.decide(r, principal, mcp.Legacy, sid, "", http.StatusAccepted, "an answer to the vat's request "+string(m.ID))
		w.WriteHeader(http.StatusAccepted)
	}
}

// initialize starts a session: its own process (a spare's, if one is
// ready) in ModeSession, the principal's shared one otherwise.
func (b *Bridge) initialize(w http.ResponseWriter, r *http.Request, principal string, m mcp.Msg) {
	s := b.newSession(principal, principalEnv(r))
	if b.cfg.Era == mcp.Modern {
		b.initializeForward(w, r, s, m)
		return
	}
	if b.cfg.Mode != ModeSession {
		b.initializeShared(w, r, s, m)
		return
	}
	p, err := b.acquire(s, s.env)
	if err != nil {
		b.unavailable(w, r, principal, mcp.Legacy, m, err)
		return
	}
	s.p, s.own = p, true
	requested, _ := m.GetString("params", "protocolVersion")
	s.version = requested
	b.mu.Lock()
	b.sessions[s.id] = s
	b.mu.Unlock()
	st := s.newStream()
	s.mu.Lock()
	s.streams[st.id] = st
	s.mu.Unlock()
	// This POST reads it from before its answer can come: past the
	// bounds of what the bridge keeps, it is no stream no client reads.
	sl := st.attach()
	c := &call{st: st, sess: s}
	var refused atomic.Bool // written by the reader, read here
	c.onDone = func(resp mcp.Msg, parsed bool) {
		if !parsed || resp.Result() == nil {
			refused.Store(true)
			return
		}
		var res struct {
			ProtocolVersion string          `json:"protocolVersion"`
			ServerInfo      json.RawMessage `json:"serverInfo"`
		}
		if json.Unmarshal(resp.Result(), &res) == nil {
			s.mu.Lock()
			s.version = res.ProtocolVersion
			s.mu.Unlock()
			b.noteServer(mcp.Legacy, res.ServerInfo)
		}
	}
	if err := p.send(m, c); err != nil {
		st.detach(sl)
		b.endSession(s, "the process could not be written to", true)
		b.decide(r, principal, mcp.Legacy, "", m.Method, http.StatusServiceUnavailable, err.Error())
		writeError(w, http.StatusServiceUnavailable, m.ID, mcp.CodeInternal, err.Error(), nil)
		return
	}
	if testHookSent != nil {
		testHookSent(s, st)
	}
	done := b.serve(w, r, st, writeOpts{lazy: !prefersSSE(r), jsonOnly: !acceptsSSE(r), prime: requested >= "2025-11-25", session: s.id, lazyWait: b.cfg.LazyWait, slot: sl, id: m.ID})
	s.streamDone(st, done)
	if refused.Load() {
		// A refused initialize leaves no session behind.
		b.endSession(s, "its initialize failed", true)
		b.decide(r, principal, mcp.Legacy, s.id, m.Method, http.StatusOK, "initialize refused by the vat; session ended")
		return
	}
	if st.wasLost() {
		// Its client was told the initialize failed.
		b.endSession(s, "its initialize's answer was dropped", true)
		b.decide(r, principal, mcp.Legacy, s.id, m.Method, http.StatusOK, lostAnswer+"; session ended")
		return
	}
	b.decide(r, principal, mcp.Legacy, s.id, m.Method, http.StatusOK, "session started on process "+strconv.Itoa(p.n))
}

// maxStatsInfo bounds the serverInfo the counters show: the supervisor
// reads at most 64 KiB of them, and one icon as a data: URI can be more.
const maxStatsInfo = 4 << 10

// statsInfo is what the counters keep of a vat's serverInfo: all of it up
// to maxStatsInfo bytes, else its name, version and title, each cut at
// 256 bytes.
func statsInfo(info json.RawMessage) json.RawMessage {
	if len(info) <= maxStatsInfo {
		return bytes.Clone(info)
	}
	var si struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
		Title   string `json:"title,omitempty"`
	}
	if json.Unmarshal(info, &si) != nil {
		return nil
	}
	clip := func(s string) string {
		const n = 256
		if len(s) <= n {
			return s
		}
		i := n
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		return s[:i] + "…"
	}
	si.Name, si.Version, si.Title = clip(si.Name), clip(si.Version), clip(si.Title)
	out, _ := json.Marshal(si)
	return out
}

// noteServer records the vat's serverInfo and that it answered in era
// (an initialize: the 2025 revisions; a server/discover: 2026-07-28).
func (b *Bridge) noteServer(era mcp.Era, info json.RawMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(info) > 0 && b.info == nil {
		b.info = statsInfo(info)
	}
	switch era {
	case mcp.Legacy:
		b.legacyOK = true
	case mcp.Modern:
		b.modernOK = 1
	}
}

// request forwards a client's request in the session and answers it.
func (s *session) request(w http.ResponseWriter, r *http.Request, m mcp.Msg) {
	b := s.b
	if s.sh != nil {
		if handled := s.sh.local(w, r, s, m); handled {
			return
		}
	}
	s.mu.Lock()
	version := s.version
	s.mu.Unlock()
	hit, keep := b.cached(r, m, version)
	if hit != nil {
		b.serveCached(w, r, hit, writeOpts{lazy: !prefersSSE(r), jsonOnly: !acceptsSSE(r), lazyWait: b.cfg.LazyWait})
		b.decide(r, s.principal, mcp.Legacy, s.id, m.Method, http.StatusOK, "answered from the cache")
		return
	}
	if s.fwd != nil {
		if s.forwardLocal(w, r, m) {
			return
		}
		var err error
		if m, err = s.withMeta(m); err != nil {
			writeError(w, http.StatusBadRequest, m.ID, mcp.CodeInvalidRequest, err.Error(), nil)
			return
		}
	}
	st := s.newStream()
	c := &call{st: st, sess: s, onDone: keep}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, m.ID, mcp.CodeRequestTimeout, "Session not found", nil)
		return
	}
	if len(s.inflight)+s.batched >= maxSessionStreams || len(s.streams) >= maxSessionStreams && !s.forgetEndedLocked() {
		s.mu.Unlock()
		s.busy(w, r, m.Method, m.ID)
		return
	}
	s.streams[st.id] = st
	prime := s.version >= "2025-11-25"
	s.mu.Unlock()
	// This POST reads it from before its answer can come: past the
	// bounds of what the bridge keeps, it is no stream no client reads.
	sl := st.attach()
	s.track(c)
	if err := s.proc().send(m, c); err != nil {
		st.detach(sl)
		s.mu.Lock()
		delete(s.inflight, c)
		delete(s.streams, st.id)
		s.mu.Unlock()
		if s.fwd != nil {
			// The stateless process it was bridged to is gone: the
			// session with it, so the client starts again.
			b.endSession(s, "its stateless process is gone", false)
			b.decide(r, s.principal, mcp.Legacy, s.id, m.Method, http.StatusNotFound, err.Error())
			writeError(w, http.StatusNotFound, m.ID, mcp.CodeRequestTimeout, "Session not found", nil)
			return
		}
		b.decide(r, s.principal, mcp.Legacy, s.id, m.Method, http.StatusOK, err.Error())
		writeError(w, http.StatusOK, m.ID, mcp.CodeInternal, err.Error(), nil)
		return
	}
	if testHookSent != nil {
		testHookSent(s, st)
	}
	done := b.serve(w, r, st, writeOpts{lazy: !prefersSSE(r), jsonOnly: !acceptsSSE(r), prime: prime, lazyWait: b.cfg.LazyWait, slot: sl, id: m.ID})
	s.streamDone(st, done)
	reason := "answered"
	switch {
	case st.wasLost():
		reason = lostAnswer
	case !done:
		// Not a cancellation: the call runs on, and its answer waits for
		// the client to resume the stream.
		reason = "the client went before the answer; the call goes on"
	}
	b.decide(r, s.principal, mcp.Legacy, s.id, m.Method, http.StatusOK, reason)
}

// testHookResume, if set, runs once a resuming GET found the events after
// its Last-Event-ID kept, before its stream reads them (tests).
var testHookResume func(s *session, st *stream)

// testHookSent, if set, runs once a session's call is sent to its
// process, before its answer is served (the window a test drops it in).
var testHookSent func(s *session, st *stream)

// track counts c among the session's calls in flight until it is done.
func (s *session) track(c *call) {
	s.mu.Lock()
	s.inflight[c] = true
	s.mu.Unlock()
	c.onEnd = func() {
		s.mu.Lock()
		delete(s.inflight, c)
		s.mu.Unlock()
	}
}

// streamDone forgets a POST stream once its end was written.
func (s *session) streamDone(st *stream, done bool) {
	if !done {
		return
	}
	s.mu.Lock()
	delete(s.streams, st.id)
	s.mu.Unlock()
	s.ring.forget(st)
}

// streamKeep is how long a POST stream's events wait, after its end, for
// a client to resume it.
const streamKeep = 5 * time.Minute

// maxSessionStreams bounds the POST streams one session keeps (each call
// in flight, and each ended one a client left before its answer, waiting
// streamKeep for a resume) and its calls in flight, a batch's included.
// Past it the oldest ended stream goes; with none ended, or as many
// calls in flight, a new call is refused.
const maxSessionStreams = 1000

// busy answers a call refused because the session has maxSessionStreams
// calls in flight.
func (s *session) busy(w http.ResponseWriter, r *http.Request, method string, id []byte) {
	reason := fmt.Sprintf("the session has %d calls in flight; more wait for their answers", maxSessionStreams)
	s.b.decide(r, s.principal, mcp.Legacy, s.id, method, http.StatusServiceUnavailable, reason)
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, id, mcp.CodeInternal, reason, nil)
}

// forgetEndedLocked forgets the POST stream of s that ended first (s.mu
// held), and reports whether there was one.
func (s *session) forgetEndedLocked() bool {
	var oldest *stream
	var at time.Time
	for _, st := range s.streams {
		st.mu.Lock()
		final, t := st.final, st.finalAt
		st.mu.Unlock()
		if final && (oldest == nil || t.Before(at)) {
			oldest, at = st, t
		}
	}
	if oldest == nil {
		return false
	}
	delete(s.streams, oldest.id)
	s.ring.forget(oldest)
	return true
}

// sweepStreams forgets ended POST streams no one resumed.
func (b *Bridge) sweepStreams() {
	cut := time.Now().Add(-streamKeep)
	b.mu.Lock()
	ss := make([]*session, 0, len(b.sessions))
	for _, s := range b.sessions {
		ss = append(ss, s)
	}
	b.mu.Unlock()
	for _, s := range ss {
		s.mu.Lock()
		for id, st := range s.streams {
			st.mu.Lock()
			old := st.final && st.finalAt.Before(cut)
			st.mu.Unlock()
			if old {
				delete(s.streams, id)
				s.ring.forget(st)
			}
		}
		s.mu.Unlock()
	}
}

// notification forwards a client's notification, mapping the ids in it.
func (s *session) notification(m mcp.Msg) {
	switch m.Method {
	case "notifications/cancelled":
		rid, _ := m.Get("params", "requestId")
		s.mu.Lock()
		var hit []*call
		for c := range s.inflight {
			if bytes.Equal(c.clientID, rid) {
				hit = append(hit, c)
			}
		}
		s.mu.Unlock()
		reason, _ := m.GetString("params", "reason")
		p := s.proc()
		for _, c := range hit {
			p.cancel(c, reason)
			c.st.end()
			if c.onDone != nil {
				c.onDone(mcp.Msg{}, false)
			}
			if c.onEnd != nil {
				c.onEnd()
			}
		}
		return
	case "notifications/initialized":
		if s.sh != nil || s.fwd != nil {
			return // toybox initialized the shared process itself
		}
	}
	_ = s.proc().write(m.Raw)
}

// answer maps a client's response to the vat's request back to the vat's
// id; the reason when it answers nothing asked.
func (s *session) answer(m mcp.Msg) string {
	s.mu.Lock()
	req, ok := s.srvReqs[string(m.ID)]
	delete(s.srvReqs, string(m.ID))
	s.mu.Unlock()
	if !ok {
		return "a response to no request of the vat's (id " + string(m.ID) + ")"
	}
	s.mu.Lock()
	for c := range s.inflight {
		s.b.touch(c) // the client answered: the calls waiting on it go on
	}
	s.mu.Unlock()
	_ = req.p.write(m.WithID(req.vatID))
	return ""
}

// fromVat routes what the session's process sends that is not an answer:
// a request to the client goes on the stream of the one call in flight,
// else on the GET stream; notifications likewise.
func (s *session) fromVat(p *proc, m mcp.Msg) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	target := s.get
	if len(s.inflight) == 1 {
		for c := range s.inflight {
			target = c.st
			s.b.touch(c) // a question for its client is progress
		}
	}
	switch m.Kind {
	case mcp.KindRequest:
		s.nextSrv++
		id := `"tb-` + strconv.FormatInt(s.nextSrv, 10) + `"`
		s.srvReqs[id] = srvReq{vatID: bytes.Clone(m.ID), p: p}
		s.mu.Unlock()
		target.push(m.WithID([]byte(id)), false)
		if target == s.get && !s.get.attached() {
			go s.hold(id, m.Method)
		}
		return
	case mcp.KindNotification:
		raw := m.Raw
		if m.Method == "notifications/cancelled" {
			// The vat gave up on a request to the client: name it by
			// the id the client knows.
			if rid, ok := m.Get("params", "requestId"); ok {
				for id, req := range s.srvReqs {
					if bytes.Equal(req.vatID, rid) && req.p == p {
						raw, _ = mcp.Set(raw, []string{"params", "requestId"}, []byte(id))
						delete(s.srvReqs, id)
					}
				}
			}
		}
		if m.Method != "notifications/message" && m.Method != "notifications/cancelled" {
			target = s.get
		}
		s.mu.Unlock()
		target.push(raw, false)
	default:
		s.mu.Unlock()
	}
}

// hold waits for a client stream to take a server request; with none
// in time, the vat is told.
func (s *session) hold(id, method string) {
	t := time.NewTimer(s.b.cfg.Hold)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.C:
			s.mu.Lock()
			req, ok := s.srvReqs[id]
			delete(s.srvReqs, id)
			s.mu.Unlock()
			if ok {
				_ = req.p.write(mcp.ErrorResponse(req.vatID, mcp.CodeInternal, "the client has no stream open for "+method, nil))
				s.b.logVat(req.p, "refused", method+": the client had no stream open in "+s.b.cfg.Hold.String())
			}
			return
		case <-tick.C:
			if s.get.attached() {
				return
			}
			s.mu.Lock()
			_, waiting := s.srvReqs[id]
			s.mu.Unlock()
			if !waiting {
				return
			}
		}
	}
}

// exited ends a session whose process is gone (ModeSession): the next
// request gets 404 and the client starts again.
func (s *session) exited(p *proc) {
	s.b.endSession(s, "its process exited ("+p.exitText+")", false)
}

// endSession forgets s, detaches its streams, and stops its own process.
func (b *Bridge) endSession(s *session, reason string, stopProc bool) {
	b.mu.Lock()
	if b.sessions[s.id] == s {
		delete(b.sessions, s.id)
	}
	b.mu.Unlock()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	streams := []*stream{s.get}
	for _, st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	for _, st := range streams {
		st.closeAll()
	}
	s.ring.close()
	if s.sh != nil {
		s.sh.leave(s)
	}
	if s.own && stopProc && s.p != nil {
		go s.p.stop()
	}
	b.cfg.Logger.Info("mcp", keyVat, b.cfg.Vat, keyPrincipal, s.principal, keyEra, string(mcp.Legacy),
		keySession, s.id, keyMethod, "", keyResult, "ended", keyReason, reason)
}

// getLegacy serves a session's GET: its standalone stream (a second GET
// takes it over from the first, never 409), or with Last-Event-ID the
// stream that event was on, replayed from there.
func (b *Bridge) getLegacy(w http.ResponseWriter, r *http.Request, principal, sid string) {
	s := b.lookup(sid, principal)
	if s == nil {
		b.decide(r, principal, mcp.Legacy, sid, "GET", http.StatusNotFound, "no such session for this principal")
		writeError(w, http.StatusNotFound, nil, mcp.CodeRequestTimeout, "Session not found", nil)
		return
	}
	if !acceptsSSE(r) {
		b.decide(r, principal, mcp.Legacy, sid, "GET", http.StatusNotAcceptable, "a GET that does not accept text/event-stream")
		http.Error(w, "a GET must accept text/event-stream", http.StatusNotAcceptable)
		return
	}
	s.mu.Lock()
	prime := s.version >= "2025-11-25"
	st := s.get
	s.mu.Unlock()
	from := st.deliveredSeq()
	var resume *resumeOpts
	if lei := r.Header.Get(mcp.HeaderLastEvent); lei != "" {
		id, seq, ok := mcp.ParseEventID(lei)
		s.mu.Lock()
		switch {
		case !ok:
			st = nil
		case id == s.get.id:
			st = s.get
		default:
			st = s.streams[id]
		}
		s.mu.Unlock()
		if st == nil {
			b.decide(r, principal, mcp.Legacy, sid, "GET", http.StatusNotFound, "Last-Event-ID names no stream of this session")
			writeError(w, http.StatusNotFound, nil, mcp.CodeRequestTimeout, "no such stream in this session", nil)
			return
		}
		gone := func() {
			b.decide(r, principal, mcp.Legacy, sid, "GET", http.StatusNotFound, "Last-Event-ID "+lei+": the events after it are no longer kept")
			writeError(w, http.StatusNotFound, nil, mcp.CodeRequestTimeout, "the events after "+lei+" are no longer kept", nil)
		}
		if seq < st.goneSeq() {
			gone()
			return
		}
		from, prime = seq, false
		// The bounds may drop them before serve reads: it reads once,
		// then answers 404 or starts the stream (never an empty 200).
		resume = &resumeOpts{gone: gone}
	} else {
		// A GET that resumes nothing starts after what was dropped.
		from = max(from, st.goneSeq())
	}
	started := func() {
		b.decide(r, principal, mcp.Legacy, sid, "GET", http.StatusOK, "stream "+st.id+" from event "+strconv.FormatInt(from, 10))
	}
	if resume != nil {
		resume.started = started
		if testHookResume != nil {
			testHookResume(s, st)
		}
	} else {
		started()
	}
	done := b.serve(w, r, st, writeOpts{prime: prime, from: from, resume: resume})
	if !st.get {
		s.streamDone(st, done)
	}
}

// batchVersion is the one revision with JSON-RPC batches.
const batchVersion = "2025-03-26"

// postBatch serves a JSON-RPC batch, on a session that negotiated
// 2025-03-26 only (R3). Its requests are answered together, as one JSON
// array, once each has its answer; what the vat sends meanwhile goes as
// for any call.
func (b *Bridge) postBatch(w http.ResponseWriter, r *http.Request, principal string, body []byte) {
	refuse := func(status int, reason string) {
		b.decide(r, principal, mcp.Legacy, r.Header.Get(mcp.HeaderSession), "", status, reason)
		writeError(w, status, nil, mcp.CodeInvalidRequest, reason, nil)
	}
	sid := r.Header.Get(mcp.HeaderSession)
	s := b.lookup(sid, principal)
	if s == nil {
		if sid == "" {
			refuse(http.StatusBadRequest, "a batch with no session (initialize first, alone)")
		} else {
			refuse(http.StatusNotFound, "Session not found")
		}
		return
	}
	s.mu.Lock()
	version := s.version
	s.lastPOST = time.Now()
	s.mu.Unlock()
	if version != batchVersion {
		refuse(http.StatusBadRequest, "a JSON-RPC batch on a "+version+" session (batches are "+batchVersion+" only)")
		return
	}
	parts, err := mcp.SplitBatch(body)
	if err != nil {
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	var msgs []mcp.Msg
	for _, p := range parts {
		m, err := mcp.Parse(p)
		if err != nil {
			refuse(http.StatusBadRequest, "a batch element: "+err.Error())
			return
		}
		if m.Method == "initialize" {
			refuse(http.StatusBadRequest, "initialize in a batch")
			return
		}
		msgs = append(msgs, m)
	}
	requests := 0
	for _, m := range msgs {
		if m.Kind == mcp.KindRequest {
			requests++
		}
	}
	s.mu.Lock()
	if requests > 0 && len(s.inflight)+s.batched+requests > maxSessionStreams {
		s.mu.Unlock()
		s.busy(w, r, "batch", nil)
		return
	}
	s.batched += requests // until each is tracked, below
	s.mu.Unlock()
	var calls []*stream
	var slots []*slot
	var ids [][]byte
	defer func() {
		// A batch is not resumed: its answers are kept no longer.
		for i, st := range calls {
			st.detach(slots[i])
			s.ring.forget(st)
		}
	}()
	for _, m := range msgs {
		switch m.Kind {
		case mcp.KindRequest:
			st := s.newStream()
			// This POST reads it: past the bounds of what the bridge
			// keeps, streams no client reads lose their events first.
			slots = append(slots, st.attach())
			c := &call{st: st, sess: s}
			s.track(c)
			if err := s.proc().send(m, c); err != nil {
				c.onEnd() // never in flight: not counted against the bound
				st.push(mcp.ErrorResponse(m.ID, mcp.CodeInternal, err.Error(), nil), true)
			}
			if testHookSent != nil {
				testHookSent(s, st)
			}
			calls = append(calls, st)
			ids = append(ids, m.ID)
		case mcp.KindNotification:
			s.notification(m)
		case mcp.KindResponse:
			if reason := s.answer(m); reason != "" {
				b.logVat(s.proc(), "dropped", reason)
			}
		}
	}
	s.mu.Lock()
	s.batched -= requests
	s.mu.Unlock()
	if len(calls) == 0 {
		b.decide(r, principal, mcp.Legacy, sid, "batch", http.StatusAccepted, "a batch of notifications and answers")
		w.WriteHeader(http.StatusAccepted)
		return
	}
	answers := make([][]byte, 0, len(calls))
	for i, st := range calls {
		for {
			var fin []byte
			evs, gap := st.after(0)
			if e := finalIn(evs); e != nil {
				fin = e.data
			} else if gap {
				// Its answer, or an event before it, went past the
				// session's bound: it would never come.
				st.answerLost()
				fin = mcp.ErrorResponse(ids[i], mcp.CodeInternal, lostAnswer, nil)
			}
			if fin != nil {
				answers = append(answers, fin)
				break
			}
			select {
			case <-st.notify:
			case <-r.Context().Done():
				b.decide(r, principal, mcp.Legacy, sid, "batch", http.StatusOK, "the client went before the batch's answers")
				return
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("[" + string(bytes.Join(answers, []byte(","))) + "]"))
	b.decide(r, principal, mcp.Legacy, sid, "batch", http.StatusOK, strconv.Itoa(len(answers))+" answers")
}
