package bridge

import (
	"cmp"
	"slices"
	"sync"
)

// The events kept for a resume (Last-Event-ID) are bounded per session
// (ringEvents, ringBytes), per holder and in all. A session costs no
// process in shared and single mode, so with the session's bound alone
// one holder that opened session after session, each leaving a large
// answer unread, held ringBytes per session until the wall's memory ran
// out and the vat ended for every client.
const (
	// heldPerHolder and heldAll bound what is counted, in messages of
	// MaxMessage: one holder's (its largest answer is kept whole), and
	// every holder's together (as much again as the request bodies).
	heldPerHolder = 1
	heldAll       = 3
	// heldOverhead is counted for each event on top of its bytes: its
	// place in its stream and here. So many small events are bounded too.
	heldOverhead = 128
)

// hold counts the events every session's streams keep, per holder
// (mcp.Holder) and in all. Past a bound it drops events (see add).
type hold struct {
	mu       sync.Mutex
	per, all int64 // bounds of what is counted; 0: none
	bytes    int64 // counted in all
	events   int   // counted in all
	by       map[string]*holding
	// dropped counts the events dropped past each bound; answers, the
	// calls' answers among them that no client was sent.
	dropped struct{ session, holder, all, answers int64 }
}

// holding is one holder's events, oldest first.
type holding struct {
	bytes       int64
	first, last *heldEvent
}

// ring is one session's share of the hold: its streams' events, oldest
// first. Past its bounds the session's oldest event goes, whichever
// stream holds it. A session holds at most ringEvents events and
// ringBytes bytes however many streams it opened.
type ring struct {
	h           *hold  // the bridge's
	holder      string // the session's principal's holder
	first, last *heldEvent
	events      int
	bytes       int
	closed      bool // the session ended: nothing can resume its streams
}

// heldEvent is one event a stream keeps, in its session's ring and in
// its holder's holding.
type heldEvent struct {
	st           *stream
	r            *ring
	seq          int64
	n            int   // its bytes
	cost         int64 // n and heldOverhead
	rprev, rnext *heldEvent
	hprev, hnext *heldEvent
}

// lock takes the lock that guards r: its hold's.
func (r *ring) lock() func() {
	r.h.mu.Lock()
	return r.h.mu.Unlock
}

// add counts st's new event seq of n bytes, then drops events past the
// bounds, the new one never:
//
//  1. past the session's, the session's oldest event;
//  2. past the holder's, the holder's oldest event of a stream no client
//     reads, then its oldest one a client already has;
//  3. past the bound of all, likewise the holder's own, then those of the
//     holder that holds the most.
//
// A stream's events go oldest first, so what a stream keeps is always
// its latest events.
func (r *ring) add(st *stream, seq int64, n int) {
	defer r.lock()()
	h := r.h
	if r.closed {
		return
	}
	e := &heldEvent{st: st, r: r, seq: seq, n: n, cost: int64(n) + heldOverhead}
	ho := h.holdingLocked(r.holder)
	e.rprev, e.hprev = r.last, ho.last
	if r.last != nil {
		r.last.rnext = e
	} else {
		r.first = e
	}
	r.last = e
	if ho.last != nil {
		ho.last.hnext = e
	} else {
		ho.first = e
	}
	ho.last = e
	r.events++
	r.bytes += n
	ho.bytes += e.cost
	h.bytes += e.cost
	h.events++

	for r.first != e && (r.events > ringEvents || r.bytes > ringBytes) {
		h.dropLocked(r.first, &h.dropped.session)
	}
	for h.per > 0 && ho.bytes > h.per {
		v := ho.victim(e)
		if v == nil {
			break
		}
		h.dropLocked(v, &h.dropped.holder)
	}
	for h.all > 0 && h.bytes > h.all {
		v := ho.victim(e)
		if v == nil {
			v = h.othersVictimLocked(ho)
		}
		if v == nil {
			break
		}
		h.dropLocked(v, &h.dropped.all)
	}
}

// holdingLocked returns holder's holding, made if it has none.
func (h *hold) holdingLocked(holder string) *holding {
	ho := h.by[holder]
	if ho == nil {
		if h.by == nil {
			h.by = map[string]*holding{}
		}
		ho = &holding{}
		h.by[holder] = ho
	}
	return ho
}

// victim returns ho's oldest event, other than keep, of a stream no
// client reads; else its oldest a client was sent; else nil.
func (ho *holding) victim(keep *heldEvent) *heldEvent {
	var sent *heldEvent
	for e := ho.first; e != nil; e = e.hnext {
		if e == keep {
			continue
		}
		read, written := e.st.readBy(e.seq)
		if !read {
			return e
		}
		if written && sent == nil {
			sent = e
		}
	}
	return sent
}

