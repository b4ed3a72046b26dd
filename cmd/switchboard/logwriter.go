package main

import (
	"io"
	"sync"
)

// logWriter writes the decision records off the path of the call that
// made them: Write copies the record and returns; a goroutine writes what
// has gathered, often several records in one write(2). A connect then pays
// for encoding its record, not for the write to the journal. The buffer is
// bounded: past maxPending bytes Write waits (a stalled journal slows the
// switchboard down, it never drops a record). Close writes what is left.
type logWriter struct {
	w    io.Writer
	mu   sync.Mutex
	room *sync.Cond // signalled when the buffer was taken
	buf  []byte
	kick chan struct{}
	done chan struct{}
	shut bool
}

const maxPending = 1 << 20

func newLogWriter(w io.Writer) *logWriter {
	l := &logWriter{w: w, kick: make(chan struct{}, 1), done: make(chan struct{})}
	l.room = sync.NewCond(&l.mu)
	go l.loop()
	return l
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	for len(l.buf) >= maxPending && !l.shut {
		l.room.Wait()
	}
	if l.shut {
		l.mu.Unlock()
		<-l.done            // after what was gathered, in order
		return l.w.Write(p) // after Close: straight through
	}
	l.buf = append(l.buf, p...)
	// Under the lock, so that Close cannot close kick in between.
	select {
	case l.kick <- struct{}{}:
	default: // a write is already due
	}
	l.mu.Unlock()
	return len(p), nil
}

func (l *logWriter) loop() {
	defer close(l.done)
	var out []byte
	for {
		_, more := <-l.kick
		l.mu.Lock()
		out, l.buf = l.buf, out[:0]
		l.room.Broadcast()
		l.mu.Unlock()
		if len(out) > 0 {
			_, _ = l.w.Write(out)
		}
		if !more {
			return
		}
	}
}

// Close writes every record gathered so far and returns once it is
// written; later records are written directly.
func (l *logWriter) Close() error {
	l.mu.Lock()
	if l.shut {
		l.mu.Unlock()
		return nil
	}
	l.shut = true
	close(l.kick)
	l.room.Broadcast()
	l.mu.Unlock()
	<-l.done
	return nil
}
