package testenv

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
)

// leaks are the capabilities the garbage collector found unreleased.
var leaks struct {
	sync.Mutex
	msgs []string
}

// TrackLeaks records every capability that is garbage collected before it
// is released (capnp.SetClientLeakFunc). Leaks returns them.
func TrackLeaks() {
	capnp.SetClientLeakFunc(func(msg string) {
		leaks.Lock()
		leaks.msgs = append(leaks.msgs, msg)
		leaks.Unlock()
	})
}

// Leaks collects garbage until the finalizers have run, then returns every
// leak TrackLeaks recorded.
func Leaks() []string {
	for range 4 {
		runtime.GC()
		time.Sleep(50 * time.Millisecond) // finalizers run on their own goroutine
	}
	leaks.Lock()
	defer leaks.Unlock()
	return append([]string(nil), leaks.msgs...)
}

// RunCheckingLeaks runs a package's tests, for its TestMain, and returns
// the exit code. A package whose tests pass fails when any capability
// leaked, and every leak is printed with the stack that made it.
// Benchmarks run untracked: tracking records a stack for every client,
// which would dominate the numbers.
func RunCheckingLeaks(m *testing.M) int {
	flag.Parse()
	if b := flag.Lookup("test.bench"); b != nil && b.Value.String() != "" {
		return m.Run()
	}
	TrackLeaks()
	code := m.Run()
	if l := Leaks(); len(l) > 0 {
		fmt.Fprintf(os.Stderr, "%d capability leaks:\n", len(l))
		for _, s := range l {
			fmt.Fprintln(os.Stderr, s)
		}
		if code == 0 {
			code = 1
		}
	}
	return code
}
