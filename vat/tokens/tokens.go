// Package tokens is a token bucket: tokens come at Rate per second, at most
// Burst of them wait, and a bucket starts full. The supervisor paces an
// app's output with one (a debt is slept off); the doors bound their
// refusal records with another (what does not fit is counted instead).
// Not safe for concurrent use: its owner locks.
package tokens

import "time"

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
