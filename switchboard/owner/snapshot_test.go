package owner

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowBuild returns a shared[int] whose build takes d and returns the
// number of the build (1, 2, ...).
func slowBuild(d time.Duration) *shared[int] {
	s := &shared[int]{}
	var n atomic.Int64
	s.build = func() int {
		time.Sleep(d)
		return int(n.Add(1))
	}
	return s
}

// askAll asks s from n goroutines released together and checks that each
// answer began no earlier than window before its caller asked.
func askAll(t *testing.T, s *shared[int], n int, window time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			now := time.Now()
			_, start, err := s.get(context.Background(), now, window)
			if err != nil {
				t.Error(err)
				return
			}
			if start.Before(now.Add(-window)) {
				t.Errorf("asked at %v, got a build begun %v before (window %v)", now, now.Sub(start), window)
			}
		}()
	}
	close(release)
	wg.Wait()
}

// TestSharedOneBuild: callers asking together share one build, and one
// asking within the window after it reuses it.
func TestSharedOneBuild(t *testing.T) {
	s := slowBuild(20 * time.Millisecond)
	askAll(t, s, 256, time.Second)
	if got := s.builds.Load(); got != 1 {
		t.Errorf("256 concurrent callers: %d builds; want 1", got)
	}
	v, _, _ := s.get(context.Background(), time.Now(), time.Second)
	if v != 1 || s.builds.Load() != 1 {
		t.Errorf("a caller within the window got build %d (builds %d); want the first", v, s.builds.Load())
	}
}

// TestSharedStale: a build begun before the window is never used, and the
// callers that arrive while a stale build runs share the next one.
func TestSharedStale(t *testing.T) {
	const window = 10 * time.Millisecond
	s := slowBuild(60 * time.Millisecond)
	first := make(chan int)
	go func() {
		v, _, _ := s.get(context.Background(), time.Now(), window)
		first <- v
	}()
	time.Sleep(25 * time.Millisecond) // the first build is under way, and stale
	askAll(t, s, 64, window)
	if v := <-first; v != 1 {
		t.Errorf("first caller got build %d; want 1", v)
	}
	if got := s.builds.Load(); got != 2 {
		t.Errorf("64 callers during a stale build: %d builds; want 2 (the stale one, and one shared next)", got)
	}
	// Done and stale: a new one.
	time.Sleep(2 * window)
	if v, _, _ := s.get(context.Background(), time.Now(), window); v != 3 {
		t.Errorf("after the window: build %d; want 3", v)
	}
}

// TestSharedZeroWindow: with no window (decisions not cached), a caller
// never gets a build begun before it asked, yet callers asking together
// still share.
func TestSharedZeroWindow(t *testing.T) {
	s := slowBuild(50 * time.Millisecond)
	askAll(t, s, 64, 0)
	if got := s.builds.Load(); got > 2 {
		t.Errorf("64 concurrent callers, zero window: %d builds; want at most 2", got)
	}
	before := s.builds.Load()
	if v, _, _ := s.get(context.Background(), time.Now(), 0); int64(v) != before+1 {
		t.Errorf("a later caller got build %d; want a new one (%d)", v, before+1)
	}
}

// TestSharedCancel: a caller whose context ends stops waiting; the build
// goes on and serves the others.
func TestSharedCancel(t *testing.T) {
	s := slowBuild(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if _, _, err := s.get(ctx, time.Now(), time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("get with an ended context: %v; want DeadlineExceeded", err)
	}
	if v, _, err := s.get(context.Background(), time.Now(), time.Second); err != nil || v != 1 {
		t.Errorf("get after the cancelled caller: %d, %v; want the same build (1)", v, err)
	}
}
