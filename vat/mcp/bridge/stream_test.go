package bridge

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"toybox/vat/mcp/mcptest"
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

// TestSessionStreamsBound: a client that leaves each POST before its
// answer makes its session keep that stream for a resume, for streamKeep
// after the answer. The session keeps at most maxSessionStreams of them:
// past it the oldest ended one goes, and with every one still in flight
// a new call is refused. Unbounded, one session held a stream (and its
// call) per request sent in five minutes.
func TestSessionStreamsBound(t *testing.T) {
	b, srv := newBridge(t, Config{NoSpare: true})
	ctx := context.Background()
	c := client(srv, "mallory")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	leave := func(id int, tool string, args map[string]any) int {
		t.Helper()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		resp, err := c.Open(ctx, mcptest.Tool(id, tool, args), "Accept", "text/event-stream, application/json")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	kept := func() int {
		s := b.lookup(c.Session, "mallory")
		if s == nil {
			t.Fatal("the session ended")
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.streams)
	}
	for i := range maxSessionStreams + 50 {
		if code := leave(i+10, "echo", map[string]any{"text": "x", "sleepMs": 20}); code != http.StatusOK {
			t.Fatalf("call %d left before its answer: %d; want 200", i, code)
		}
	}
	err := mcptest.Eventually(10*time.Second, func() error {
		if s := b.lookup(c.Session, "mallory"); s != nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			if n := len(s.inflight); n > 0 {
				return fmt.Errorf("%d calls in flight", n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := kept(); n > maxSessionStreams {
		t.Errorf("the session keeps %d streams; want at most %d", n, maxSessionStreams)
	}

	// Every kept stream a call still in flight: the next call is refused,
	// and the session goes on.
	for i := range maxSessionStreams {
		leave(5000+i, "slow", map[string]any{"ms": 60000})
	}
	r, err := c.Post(ctx, mcptest.Tool(2, "echo", map[string]any{"text": "one more"}))
	if err != nil || r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Text(), "in flight") {
		t.Errorf("a call past the bound: %v %d %q; want 503 naming the calls in flight", err, r.Status, r.Text())
	}
	if n := kept(); n > maxSessionStreams {
		t.Errorf("the session keeps %d streams; want at most %d", n, maxSessionStreams)
	}
}

// TestSessionBatchBound: a batch's calls count among the session's calls
// in flight. A client that sent a batch of slow calls and left (a batch
// is answered once every call is) could otherwise keep sending more, each
// POST adding as many calls as its 32 MiB held.
func TestSessionBatchBound(t *testing.T) {
	b, srv := newBridge(t, Config{NoSpare: true})
	ctx := context.Background()
	c := client(srv, "mallory")
	if err := c.Initialize(ctx, "2025-03-26", nil); err != nil {
		t.Fatal(err)
	}
	batch := func(n, first int) []byte {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = string(mcptest.Tool(first+i, "slow", map[string]any{"ms": 60000}))
		}
		return []byte("[" + strings.Join(parts, ",") + "]")
	}
	inflight := func() int {
		s := b.lookup(c.Session, "mallory")
		if s == nil {
			t.Fatal("the session ended")
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.inflight)
	}
	leave, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := c.Post(leave, batch(maxSessionStreams*3/5, 10)); err == nil {
		t.Fatal("a batch of slow calls was answered before the client left")
	}
	if n := inflight(); n != maxSessionStreams*3/5 {
		t.Fatalf("%d calls in flight after the first batch; want %d", n, maxSessionStreams*3/5)
	}
	again, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := c.Post(again, batch(maxSessionStreams*3/5, 5000))
	if err != nil || r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Text(), "in flight") {
		t.Errorf("a batch past the bound: %v %+v; want 503 naming the calls in flight", err, r)
	}
	if n := inflight(); n > maxSessionStreams {
		t.Errorf("%d calls in flight; want at most %d", n, maxSessionStreams)
	}
}
