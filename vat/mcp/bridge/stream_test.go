package bridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"toybox/vat/mcp"
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

// heldBy sums the bytes b's sessions keep for a resume, by principal,
// and what the bridge should count for them.
func heldBy(b *Bridge) (map[string]int, int64) {
	b.mu.Lock()
	ss := make([]*session, 0, len(b.sessions))
	for _, s := range b.sessions {
		ss = append(ss, s)
	}
	b.mu.Unlock()
	held := map[string]int{}
	var cost int64
	for _, s := range ss {
		s.mu.Lock()
		streams := []*stream{s.get}
		for _, st := range s.streams {
			streams = append(streams, st)
		}
		s.mu.Unlock()
		for _, st := range streams {
			for _, e := range st.since(0) {
				held[s.principal] += len(e.data)
				cost += int64(len(e.data)) + heldOverhead
			}
		}
	}
	return held, cost
}

// TestHeldBudget: the answers the bridge keeps for a resume are bounded
// per holder and in all, not only per session. A session costs no
// process in shared mode, so one principal that opened session after
// session, each leaving a large answer unread, made the bridge hold a
// session's 8 MiB per session until the wall's memory ran out. Past the
// bound the holder's own oldest unread answers go. Another holder's
// answer stays, and the client of a dropped one is told it is gone.
func TestHeldBudget(t *testing.T) {
	const limit = 1 << 20
	b, srv := newBridge(t, Config{MaxMessage: limit, NoSpare: true, Mode: ModeShared})
	ctx := context.Background()
	answer := strings.Repeat("x", 200<<10)
	// leave sends a call and leaves at its priming event, before the
	// answer; it returns that event's id, to resume from.
	leave := func(c *mcptest.Client, id int) string {
		t.Helper()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		resp, err := c.Open(ctx, mcptest.Tool(id, "echo", map[string]any{"text": answer, "sleepMs": 100}), "Accept", "text/event-stream, application/json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		e, err := mcptest.ReadEvent(bufio.NewReader(resp.Body))
		if err != nil || e.ID == "" {
			t.Fatalf("the priming event of call %d: %+v %v", id, e, err)
		}
		return e.ID
	}
	// answered waits for every call's answer to be kept and counted (a
	// call ends just before its answer is pushed).
	answered := func() {
		t.Helper()
		err := mcptest.Eventually(20*time.Second, func() error {
			b.mu.Lock()
			for _, s := range b.sessions {
				s.mu.Lock()
				n := len(s.inflight)
				s.mu.Unlock()
				if n > 0 {
					b.mu.Unlock()
					return fmt.Errorf("%d calls in flight", n)
				}
			}
			b.mu.Unlock()
			_, kept := heldBy(b)
			if counted, _ := b.held.size(); counted != kept {
				return fmt.Errorf("the bridge counts %d bytes; its streams keep %d", counted, kept)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	open := func(principal string) *mcptest.Client {
		t.Helper()
		c := client(srv, principal)
		if err := c.Initialize(ctx, "", nil); err != nil {
			t.Fatal(err)
		}
		return c
	}
	resume := func(c *mcptest.Client, from string) *mcptest.Resp {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := c.Get(ctx, from)
		if err != nil {
			t.Fatalf("resuming from %s: %v", from, err)
		}
		defer resp.Body.Close()
		r, err := mcptest.Read(resp)
		if err != nil {
			t.Fatalf("resuming from %s: %v", from, err)
		}
		return r
	}

	alice := open("alice")
	aliceFrom := leave(alice, 2)
	answered()

	// mallory: 40 sessions, each leaving an answer of 200 KiB unread.
	var mallory []*mcptest.Client
	var malloryFrom []string
	for i := range 40 {
		c := open("mallory")
		mallory = append(mallory, c)
		malloryFrom = append(malloryFrom, leave(c, 10+i))
	}
	answered()
	if held, _ := heldBy(b); held["mallory"] > limit {
		t.Errorf("mallory's 40 sessions hold %d bytes of unread answers; want at most %d", held["mallory"], limit)
	}

	// Three more holders fill the bridge past its bound of all.
	for _, p := range []string{"bob", "carol", "dave"} {
		c := open(p)
		for i := range 5 {
			leave(c, 100+i)
		}
		answered()
	}
	held, _ := heldBy(b)
	total := 0
	for _, n := range held {
		total += n
	}
	if total > 3*limit {
		t.Errorf("the bridge holds %d bytes of unread answers (%v); want at most %d", total, held, 3*limit)
	}
	all, by := b.held.size()
	if all > 3*limit || by["mallory"] > limit {
		t.Errorf("the bridge counts %d bytes kept, %v by holder; want at most %d, %d each", all, by, 3*limit, limit)
	}

	// alice's answer survived all of it.
	if r := resume(alice, aliceFrom); r.Status != http.StatusOK || r.Text() != answer {
		t.Errorf("alice resuming her call: %d %.80q; want 200 and her answer", r.Status, r.Text())
	}
	// mallory's newest answer is kept; her first is gone, and she is
	// told so rather than left waiting.
	last := len(mallory) - 1
	if r := resume(mallory[last], malloryFrom[last]); r.Status != http.StatusOK || r.Text() != answer {
		t.Errorf("mallory resuming her newest call: %d %.80q; want 200 and its answer", r.Status, r.Text())
	}
	if r := resume(mallory[0], malloryFrom[0]); r.Status != http.StatusNotFound {
		t.Errorf("mallory resuming a dropped answer: %d %.80q; want 404", r.Status, r.Text())
	}

	// The operator sees the bounds at work in the counters.
	raw, err := mcptest.Stats(ctx, srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Held HeldStats }
	if err := json.Unmarshal(mustJSON(raw), &st); err != nil {
		t.Fatal(err)
	}
	h := st.Held
	t.Logf("held: %+v", h)
	all, by = b.held.size()
	if h.Bytes != all || h.Bound != 3*limit || h.HolderBound != limit || h.Holders != len(by) || h.MostByOne > limit || h.MostByOne < by["mallory"] {
		t.Errorf("held = %+v; want %d bytes of bound %d, %d holders, the most %d of bound %d", h, all, 3*limit, len(by), by["mallory"], limit)
	}
	// mallory's answers went past her bound; the others' past the
	// bound of all. Each was an answer no client was sent.
	if h.Dropped.Holder == 0 || h.Dropped.All == 0 || h.DroppedAnswers != h.Dropped.Session+h.Dropped.Holder+h.Dropped.All {
		t.Errorf("held = %+v; want drops past the holder's bound and the bound of all, each an unsent answer", h)
	}
}

// TestHeldOrder: which events go past the bounds of what the bridge
// keeps. A holder's own go first: of streams no client reads, oldest
// first, then those a client was sent; never one a client reads and has
// not had. Past the bound of all, once the holder has nothing left to
// drop, the holder holding the most loses its oldest.
func TestHeldOrder(t *testing.T) {
	const kib = 1 << 10
	b := &Bridge{sessions: map[string]*session{}}
	b.cfg.defaults()
	b.held.per, b.held.all = 10*(kib+heldOverhead), 20*(kib+heldOverhead)
	ev := bytes.Repeat([]byte("x"), kib)
	mallory, alice, bob := b.newSession("mallory", nil), b.newSession("alice", nil), b.newSession("bob/env:x", nil)

	read := mallory.newStream()
	sl := read.attach()
	defer read.detach(sl)
	for range 4 {
		read.push(ev, false)
	}
	read.wrote(2) // the client has the first two
	left := mallory.newStream()
	for range 20 {
		left.push(ev, false)
	}
	if got := len(left.since(0)); got != 6 {
		t.Errorf("mallory's unread stream keeps %d events; want 6 (10 less the 4 of the stream read)", got)
	}
	if got := read.since(0); len(got) != 4 {
		t.Errorf("the stream a client reads keeps %d events; want all 4", len(got))
	}
	// With nothing unread left to drop, what the client was sent goes.
	mallory.streamDone(left, true)
	big := mallory.newStream()
	big.push(bytes.Repeat([]byte("x"), 8*kib), true)
	if got := read.since(0); len(got) != 2 || got[0].seq != 3 {
		t.Errorf("the stream a client reads keeps %d events; want the two it was not sent", len(got))
	}
	if got := big.since(0); len(got) != 1 {
		t.Errorf("the newest event is not kept")
	}

	// bob (a principal with its /env: part) counts as bob.
	bobs := bob.newStream()
	for range 9 {
		bobs.push(ev, false)
	}
	// Past the bound of all, alice's own event goes first.
	as := alice.newStream()
	as.push(ev, false)
	as.push(ev, false)
	if got := as.since(0); len(got) != 1 || got[0].seq != 2 {
		t.Errorf("alice keeps %d events; want her newest alone", len(got))
	}
	// With none of her own left, the holder holding the most (mallory)
	// loses its oldest unread event.
	alice.streamDone(as, true)
	as = alice.newStream()
	as.push(bytes.Repeat([]byte("x"), 3*kib), true)
	if got := big.since(0); len(got) != 0 {
		t.Errorf("mallory, holding the most, keeps her unread answer past the bound of all")
	}
	if got := len(bobs.since(0)); got != 9 {
		t.Errorf("bob keeps %d of 9 events; want all", got)
	}
	all, by := b.held.size()
	if all > b.held.all || by["bob"] != 9*(kib+heldOverhead) || by["alice"] != 3*kib+heldOverhead {
		t.Errorf("kept %d in all, by holder %v; want at most %d, bob's 9 events and alice's one", all, by, b.held.all)
	}

	// A session that ends is counted no longer.
	b.endSession(mallory, "test", false)
	if _, by := b.held.size(); by["mallory"] != 0 {
		t.Errorf("an ended session's events still count %d", by["mallory"])
	}
}

// TestDroppedAnswer: a call's answer dropped by the bounds of what the
// bridge keeps, after its process answered and before its POST wrote it,
// still reaches the client: the answer itself or a JSON-RPC error for
// its id, never a 200 with no answer. The hook drops it in that window,
// which a busy bridge reaches by chance: past the holder's bound (a
// stream no client reads loses its events first, and the POST read none
// yet) or past the session's (its oldest event goes, read or not).
func TestDroppedAnswer(t *testing.T) {
	const limit = 1 << 20
	fills := map[string]func(s *session){
		// One event past the holder's bound, on the session's GET stream
		// no client reads: the answer is not its victim.
		"holder": func(s *session) { s.get.push(bytes.Repeat([]byte("x"), limit), false) },
		// ringEvents events more: the session's oldest, the answer, goes.
		"session": func(s *session) {
			for range ringEvents {
				s.get.push([]byte(`{"jsonrpc":"2.0","method":"notifications/message"}`), false)
			}
		},
	}
	// waitAnswer waits for st's answer, then fills past a bound.
	waitAnswer := func(t *testing.T, fill string) func(s *session, st *stream) {
		return func(s *session, st *stream) {
			err := mcptest.Eventually(5*time.Second, func() error {
				st.mu.Lock()
				defer st.mu.Unlock()
				if !st.final {
					return fmt.Errorf("no answer yet")
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			fills[fill](s)
		}
	}
	for _, fill := range []string{"holder", "session"} {
		for _, version := range []string{"2025-06-18", "2025-11-25"} {
			for _, accept := range []string{"application/json", "application/json, text/event-stream", "text/event-stream, application/json"} {
				t.Run(fill+"/"+version+"/"+accept, func(t *testing.T) {
					b, srv := newBridge(t, Config{MaxMessage: limit, NoSpare: true})
					ctx := context.Background()
					c := client(srv, "alice")
					if err := c.Initialize(ctx, version, nil); err != nil {
						t.Fatal(err)
					}
					testHookSent = waitAnswer(t, fill)
					t.Cleanup(func() { testHookSent = nil })
					r, err := c.Post(ctx, mcptest.Tool(7, "echo", map[string]any{"text": "the answer"}), "Accept", accept)
					testHookSent = nil
					if err != nil {
						t.Fatal(err)
					}
					f := r.Final()
					if f == nil || string(f["id"]) != "7" {
						t.Fatalf("the call = %d %q %+v; want its answer or an error for id 7", r.Status, r.Body, r.Events)
					}
					var e struct {
						Code int `json:"code"`
					}
					_ = json.Unmarshal(f["error"], &e)
					switch {
					case fill == "holder" && r.Text() != "the answer":
						t.Errorf("past the holder's bound: %d %q; want the answer, which the POST reads", r.Status, r.Text())
					case fill == "session" && (e.Code != mcp.CodeInternal || r.Status != http.StatusOK):
						t.Errorf("past the session's bound: %d %q; want 200 and error %d for id 7", r.Status, r.Text(), mcp.CodeInternal)
					}
					t.Logf("%d %s %q", r.Status, r.Header.Get("Content-Type"), r.Text())
					// The counters say which bound dropped what.
					h := b.Stats().Held
					switch {
					case fill == "holder" && (h.Dropped.Holder != 0 || h.DroppedAnswers != 0):
						t.Errorf("held = %+v; want nothing dropped past the holder's bound", h)
					case fill == "session" && (h.Dropped.Session != 1 || h.DroppedAnswers != 1):
						t.Errorf("held = %+v; want one answer dropped past the session's bound", h)
					}
					// The session goes on.
					if r, err := c.Post(ctx, mcptest.Tool(8, "echo", map[string]any{"text": "next"})); err != nil || r.Text() != "next" {
						t.Errorf("the next call: %v %q", err, r.Text())
					}
				})
			}
		}
	}

	// An initialize whose answer went past the session's bound: its
	// client is told so, given no id of the session, which ends.
	for _, accept := range []string{"application/json", "text/event-stream, application/json"} {
		t.Run("session/initialize/"+accept, func(t *testing.T) {
			b, srv := newBridge(t, Config{MaxMessage: limit, NoSpare: true})
			ctx := context.Background()
			c := client(srv, "alice")
			testHookSent = waitAnswer(t, "session")
			t.Cleanup(func() { testHookSent = nil })
			r, err := c.Post(ctx, mcptest.Request(3, "initialize", map[string]any{
				"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
				"clientInfo": map[string]any{"name": "mcptest", "version": "1"},
			}), "Accept", accept)
			testHookSent = nil
			if err != nil {
				t.Fatal(err)
			}
			f := r.Final()
			if f == nil || string(f["id"]) != "3" || r.Text() != "error: "+lostAnswer {
				t.Fatalf("the initialize = %d %q %+v; want error %q for id 3", r.Status, r.Body, r.Events, lostAnswer)
			}
			sid := r.Header.Get(mcp.HeaderSession)
			if accept == "application/json" && sid != "" {
				t.Errorf("the failed initialize's answer names session %q; want none", sid)
			}
			// The handler ends the session once its answer is written:
			// the client may read it first.
			if err := mcptest.Eventually(5*time.Second, func() error {
				b.mu.Lock()
				defer b.mu.Unlock()
				if n := len(b.sessions); n != 0 {
					return fmt.Errorf("%d sessions after the failed initialize; want none", n)
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
			if sid != "" {
				// An event stream had begun: its id went, and is refused.
				c.Session = sid
				if r, err := c.Post(ctx, mcptest.Tool(4, "echo", map[string]any{"text": "x"})); err != nil || r.Status != http.StatusNotFound {
					t.Errorf("a call on the ended session: %v %d; want 404", err, r.Status)
				}
			}
		})
	}

	// A batch's POST waited for an answer past the session's bound
	// until its client went.
	t.Run("session/2025-03-26/batch", func(t *testing.T) {
		_, srv := newBridge(t, Config{MaxMessage: limit, NoSpare: true})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c := client(srv, "alice")
		if err := c.Initialize(ctx, "2025-03-26", nil); err != nil {
			t.Fatal(err)
		}
		testHookSent = waitAnswer(t, "session")
		t.Cleanup(func() { testHookSent = nil })
		r, err := c.Post(ctx, []byte("["+string(mcptest.Tool(7, "echo", map[string]any{"text": "the answer"}))+"]"))
		testHookSent = nil
		if err != nil {
			t.Fatalf("the batch: %v", err)
		}
		var answers []map[string]json.RawMessage
		if err := json.Unmarshal(r.Body, &answers); err != nil || len(answers) != 1 {
			t.Fatalf("the batch's answers %d %s: %v", r.Status, r.Body, err)
		}
		one := &mcptest.Resp{Body: mustJSON(answers[0])}
		if string(answers[0]["id"]) != "7" || one.Text() != "error: "+lostAnswer {
			t.Errorf("the batch's answer = %s; want error %q for id 7", r.Body, lostAnswer)
		}
	})
}

// TestResumeDroppedMeanwhile: a GET resuming a call's stream whose events
// were dropped between its check of them and its stream's first read (the
// session's bound, past ringEvents more events) got a 200 with an empty
// event stream, and its client was told 404 only when it resumed again.
// It is told at once.
func TestResumeDroppedMeanwhile(t *testing.T) {
	b, srv := newBridge(t, Config{NoSpare: true})
	ctx := context.Background()
	c := client(srv, "alice")
	if err := c.Initialize(ctx, "2025-11-25", nil); err != nil {
		t.Fatal(err)
	}
	// The call's priming event, then the client leaves before its answer.
	lctx, leave := context.WithCancel(ctx)
	resp, err := c.Open(lctx, mcptest.Tool(7, "echo", map[string]any{"text": "the answer", "sleepMs": 100}), "Accept", "text/event-stream, application/json")
	if err != nil {
		t.Fatal(err)
	}
	e, err := mcptest.ReadEvent(bufio.NewReader(resp.Body))
	leave()
	_ = resp.Body.Close()
	if err != nil || e.ID == "" {
		t.Fatalf("the priming event: %+v %v", e, err)
	}
	if err := mcptest.Eventually(10*time.Second, func() error {
		if n := b.Stats().Held.Events; n == 0 {
			return fmt.Errorf("no answer kept yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	testHookResume = func(s *session, _ *stream) {
		for range ringEvents {
			s.get.push([]byte(`{"jsonrpc":"2.0","method":"notifications/message"}`), false)
		}
	}
	t.Cleanup(func() { testHookResume = nil })
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g, err := c.Get(rctx, e.ID)
	testHookResume = nil
	if err != nil {
		t.Fatal(err)
	}
	defer g.Body.Close()
	body, _ := io.ReadAll(g.Body)
	if g.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "no longer kept") {
		t.Errorf("resuming from %s once its answer was dropped = %d %q; want 404, the events no longer kept", e.ID, g.StatusCode, body)
	}
}
