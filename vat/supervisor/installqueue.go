package supervisor

import (
	"context"
	"fmt"
	"sync"
)

// How many package installs prepare at once, and how many wait their
// turn (PackagesConfig.Installs, InstallQueue).
const (
	DefaultInstalls     = 2 // each holds a prepare image of up to DefaultPrepareBytes, a wall of the memory limit and npm; two keep a 2-core host's CPUs busy
	DefaultInstallQueue = 8 // a waiting install holds only its request: a few minutes' turns for a batch import
)

// installQueue bounds the package installs that prepare at once, and
// those that wait their turn.
type installQueue struct {
	slots   chan struct{} // one token an install preparing
	maxWait int

	mu      sync.Mutex
	waiting int // guarded by mu
}

func newInstallQueue(installs, queue int) *installQueue {
	if installs <= 0 {
		installs = DefaultInstalls
	}
	switch {
	case queue == 0:
		queue = DefaultInstallQueue
	case queue < 0:
		queue = 0
	}
	return &installQueue{slots: make(chan struct{}, installs), maxWait: queue}
}

// wait takes a turn to prepare, waiting while others prepare. It returns
// the release of the turn; or ErrBusy at once when the queue is full, the
// context's error when ctx ends first, and ErrShutdown when stop closes
// first. It holds no lock while it waits.
func (q *installQueue) wait(ctx context.Context, stop <-chan struct{}) (func(), error) {
	release := func() { <-q.slots }
	select {
	case q.slots <- struct{}{}:
		return release, nil
	default:
	}
	q.mu.Lock()
	if q.waiting >= q.maxWait {
		q.mu.Unlock()
		return nil, &busyError{preparing: cap(q.slots), waiting: q.maxWait}
	}
	q.waiting++
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.waiting--
		q.mu.Unlock()
	}()
	select {
	case q.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-stop:
		return nil, ErrShutdown
	}
}

// counts returns how many installs prepare and how many wait.
func (q *installQueue) counts() (preparing, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.slots), q.waiting
}

// Installs says how many package installs prepare now and how many wait
// their turn (PackagesConfig.Installs and InstallQueue bound them), for
// the operator's metrics.
func (s *Supervisor) Installs() (preparing, waiting int) { return s.installs.counts() }

// busyError: an install found the prepare turns taken and the queue full.
type busyError struct{ preparing, waiting int }

func (e *busyError) Error() string {
	return fmt.Sprintf("%v: %d preparing and %d waiting their turn, the most this supervisor takes; try again later", ErrBusy, e.preparing, e.waiting)
}

func (e *busyError) Unwrap() error { return ErrBusy }
