package testenv

import (
	"testing"
	"time"
)

// WaitFor calls cond until it returns nil, and fails t with cond's last
// error once within has passed. cond runs on the test's goroutine, so it
// may call t.Fatal itself. Polls start 10ms apart and back off to 250ms.
func WaitFor(t testing.TB, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := 10 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
			return
		}
		time.Sleep(pause)
		pause = min(2*pause, 250*time.Millisecond)
	}
}
