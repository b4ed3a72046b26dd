package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowWriter records what it is given, slowly, as a busy journal would.
type slowWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	delay  time.Duration
}

func (s *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.buf.Write(p)
}

func (s *slowWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestLogWriter: every record arrives, whole and in order per writer,
// records gathered while a write is under way go out together, and Close
// returns only once everything is written.
func TestLogWriter(t *testing.T) {
	sw := &slowWriter{delay: time.Millisecond}
	l := newLogWriter(sw)
	var wg sync.WaitGroup
	const writers, each = 8, 200
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := fmt.Fprintf(l, "{\"w\":%d,\"i\":%d}\n", w, i); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(sw.String(), "\n"), "\n")
	if len(lines) != writers*each {
		t.Fatalf("%d records written; want %d", len(lines), writers*each)
	}
	next := make([]int, writers)
	for _, ln := range lines {
		var w, i int
		if _, err := fmt.Sscanf(ln, "{\"w\":%d,\"i\":%d}", &w, &i); err != nil {
			t.Fatalf("torn record %q", ln)
		}
		if i != next[w] {
			t.Fatalf("writer %d: record %d after %d", w, i, next[w]-1)
		}
		next[w]++
	}
	if sw.writes >= writers*each {
		t.Errorf("%d writes for %d records; want records gathered", sw.writes, writers*each)
	}
	// After Close, records still get out (straight through).
	fmt.Fprintf(l, "late\n")
	if !strings.HasSuffix(sw.String(), "late\n") {
		t.Error("a record after Close was lost")
	}
}

// TestLogWriterBounded: a journal that does not take records makes writers
// wait once maxPending bytes are waiting, instead of growing without end.
func TestLogWriterBounded(t *testing.T) {
	block := make(chan struct{})
	bw := writerFunc(func(p []byte) (int, error) { <-block; return len(p), nil })
	l := newLogWriter(bw)
	rec := bytes.Repeat([]byte("x"), 64<<10)
	wrote := make(chan int, 1)
	go func() {
		n := 0
		for range 64 { // 4 MiB: past the bound
			_, _ = l.Write(rec)
			n++
		}
		wrote <- n
	}()
	select {
	case n := <-wrote:
		t.Fatalf("all %d records were taken while the journal was stuck", n)
	case <-time.After(300 * time.Millisecond):
	}
	close(block)
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("writers stayed blocked after the journal moved")
	}
	_ = l.Close()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestLogWriterCloseKeepsOrder: a record written while Close is writing
// what had gathered comes after it, not in between.
func TestLogWriterCloseKeepsOrder(t *testing.T) {
	sw := &slowWriter{delay: 20 * time.Millisecond}
	l := newLogWriter(sw)
	fmt.Fprint(l, "a\n")
	time.Sleep(5 * time.Millisecond) // "a" is being written
	fmt.Fprint(l, "b\n")             // gathered, written after "a"
	closed := make(chan struct{})
	go func() { _ = l.Close(); close(closed) }()
	time.Sleep(5 * time.Millisecond) // Close is waiting for "b"
	fmt.Fprint(l, "late\n")
	<-closed
	if got := sw.String(); got != "a\nb\nlate\n" {
		t.Errorf("written %q; want a, b, late in order", got)
	}
}
