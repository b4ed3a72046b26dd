package bridge

import (
	"bytes"
	"net/http"
	"strconv"
	"sync"
	"time"

	"toybox/vat/mcp"
)

// event is one message on a stream; seq numbers it within the stream.
type event struct {
	seq   int64
	data  []byte
	final bool
}

// stream is one logical stream of messages to a client: a POST's answer
// (its response and the messages related to it) or a session's GET
// stream. A resumable stream keeps its events for a client that comes
// back with Last-Event-ID, bounded by its session's ring; its connection
// may come and go.
type stream struct {
	id        string // unique within its session; "" for a stateless answer
	resumable bool
	get       bool  // the session's standalone GET stream
	ring      *ring // the session's share of what the bridge keeps; nil: none

	mu        sync.Mutex
	events    []event
	bytes     int
	next      int64 // the next event's seq; 0 is the priming event
	final     bool  // the final message has been pushed
	finalAt   time.Time
	delivered int64 // the last seq a writer wrote
	gone      int64 // the last seq dropped from events (a session's stream)
	lost      bool  // its client was told its answer was dropped
	notify    chan struct{}
	slot      *slot // the connection writing it now, if any
	// filter rewrites the final message (a bridged answer); nil: as is.
	filter func([]byte) []byte
}

// slot is one connection attached to a stream; closing stop detaches it.
type slot struct{ stop chan struct{} }

// Bounds of what one session's streams keep for replay, together.
const (
	ringEvents = 1000    // events
	ringBytes  = 8 << 20 // bytes
)

func newStream(id string, resumable bool) *stream {
	return &stream{id: id, resumable: resumable, next: 1, notify: make(chan struct{}, 1)}
}

// drop removes event seq, the stream's oldest, from what it keeps. It
// reports whether that was a call's answer no client was sent.
func (s *stream) drop(seq int64) (unsentAnswer bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.events) > 0 && s.events[0].seq == seq {
		unsentAnswer = s.events[0].final && seq > s.delivered
		s.bytes -= len(s.events[0].data)
		s.events = s.events[1:]
		s.gone = seq
	}
	return unsentAnswer
}

// readBy reports whether a client reads the stream now, and whether
// one was sent event seq.
func (s *stream) readBy(seq int64) (read, written bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slot != nil, seq <= s.delivered
}

