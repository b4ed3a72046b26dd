// Package activity keeps what the operator's view shows of each vat's recent
// doings.
//
// It keeps the last egress decisions with their reasons, and the counts and durations
// the metrics report. It is the supervisor's Observer. Everything is in
// memory and bounded.
package activity

import (
	"sort"
	"strings"
	"sync"
	"time"

	"toybox/vat/grant"
)

// MaxRecent is how many decisions are kept per vat: the latest.
const MaxRecent = 50

// Entry is one egress decision of a vat.
type Entry struct {
	At      time.Time `json:"at"`
	Op      string    `json:"op"`
	Target  string    `json:"target"`
	Outcome string    `json:"outcome"` // allowed, refused or failed
	Reason  string    `json:"reason,omitempty"`
}

// DecisionCount is the count of one kind of decision of one vat.
type DecisionCount struct {
	Vat, Outcome, Reason string
	N                    uint64
}

type key struct{ vat, outcome, reason string }

type vatLog struct {
	recent      []Entry // a ring of MaxRecent
	next        int
	lastRefusal *Entry
}

// Recorder keeps the activity. The zero value is not ready: use New.
// Safe for concurrent use.
type Recorder struct {
	now func() time.Time

	mu      sync.Mutex
	vats    map[string]*vatLog
	counts  map[key]uint64
	spawn   map[bool]*Histogram
	install map[bool]*Histogram
}

// SpawnBuckets are the upper bounds, in seconds, of the spawn-duration
// histogram: a walled spawn takes tens of milliseconds, an app's own
// start up to its ready timeout (10 s).
var SpawnBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// InstallBuckets are those of the install-duration histogram: from a
// small executable (a few ms) to a bundle that unpacks and restarts.
var InstallBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// New returns a Recorder.
func New() *Recorder {
	return &Recorder{
		now: time.Now, vats: map[string]*vatLog{}, counts: map[key]uint64{},
		spawn:   map[bool]*Histogram{true: NewHistogram(SpawnBuckets), false: NewHistogram(SpawnBuckets)},
		install: map[bool]*Histogram{true: NewHistogram(InstallBuckets), false: NewHistogram(InstallBuckets)},
	}
}

// Decided records one egress decision of vat id.
func (r *Recorder) Decided(id string, d grant.Decision) {
	e := Entry{At: r.now().UTC(), Op: d.Op, Target: d.TargetText(), Outcome: d.Outcome.String(), Reason: d.Reason}
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.vats[id]
	if l == nil {
		l = &vatLog{}
		r.vats[id] = l
	}
	if len(l.recent) < MaxRecent {
		l.recent = append(l.recent, e)
	} else {
		l.recent[l.next] = e
	}
	l.next = (l.next + 1) % MaxRecent
	if d.Outcome == grant.Refused {
		l.lastRefusal = &e
	}
	r.counts[key{id, e.Outcome, ReasonClass(d.Outcome, d.Reason)}]++
}

// Spawned records one spawn's time to listen.
func (r *Recorder) Spawned(_ string, d time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spawn[ok].Observe(d.Seconds())
}

// Installed records one install's duration.
func (r *Recorder) Installed(_ string, d time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.install[ok].Observe(d.Seconds())
}

// Recent returns vat id's kept decisions, newest first.
func (r *Recorder) Recent(id string) []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.vats[id]
	if l == nil {
		return nil
	}
	out := make([]Entry, 0, len(l.recent))
	for i := 1; i <= len(l.recent); i++ {
		out = append(out, l.recent[(l.next-i+len(l.recent))%len(l.recent)])
	}
	return out
}

// LastRefusal returns vat id's last refused decision.
func (r *Recorder) LastRefusal(id string) (Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.vats[id]; l != nil && l.lastRefusal != nil {
		return *l.lastRefusal, true
	}
	return Entry{}, false
}

// Decisions returns every decision count, sorted.
func (r *Recorder) Decisions() []DecisionCount {
	r.mu.Lock()
	out := make([]DecisionCount, 0, len(r.counts))
	for k, n := range r.counts {
		out = append(out, DecisionCount{k.vat, k.outcome, k.reason, n})
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Vat != b.Vat {
			return a.Vat < b.Vat
		}
		if a.Outcome != b.Outcome {
			return a.Outcome < b.Outcome
		}
		return a.Reason < b.Reason
	})
	return out
}

// SpawnDurations returns copies of the spawn histograms, of spawns that
// listened (true) and of those that did not.
func (r *Recorder) SpawnDurations() map[bool]Histogram { return r.copy(r.spawn) }

// InstallDurations returns copies of the install histograms, of installs
// that ended serving (true) and of the others.
func (r *Recorder) InstallDurations() map[bool]Histogram { return r.copy(r.install) }

func (r *Recorder) copy(m map[bool]*Histogram) map[bool]Histogram {
	r.mu.Lock()
	defer r.mu.Unlock()
	return map[bool]Histogram{true: m[true].clone(), false: m[false].clone()}
}

// ReasonClass sorts a decision's reason into one of a few fixed classes,
// so a metric's labels stay bounded whatever the reasons' texts hold
// (hosts, addresses). The texts come from labels and the switchboard.
func ReasonClass(o grant.Outcome, reason string) string {
	r := strings.ToLower(reason)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(r, s) {
				return true
			}
		}
		return false
	}
	switch o {
	case grant.Allowed:
		return ""
	case grant.Failed:
		switch {
		case has("connection refused"):
			return "connection_refused"
		case has("timeout", "deadline", "timed out"):
			return "timeout"
		case has("revoked", "closed"):
			return "revoked"
		case has("too many"):
			return "limit"
		}
		return "other"
	}
	switch {
	case has("no longer admits", "revoked"):
		return "revoked"
	case has("not granted"):
		return "not_granted"
	case has("deny list"):
		return "deny_list"
	case has("metadata"):
		return "metadata"
	case has("clienthello", "tls", "sni"):
		return "tls"
	case has("held by", "published by", "listens", "listener"):
		return "listener_owner"
	case has("too many", "limit"):
		return "limit"
	case has("address", "loopback"):
		return "address_class"
	case has("resolve", "lookup", "no such host"):
		return "dns"
	}
	return "other"
}
