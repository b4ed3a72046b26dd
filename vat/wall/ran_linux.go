package wall

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// entryRan is the pipe a wall's toybox-entry answers on (--ran-fd). The
// entry writes one byte as it starts and closes its end, before it starts
// the app. Every wall has one, whatever the host's cgroups.
// An answer says bubblewrap built the wall and ran the entry. A "bwrap: "
// line in the wall's output is then the app's (it shares bubblewrap's
// stderr), not bubblewrap's.
// The app cannot answer for the entry: the entry's end is gone before the
// app starts.
type entryRan struct{ r *os.File }

// entryRan makes the pipe and returns the entry's option naming its write
// end. The table owns the pipe from now on (fdTable.ran).
func (t *fdTable) entryRan() ([]string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("the entry's answer's pipe: %w", err)
	}
	t.ran = &entryRan{r: r}
	return t.pass(w, "--ran-fd"), nil
}

// answered reports whether the wall's entry answered. It never waits: read
// it once the wall has ended.
func (e *entryRan) answered() bool {
	if e == nil || e.r == nil {
		return false
	}
	rc, err := e.r.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	n := 0
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, rerr = unix.Read(int(fd), b[:])
		return true // no wait: an empty pipe is no answer
	}); err != nil {
		return false
	}
	return rerr == nil && n == 1
}

// close closes the supervisor's end.
func (e *entryRan) close() {
	if e != nil && e.r != nil {
		_ = e.r.Close()
		e.r = nil
	}
}
