package supervisor

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"toybox/tests/testenv"
)

// TestPrepareOutputBounded: a prepare step (npm, or an allowed install
// script) writes what it likes to the pipe the supervisor reads. A line
// over 64 KiB ended the reading: the pipe closed, and the step's next
// write failed (EPIPE), so the install failed for a long line. Lines past
// the first 400 went unlogged with no word of them. Now every byte is
// read, a long line is logged cut, and one record counts what was not
// logged.
func TestPrepareOutputBounded(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer pr.Close()
		logPrepareOutput(slog.New(slog.NewJSONHandler(&logs, nil)), pr, "filler", "resolve")
	}()
	const lines = 1000
	long := strings.Repeat("x", 1<<20)
	var werr error
	if _, werr = fmt.Fprintf(pw, "first\n%s\n", long); werr == nil {
		for i := range lines {
			if _, werr = fmt.Fprintf(pw, "line %d\n", i); werr != nil {
				break
			}
		}
	}
	_ = pw.Close()
	<-done
	if werr != nil {
		t.Fatalf("the step's write after a line of 1 MiB: %v; want every write read", werr)
	}
	var logged, bytes, dropped, cut int
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		switch m["msg"] {
		case "prepare output":
			logged++
			s, _ := m["line"].(string)
			bytes += len(s)
		case "prepare output not logged":
			n, _ := m["lines"].(float64)
			dropped = int(n)
			c, _ := m["cut_bytes"].(float64)
			cut = int(c)
		}
	}
	if logged+dropped != lines+2 {
		t.Errorf("%d lines logged and %d counted as not logged; want the %d written accounted for", logged, dropped, lines+2)
	}
	if logged > prepareOutputLines || bytes > prepareOutputLines*prepareOutputLineBytes {
		t.Errorf("%d lines of %d bytes logged; want at most %d lines of %d bytes", logged, bytes, prepareOutputLines, prepareOutputLineBytes)
	}
	if want := len(long) - prepareOutputLineBytes; cut != want {
		t.Errorf("the record counts %d bytes cut; want the long line's %d", cut, want)
	}
	t.Logf("%d lines logged (%d bytes), %d lines and %d bytes counted", logged, bytes, dropped, cut)
}
