package entry

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// writes records each write its writer is given.
type writes struct {
	mu  sync.Mutex
	got [][]byte
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, bytes.Clone(p))
	return len(p), nil
}

func (w *writes) all() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.got
}

func TestBatchWriterGathersRecords(t *testing.T) {
	var w writes
	b := NewBatchWriter(&w, time.Hour)
	for range 3 {
		_, _ = b.Write([]byte(`{"msg":"mcp"}` + "\n"))
	}
	if n := len(w.all()); n != 0 {
		t.Fatalf("%d writes before the delay or a flush; want none", n)
	}
	b.Flush()
	got := w.all()
	if len(got) != 1 || string(got[0]) != strings.Repeat(`{"msg":"mcp"}`+"\n", 3) {
		t.Fatalf("writes = %q; want the three records in one", got)
	}
}

// TestBatchWriterHoldsAtMostTheDelay runs on synctest's fake clock: the
// record is held for exactly the delay, whatever the machine's load.
func TestBatchWriterHoldsAtMostTheDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w writes
		b := NewBatchWriter(&w, 20*time.Millisecond)
		_, _ = b.Write([]byte("one\n"))
		time.Sleep(20*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		if n := len(w.all()); n != 0 {
			t.Fatalf("%d writes before the delay; want the record held", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := w.all(); len(got) != 1 || string(got[0]) != "one\n" {
			t.Fatalf("writes = %q once the delay passed; want the record", got)
		}
		// A second record after the first batch went waits again, alone.
		_, _ = b.Write([]byte("two\n"))
		b.Flush()
		if got := w.all(); len(got) != 2 || string(got[1]) != "two\n" {
			t.Errorf("writes = %q; want one, then two", got)
		}
	})
}

func TestBatchWriterWritesWholeRecordsUnderPipeBuf(t *testing.T) {
	var w writes
	b := NewBatchWriter(&w, time.Hour)
	rec := []byte(strings.Repeat("x", 299) + "\n")
	for range 40 { // 12000 bytes: three writes at least
		_, _ = b.Write(rec)
	}
	big := []byte(strings.Repeat("y", BatchMax+10) + "\n")
	_, _ = b.Write(big)
	b.Flush()
	var all []byte
	for i, p := range w.all() {
		if len(p) > BatchMax && !bytes.Equal(p, big) {
			t.Errorf("write %d holds %d bytes; want at most %d", i, len(p), BatchMax)
		}
		if len(p)%len(rec) != 0 && !bytes.Equal(p, big) {
			t.Errorf("write %d (%d bytes) cuts a record", i, len(p))
		}
		all = append(all, p...)
	}
	if want := append(bytes.Repeat(rec, 40), big...); !bytes.Equal(all, want) {
		t.Errorf("the records came out as %d bytes; want %d, in order", len(all), len(want))
	}
}
