// Package tokens is a token bucket.
//
// Tokens come at Rate per second, at most Burst of them wait, and a bucket
// starts full. The supervisor paces an app's output with one (a debt is
// slept off; not safe for concurrent use: its owner locks); Records bounds
// log records with one (what does not fit is counted instead).
package tokens

import (
	"sync"
	"time"
)

// Bucket is one token bucket. The zero time is never a refill time.
type Bucket struct {
	Rate, Burst float64
	tokens      float64
	last        time.Time
}

// refill adds what came since the last look (a first look fills it).
func (b *Bucket) refill(now time.Time) {
	if b.last.IsZero() {
		b.tokens = b.Burst
	} else {
		b.tokens = min(b.Burst, b.tokens+now.Sub(b.last).Seconds()*b.Rate)
	}
	b.last = now
}

// Take spends n tokens at now, going into debt if it must, and returns how
// long the debt takes to clear at Rate (0 when the tokens were there).
func (b *Bucket) Take(now time.Time, n float64) time.Duration {
	b.refill(now)
	b.tokens -= n
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.Rate * float64(time.Second))
}

// TryTake spends n tokens at now if that many are there, and reports
// whether it did.
func (b *Bucket) TryTake(now time.Time, n float64) bool {
	b.refill(now)
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

// Records bounds how many records of one kind are written: Rate a second
// after a burst of Burst. A record that does not fit is counted, and the
// next one written says how many went unlogged. Safe for concurrent use.
// A flood of them (a vat's refused calls, a visitor asking a vat that
// fails) would otherwise fill the disk, or push the supervisor's other
// records past journald's rate limit for the unit.
type Records struct {
	mu       sync.Mutex
	b        Bucket
	unlogged int
}

// NewRecords returns a Records of rate a second after a burst of burst.
func NewRecords(rate, burst float64) *Records {
	return &Records{b: Bucket{Rate: rate, Burst: burst}}
}

// Admit reports whether a record may be written now, and how many went
// unlogged before it (given back once, for the record that says so).
func (r *Records) Admit(now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.b.TryTake(now, 1) {
		r.unlogged++
		return false, 0
	}
	n := r.unlogged
	r.unlogged = 0
	return true, n
}

// Drain returns how many went unlogged since the last record, for a record
// written regardless of the limit.
func (r *Records) Drain() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.unlogged
	r.unlogged = 0
	return n
}