// othersVictimLocked returns a victim of the holder, other than ho, that
// holds the most and has one.
func (h *hold) othersVictimLocked(ho *holding) *heldEvent {
	others := make([]*holding, 0, len(h.by))
	for _, o := range h.by {
		if o != ho {
			others = append(others, o)
		}
	}
	slices.SortFunc(others, func(a, b *holding) int { return cmp.Compare(b.bytes, a.bytes) })
	for _, o := range others {
		if v := o.victim(nil); v != nil {
			return v
		}
	}
	return nil
}

// unlinkLocked stops counting e.
func (h *hold) unlinkLocked(e *heldEvent) {
	r := e.r
	if e.rprev != nil {
		e.rprev.rnext = e.rnext
	} else {
		r.first = e.rnext
	}
	if e.rnext != nil {
		e.rnext.rprev = e.rprev
	} else {
		r.last = e.rprev
	}
	r.events--
	r.bytes -= e.n
	ho := h.by[r.holder]
	if e.hprev != nil {
		e.hprev.hnext = e.hnext
	} else {
		ho.first = e.hnext
	}
	if e.hnext != nil {
		e.hnext.hprev = e.hprev
	} else {
		ho.last = e.hprev
	}
	ho.bytes -= e.cost
	h.bytes -= e.cost
	h.events--
	if ho.first == nil {
		delete(h.by, r.holder)
	}
	*e = heldEvent{}
}

// dropLocked stops counting e and drops it from its stream, counting it
// in bound (one of h.dropped's).
func (h *hold) dropLocked(e *heldEvent, bound *int64) {
	st, seq := e.st, e.seq
	h.unlinkLocked(e)
	*bound++
	if st.drop(seq) {
		h.dropped.answers++
	}
}

// forget stops counting st's events (the session forgot st).
func (r *ring) forget(st *stream) {
	defer r.lock()()
	for e := r.first; e != nil; {
		next := e.rnext
		if e.st == st {
			r.h.unlinkLocked(e)
		}
		e = next
	}
}

// close stops counting the session's events, now and later (the session
// ended: no client can resume its streams).
func (r *ring) close() {
	defer r.lock()()
	r.closed = true
	for r.first != nil {
		r.h.unlinkLocked(r.first)
	}
}

// size reports how many events and bytes the ring counts.
func (r *ring) size() (events, bytes int) {
	defer r.lock()()
	return r.events, r.bytes
}

// HeldStats are the counters of what the bridge keeps for a resume
// (Last-Event-ID), as GET /toybox/mcp-stats answers them under "held".
type HeldStats struct {
	Bytes     int64 `json:"bytes"`     // kept now: each event's bytes and heldOverhead
	Events    int   `json:"events"`    // kept now
	Bound     int64 `json:"bound"`     // of bytes: heldAll messages of MaxMessage
	Holders   int   `json:"holders"`   // holders keeping an event now
	MostByOne int64 `json:"mostByOne"` // bytes the holder keeping the most keeps
	// HolderBound bounds each holder's bytes: heldPerHolder messages of
	// MaxMessage.
	HolderBound int64 `json:"holderBound"`
	// Dropped counts the events dropped past each bound since the
	// bridge started.
	Dropped DroppedStats `json:"dropped"`
	// DroppedAnswers counts the calls' answers among them that no
	// client was sent: a resume of each got 404, or its POST an error.
	DroppedAnswers int64 `json:"droppedAnswers"`
}

// DroppedStats counts the events dropped past each bound of what the
// bridge keeps.
type DroppedStats struct {
	Session int64 `json:"session"` // ringEvents or ringBytes of one session
	Holder  int64 `json:"holder"`  // HolderBound
	All     int64 `json:"all"`     // Bound
}

// stats returns the hold's counters now.
func (h *hold) stats() HeldStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := HeldStats{
		Bytes: h.bytes, Events: h.events, Bound: h.all, Holders: len(h.by), HolderBound: h.per,
		Dropped:        DroppedStats{Session: h.dropped.session, Holder: h.dropped.holder, All: h.dropped.all},
		DroppedAnswers: h.dropped.answers,
	}
	for _, ho := range h.by {
		st.MostByOne = max(st.MostByOne, ho.bytes)
	}
	return st
}

// size reports what the hold counts, in all and by holder.
func (h *hold) size() (all int64, by map[string]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	by = make(map[string]int64, len(h.by))
	for k, ho := range h.by {
		by[k] = ho.bytes
	}
	return h.bytes, by
}
