package testenv

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatal records its message instead
// of ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatal(args ...any) { f.msg = fmt.Sprint(args...) }

func TestWaitFor(t *testing.T) {
	t.Run("met", func(t *testing.T) {
		calls := 0
		rec := &fatalRecorder{TB: t}
		WaitFor(rec, time.Second, func() error {
			if calls++; calls < 3 {
				return errors.New("not yet")
			}
			return nil
		})
		if rec.msg != "" || calls != 3 {
			t.Errorf("WaitFor = fatal %q after %d calls; want none after 3", rec.msg, calls)
		}
	})
	t.Run("never", func(t *testing.T) {
		calls := 0
		rec := &fatalRecorder{TB: t}
		start := time.Now()
		WaitFor(rec, 100*time.Millisecond, func() error {
			calls++
			return fmt.Errorf("still off after %d calls", calls)
		})
		if took := time.Since(start); took < 100*time.Millisecond {
			t.Errorf("WaitFor gave up after %v; want at least 100ms", took)
		}
		if want := fmt.Sprintf("still off after %d calls", calls); rec.msg != want {
			t.Errorf("WaitFor failed with %q; want the last error %q", rec.msg, want)
		}
	})
}
