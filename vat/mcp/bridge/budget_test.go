package bridge

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/vat/mcp/mcptest"
)

// TestBodyBudget: the request bodies the bridge holds at once are
// bounded, per principal and in all. Each body is read whole (up to
// MaxMessage, 32 MiB) and held, with its copies, until its call is
// answered; unbounded, one client's dozen concurrent large POSTs took
// more memory than a wall has, and the vat ended for every client.
func TestBodyBudget(t *testing.T) {
	const limit = 1 << 20
	b, srv := newBridge(t, Config{MaxMessage: limit, NoSpare: true, Mode: ModeShared})
	ctx := context.Background()
	clients := map[string]*mcptest.Client{}
	for _, p := range []string{"mallory", "alice", "bob", "carol"} {
		c := client(srv, p)
		if err := c.Initialize(ctx, "", nil); err != nil {
			t.Fatal(err)
		}
		clients[p] = c
	}
	// A call that holds its body for a while: a slow tool with a large
	// argument. Long enough for the checks below on a loaded machine.
	big := func(id int) []byte {
		return mcptest.Tool(id, "slow", map[string]any{"ms": 5000, "text": strings.Repeat("x", limit*9/10)})
	}
	// held waits until n large bodies are read and held.
	held := func(n int64) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			b.bodies.mu.Lock()
			h := b.bodies.held
			b.bodies.mu.Unlock()
			if h >= n*(limit*9/10-freeBody) {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("the bridge holds %d bytes of bodies; want %d large ones held", h, n)
			}
		}
	}
	var wg sync.WaitGroup
	hold := func(p string, id int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := clients[p].Post(ctx, big(id))
			if err != nil || r.Text() != "slept" {
				t.Errorf("%s's first large call: %v %d %q; want slept", p, err, r.Status, r.Text())
			}
		}()
	}
	hold("mallory", 2)
	held(1)
	if r, err := clients["mallory"].Post(ctx, big(3)); err != nil || r.Status != http.StatusServiceUnavailable {
		t.Errorf("mallory's second large body at once: %v %d %q; want 503", err, r.Status, r.Text())
	}
	hold("alice", 4)
	hold("bob", 5)
	held(3)
	if r, err := clients["carol"].Post(ctx, big(6)); err != nil || r.Status != http.StatusServiceUnavailable {
		t.Errorf("a fourth principal's large body past the bound of all: %v %d %q; want 503", err, r.Status, r.Text())
	}
	// Small messages are never held back.
	if r, err := clients["carol"].Post(ctx, mcptest.Tool(7, "echo", map[string]any{"text": "small"})); err != nil || r.Text() != "small" {
		t.Errorf("a small call meanwhile: %v %d %q; want small", err, r.Status, r.Text())
	}
	wg.Wait()
	if r, err := clients["mallory"].Post(ctx, big(8)); err != nil || r.Text() != "slept" {
		t.Errorf("mallory's large call once the others ended: %v %d %q; want slept", err, r.Status, r.Text())
	}
}
