package supervisor

import (
	"sync"
	"time"

	"toybox/vat/tokens"
)

// ring keeps the last size bytes written to it (an app's output). A write
// costs one copy of what it keeps, however full the ring is: an app that
// floods its output makes the supervisor copy each byte once, not move the
// whole window along on every write.
type ring struct {
	mu   sync.Mutex
	size int
	buf  []byte // allocated at the first write, then len(buf) == size
	next int    // where the next byte goes
	full bool   // buf has wrapped: the oldest byte is at next
}

func newRing(size int) *ring { return &ring{size: size} }

func (r *ring) Write(p []byte) (int, error) {
	n := len(p)
	if r.size <= 0 || n == 0 {
		return n, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buf == nil {
		r.buf = make([]byte, r.size)
	}
	if len(p) >= r.size { // only its tail stays
		copy(r.buf, p[len(p)-r.size:])
		r.next, r.full = 0, true
		return n, nil
	}
	k := copy(r.buf[r.next:], p)
	if k < len(p) {
		r.next = copy(r.buf, p[k:])
		r.full = true
		return n, nil
	}
	r.next += k
	if r.next == r.size {
		r.next, r.full = 0, true
	}
	return n, nil
}

// Bytes returns the kept bytes, oldest first.
func (r *ring) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]byte(nil), r.buf[:r.next]...)
	}
	out := make([]byte, 0, r.size)
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// An app's output is read at most this fast (bytes per second, after a
// burst of as much): past it the app's writes to stdout and stderr wait,
// as a full pipe makes them, so an app that floods its output costs the
// supervisor a bounded sliver of a CPU however fast it writes.
const (
	outputRate  = 8 << 20
	outputBurst = 8 << 20
)

// pace holds an app's output to a rate: take(n) returns once n more bytes
// fit it.
type pace struct {
	b     tokens.Bucket
	now   func() time.Time
	sleep func(time.Duration)
}

func newPace(rate, burst int) *pace {
	return &pace{b: tokens.Bucket{Rate: float64(rate), Burst: float64(burst)}, now: time.Now, sleep: time.Sleep}
}

func (p *pace) take(n int) {
	if debt := p.b.Take(p.now(), float64(n)); debt > 0 {
		p.sleep(debt)
	}
}
