package owner

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// SnapshotWindow is the longest a look at the host (the listening sockets,
// the processes holding them, the running containers) is shared between
// checks: a check uses a look begun at most this long before it was asked,
// or waits for a new one. Never longer than the decision cache's TTL, and
// zero when decisions are not cached.
const SnapshotWindow = 100 * time.Millisecond

// shared hands out the result of build to every caller that can use it, so
// that many checks at once cost about one look at the host, not one each.
// A caller asking at now accepts a result whose build began after
// now-window (for a zero window: after it asked). If the newest build began
// earlier and is still running, the caller waits for the next one, which
// starts as soon as the running one ends and serves everyone who queued
// meanwhile: one build runs at a time, and N concurrent callers cause at
// most two.
type shared[T any] struct {
	build func() T

	mu        sync.Mutex
	cur, next *generation[T] // next is queued only while cur is running
	builds    atomic.Int64   // builds begun, for tests
}

// generation is one build and its result.
type generation[T any] struct {
	start time.Time     // when the build began (set under shared.mu)
	done  chan struct{} // closed when v is set
	v     T
}

// get returns a result whose build began after now-window, and when that
// build began. Builds run on their own goroutine: a caller whose ctx ends
// stops waiting (ctx's error), and the build goes on for the others.
func (s *shared[T]) get(ctx context.Context, now time.Time, window time.Duration) (T, time.Time, error) {
	s.mu.Lock()
	var g *generation[T]
	switch {
	case s.cur != nil && now.Sub(s.cur.start) < window:
		g = s.cur // fresh enough, done or under way
	case s.cur != nil && !closed(s.cur.done):
		if s.next == nil {
			s.next = &generation[T]{done: make(chan struct{})}
		}
		g = s.next
	default:
		g = &generation[T]{start: time.Now(), done: make(chan struct{})}
		s.cur = g
		go s.run(g)
	}
	s.mu.Unlock()
	select {
	case <-g.done:
		return g.v, g.start, nil
	case <-ctx.Done():
		var zero T
		return zero, time.Time{}, ctx.Err()
	}
}

// run builds g, then the generation queued meanwhile, if any, and so on.
func (s *shared[T]) run(g *generation[T]) {
	for g != nil {
		s.builds.Add(1)
		g.v = s.build()
		s.mu.Lock()
		close(g.done)
		g, s.next = s.next, nil
		if g != nil {
			g.start = time.Now()
			s.cur = g
		}
		s.mu.Unlock()
	}
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