// goneSeq is the last seq dropped from what the stream keeps: a client
// cannot resume from before it.
func (s *stream) goneSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// push appends a message; final marks the response that ends the stream.
func (s *stream) push(data []byte, final bool) {
	s.mu.Lock()
	if s.final {
		s.mu.Unlock()
		return
	}
	if final && s.filter != nil {
		data = s.filter(data)
	}
	seq := s.next
	s.events = append(s.events, event{seq: seq, data: data, final: final})
	s.next++
	s.bytes += len(data)
	if final {
		s.final = true
		s.finalAt = time.Now()
	}
	// A stream of no session keeps the same bounds on its own.
	for s.ring == nil && len(s.events) > 1 && (len(s.events) > ringEvents || s.bytes > ringBytes) {
		s.bytes -= len(s.events[0].data)
		s.events = s.events[1:]
	}
	s.mu.Unlock()
	if s.ring != nil {
		s.ring.add(s, seq, len(data))
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// end marks the stream ended with no final message (its call was
// cancelled).
func (s *stream) end() {
	s.mu.Lock()
	if !s.final {
		s.final = true
		s.finalAt = time.Now()
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// endedAfter reports whether nothing more will come after seq.
func (s *stream) endedAfter(seq int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final && s.next-1 <= seq
}

// since returns the events after seq.
func (s *stream) since(seq int64) []event {
	evs, _ := s.after(seq)
	return evs
}

// after returns the events after seq that are kept, and reports whether
// one after seq was dropped.
func (s *stream) after(seq int64) ([]event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []event
	for _, e := range s.events {
		if e.seq > seq {
			out = append(out, e)
		}
	}
	return out, s.gone > seq
}

// answerLost ends the stream, which lost its answer or an event before
// it: the caller tells the client instead.
func (s *stream) answerLost() {
	s.mu.Lock()
	s.lost = true
	s.mu.Unlock()
	s.end()
}

// wasLost reports whether the stream's client was told its answer was
// dropped.
func (s *stream) wasLost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// finalIn returns the final event of evs, or nil.
func finalIn(evs []event) *event {
	for i := range evs {
		if evs[i].final {
			return &evs[i]
		}
	}
	return nil
}

// attach makes a new connection the stream's writer, detaching the one
// before (a second GET replaces the first).
func (s *stream) attach() *slot {
	sl := &slot{stop: make(chan struct{})}
	s.mu.Lock()
	old := s.slot
	s.slot = sl
	s.mu.Unlock()
	if old != nil {
		close(old.stop)
	}
	return sl
}

// detach ends sl's hold if it still holds the stream.
func (s *stream) detach(sl *slot) {
	s.mu.Lock()
	if s.slot == sl {
		s.slot = nil
	}
	s.mu.Unlock()
}

// deliveredSeq is the last seq a writer wrote.
func (s *stream) deliveredSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delivered
}

// attached reports whether a connection writes the stream now.
func (s *stream) attached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slot != nil
}

// wrote records that a writer wrote up to seq; a stateless stream drops
// what was written.
func (s *stream) wrote(seq int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq > s.delivered {
		s.delivered = seq
	}
	if !s.resumable {
		for len(s.events) > 0 && s.events[0].seq <= seq {
			s.bytes -= len(s.events[0].data)
			s.events = s.events[1:]
		}
	}
}

// closeAll detaches any writer (the session ended).
func (s *stream) closeAll() {
	s.mu.Lock()
	old := s.slot
	s.slot = nil
	s.mu.Unlock()
	if old != nil {
		close(old.stop)
	}
}

// writeOpts says how serve answers.
type writeOpts struct {
	lazy bool // a POST: JSON if the response comes first
	// sseUnlessError: a lazy answer goes SSE even when the response comes
	// first, unless status gives it an HTTP status of its own (a client
	// that prefers the stream; a stateless error keeps its status).
	sseUnlessError bool
	jsonOnly       bool             // the client takes no event stream
	prime          bool             // send a priming event (2025-11-25 sessions)
	from           int64            // the last seq the client has
	status         func([]byte) int // the HTTP status of a JSON answer (0: 200)
	session        string           // Mcp-Session-Id to set, if any
	lazyWait       time.Duration    // how long a lazy answer waits before SSE
	onGone         func()           // the client went before the end
	// slot is the stream's writer attached by the caller before its call
	// was sent, so its answer is never dropped unread as one of a stream
	// no client reads; nil: serve attaches.
	slot *slot
	// id is the id of the request a POST's stream answers. If the
	// stream loses its answer, or an event before it, the client gets a
	// JSON-RPC error for id. nil: a GET stream, whose connection ends so
	// its client resumes and is told.
	id []byte
	// resume, for a GET that resumes a stream (Last-Event-ID), answers in
	// place of the stream when the events after from are gone by its
	// first read: the caller's check of them and that read are apart, and
	// the bounds may drop them in between. nil: the stream starts at once.
	resume *resumeOpts
}

// resumeOpts is what a resuming GET answers with, found at serve's first
// read of its stream.
type resumeOpts struct {
	started func() // the events are there: the stream starts
	gone    func() // they are gone: answer so (404), the stream unstarted
}

// lostAnswer is the message of the error a client gets for a call whose
// answer was dropped before it was written.
const lostAnswer = "the answer was dropped: past the bound of what the bridge keeps for a resume"

// serve writes the stream to one HTTP response until its final message,
// the client goes, or another connection takes the stream over. It
// reports whether the final message was written.
func (b *Bridge) serve(w http.ResponseWriter, r *http.Request, s *stream, o writeOpts) bool {
	sl := o.slot
	if sl == nil {
		sl = s.attach()
	}
	defer s.detach(sl)
	flusher, _ := w.(http.Flusher)
	sse := !o.lazy
	started := false
	// The keep-alive ticks only on an event stream: a JSON answer (most
	// of them) needs none.
	var keep *time.Ticker
	var keepC <-chan time.Time
	defer func() {
		if keep != nil {
			keep.Stop()
		}
	}()
	if o.session != "" {
		w.Header().Set(mcp.HeaderSession, o.session)
	}
	startSSE := func() {
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		if o.prime && s.resumable {
			// The priming event: an id the client can resume from,
			// before anything else.
			_, _ = w.Write([]byte("id: " + mcp.EventID(s.id, 0) + "\ndata: \n\n"))
		}
		if flusher != nil {
			flusher.Flush()
		}
		started = true
		keep = time.NewTicker(b.cfg.KeepAlive)
		keepC = keep.C
	}
	if sse && o.resume == nil {
		startSSE()
	}
	var lazyTimer <-chan time.Time
	if o.lazy && !o.jsonOnly {
		t := time.NewTimer(o.lazyWait)
		defer t.Stop()
		lazyTimer = t.C
	}
	// send writes and flushes; false when the client has gone.
	send := func(b []byte) bool {
		_, err := w.Write(b)
		if flusher != nil {
			flusher.Flush()
		}
		if err != nil && o.onGone != nil {
			o.onGone()
		}
		return err == nil
	}
	cursor := o.from
	for {
		evs, gap := s.after(cursor)
		if o.resume != nil && !started {
			if gap {
				o.resume.gone()
				return false
			}
			o.resume.started()
			startSSE()
		}
		switch {
		case gap && o.id != nil && finalIn(evs) == nil:
			// A POST's answer, or an event before it, is gone (past
			// the session's bound: ring.add). A client that was given
			// no event id could not resume: each is told now, for its
			// id, rather than left with an empty answer.
			s.answerLost()
			msg := mcp.ErrorResponse(o.id, mcp.CodeInternal, lostAnswer, nil)
			if !started {
				h := w.Header()
				// An initialize's session ends with it (the caller
				// ends it): no id of it goes to the client.
				h.Del(mcp.HeaderSession)
				h.Set("Content-Type", "application/json")
				h.Set("Content-Length", strconv.Itoa(len(msg)))
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(msg)
				if flusher != nil {
					flusher.Flush()
				}
				return true
			}
			return send([]byte("event: message\ndata: " + string(msg) + "\n\n"))
		case gap && o.id == nil:
			// What the client has not had was dropped: the connection
			// ends, and its resume is told the event is gone.
			if !started && !o.jsonOnly {
				startSSE()
			}
			return false
		}
		// A POST's answer still kept is written, though an event before
		// it went.
		if !started && len(evs) > 0 {
			first := evs[0]
			errStatus := 0
			if first.final && o.status != nil {
				errStatus = o.status(first.data)
			}
			switch {
			case (first.final && (!o.sseUnlessError || errStatus != 0)) || o.jsonOnly:
				// JSON: the response came first (or the client takes
				// nothing else); interim messages are dropped.
				fin := finalIn(evs)
				if fin == nil {
					cursor = evs[len(evs)-1].seq
					s.wrote(cursor)
					break
				}
				status := 0
				if o.status != nil {
					status = o.status(fin.data)
				}
				h := w.Header()
				if o.session != "" && !isResult(fin.data) {
					// An initialize the vat refused opened no
					// session (the caller ends it): no id of it
					// goes to the client.
					h.Del(mcp.HeaderSession)
				}
				h.Set("Content-Type", "application/json")
				h.Set("Content-Length", strconv.Itoa(len(fin.data)))
				if status == 0 {
					status = http.StatusOK
				}
				w.WriteHeader(status)
				_, _ = w.Write(fin.data)
				if flusher != nil {
					// The answer goes now, whole (its length is known), not
					// after the caller's decision record.
					flusher.Flush()
				}
				s.wrote(fin.seq)
				return true
			default:
				startSSE()
			}
		}
		if started && len(evs) > 0 {
			var buf bytes.Buffer
			for _, e := range evs {
				if s.resumable {
					buf.WriteString("id: " + mcp.EventID(s.id, e.seq) + "\n")
				}
				buf.WriteString("event: message\ndata: ")
				buf.Write(e.data)
				buf.WriteString("\n\n")
			}
			if !send(buf.Bytes()) {
				return false
			}
			cursor = evs[len(evs)-1].seq
			s.wrote(cursor)
			if evs[len(evs)-1].final {
				return true
			}
		}
		if s.endedAfter(cursor) {
			if !started {
				w.WriteHeader(http.StatusAccepted)
			}
			return true
		}
		select {
		case <-s.notify:
		case <-lazyTimer:
			lazyTimer = nil
			if !started {
				startSSE()
			}
		case <-keepC:
			if started && !send([]byte(": keep-alive\n\n")) {
				return false
			}
		case <-r.Context().Done():
			if o.onGone != nil {
				o.onGone()
			}
			return false
		case <-sl.stop:
			return false
		}
	}
}

// isResult reports whether msg is a JSON-RPC response with a result.
func isResult(msg []byte) bool {
	m, err := mcp.Parse(msg)
	return err == nil && m.Result() != nil
}
