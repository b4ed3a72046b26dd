package entry

import (
	"io"
	"sync"
	"time"
)

// BatchWriter gathers log records and writes them to w a few at a time:
// each record costs the entry a write, and the supervisor a read, a
// write and a read again (the wall's stderr is copied into the vat's log
// ring), where a busy MCP bridge makes one record per call.
//
// A record waits at most the delay. Each write to w ends at a record's
// end and holds at most BatchMax bytes, so that a write to a pipe stays
// whole beside another writer's (PIPE_BUF). Records written before a
// crash that Flush did not follow may be lost: at most the delay's.
type BatchWriter struct {
	w     io.Writer
	delay time.Duration

	mu    sync.Mutex // guards buf and orders the writes to w
	buf   []byte
	timer *time.Timer
}

// BatchMax is the most one write to w holds (PIPE_BUF on Linux).
const BatchMax = 4096

// NewBatchWriter returns a BatchWriter on w that holds a record at most
// delay.
func NewBatchWriter(w io.Writer, delay time.Duration) *BatchWriter {
	b := &BatchWriter{w: w, delay: delay, buf: make([]byte, 0, BatchMax)}
	b.timer = time.AfterFunc(time.Hour, b.Flush)
	b.timer.Stop()
	return b
}

// Write takes one record (slog's handlers write each whole). It never
// fails: a record w refuses is lost, as one written to it directly would be.
func (b *BatchWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf)+len(p) > BatchMax {
		b.flushLocked()
	}
	if len(p) > BatchMax {
		_, _ = b.w.Write(p)
		return len(p), nil
	}
	if len(b.buf) == 0 {
		b.timer.Reset(b.delay)
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Flush writes what is held now.
func (b *BatchWriter) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
}

func (b *BatchWriter) flushLocked() {
	if len(b.buf) == 0 {
		return
	}
	b.timer.Stop()
	_, _ = b.w.Write(b.buf)
	b.buf = b.buf[:0]
}
