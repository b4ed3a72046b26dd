package bridge

import (
	"bytes"
	"testing"
)

// TestSessionRing: a session's streams keep at most ringEvents events and
// ringBytes bytes together, the session's oldest dropped first, however
// many streams it opened (a bound per stream let one session keep 8 MiB
// per call its client walked away from).
func TestSessionRing(t *testing.T) {
	s := (&Bridge{}).newSession("alice", nil)
	a, b := s.newStream(), s.newStream()
	for range 600 {
		a.push([]byte(`{"n":1}`), false)
	}
	for range 600 {
		b.push([]byte(`{"n":2}`), false)
	}
	if n, _ := s.ring.size(); n != ringEvents {
		t.Errorf("the session keeps %d events; want %d", n, ringEvents)
	}
	if ea, eb := a.since(0), b.since(0); len(ea)+len(eb) != ringEvents || len(eb) != 600 || ea[0].seq != 201 {
		t.Errorf("kept %d of a (first seq %d) and %d of b; want the oldest 200 of a dropped", len(ea), ea[0].seq, len(eb))
	}

	// Bytes: three calls of 3 MiB each keep no more than 8 MiB together,
	// the newest whole.
	big := bytes.Repeat([]byte("x"), 3<<20)
	calls := []*stream{s.newStream(), s.newStream(), s.newStream()}
	for _, st := range calls {
		st.push(big, true)
	}
	if _, n := s.ring.size(); n > ringBytes {
		t.Errorf("the session keeps %d bytes; want at most %d", n, ringBytes)
	}
	if got := calls[2].since(0); len(got) != 1 || !got[0].final {
		t.Errorf("the newest call's answer is not kept: %d events", len(got))
	}
	if got := calls[0].since(0); len(got) != 0 {
		t.Errorf("the oldest call's answer is still kept past the bound")
	}

	// A stream the session forgets is no longer counted.
	before, _ := s.ring.size()
	s.streamDone(calls[2], true)
	if after, _ := s.ring.size(); after != before-1 {
		t.Errorf("after forgetting a stream the ring counts %d events; want %d", after, before-1)
	}
}
