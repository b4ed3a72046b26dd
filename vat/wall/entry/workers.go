package entry

import "sync/atomic"

// workers runs jobs on goroutines that, once a job is done, wait for the
// next one. A transparent connect's answer goes down a Cap'n Proto call
// whose stack is several times a new goroutine's: on a goroutine of its
// own, each connect grew that stack (copied it, frame by frame) and
// freed it again.
//
// A job is handed to an idle worker, or else to a new one while fewer
// than max run; past max, each job runs on a goroutine of its own (a job
// never waits for another to end: a connect waits on the switchboard).
type workers[T any] struct {
	do   func(T)
	max  int32
	work chan T // unbuffered: a send succeeds only to an idle worker
	n    atomic.Int32
}

func newWorkers[T any](max int32, do func(T)) *workers[T] {
	return &workers[T]{do: do, max: max, work: make(chan T)}
}

// run starts job at once.
func (w *workers[T]) run(job T) {
	select {
	case w.work <- job:
		return
	default:
	}
	if w.n.Add(1) > w.max {
		w.n.Add(-1)
		go w.do(job)
		return
	}
	go w.loop(job)
}

// loop is one worker: job, then each job handed to it, until close.
func (w *workers[T]) loop(job T) {
	defer w.n.Add(-1)
	for ok := true; ok; job, ok = <-w.work {
		w.do(job)
	}
}

// close ends the idle workers, and each busy one once its job is done.
// run must not be called after.
func (w *workers[T]) close() { close(w.work) }
