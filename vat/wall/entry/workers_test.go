package entry

import (
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

// created is how many goroutines this process has created.
func created(t *testing.T) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("metric %s is not supported", s[0].Name)
	}
	return s[0].Value.Uint64()
}

// TestWorkersReuseGoroutines runs jobs one after another, as a wall's
// connects mostly come, and checks that they do not each start a
// goroutine (whose stack a connect's call grows again each time).
func TestWorkersReuseGoroutines(t *testing.T) {
	done := make(chan int)
	w := newWorkers(4, func(i int) { done <- i })
	defer w.close()
	const jobs = 200
	before := created(t)
	for i := range jobs {
		w.run(i)
		if got := <-done; got != i {
			t.Fatalf("job %d ran as %d", i, got)
		}
	}
	// The bound leaves room for goroutines the process starts meanwhile
	// (timers, earlier tests' servers); a goroutine a job makes jobs.
	if n := created(t) - before; n >= jobs/2 {
		t.Errorf("%d jobs run one after another created %d goroutines; want fewer than %d", jobs, n, jobs/2)
	}
}

// TestWorkersNeverWait runs more jobs at once than there are workers,
// each held until all have started: none waits for another to end.
func TestWorkersNeverWait(t *testing.T) {
	const jobs = 20
	var started, release sync.WaitGroup
	started.Add(jobs)
	release.Add(1)
	var finished sync.WaitGroup
	finished.Add(jobs)
	w := newWorkers(4, func(int) {
		started.Done()
		release.Wait()
		finished.Done()
	})
	for i := range jobs {
		w.run(i)
	}
	started.Wait() // hangs (the test times out) if a job waited for a worker
	release.Done()
	finished.Wait()
	w.close()
	// Once closed, workers end.
	for range 100 {
		if w.n.Load() == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	if n := w.n.Load(); n != 0 {
		t.Errorf("%d workers still run after close", n)
	}
}
