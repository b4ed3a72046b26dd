package supervisor

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"toybox/vat/mcp"
)

// TestSessionTableEvictsTheMostHeld: past its bound the edge's table of
// sessions forgets (and ends at the vat) a session of the principal that
// holds the most, the least recently used of them. Forgetting the least
// recently used of anyone's let one token holder end every other
// principal's session by opening maxSessions of its own.
func TestSessionTableEvictsTheMostHeld(t *testing.T) {
	const bound = 8
	tab := newSessionTable(bound)
	tab.bind("alice-1", "alice")
	tab.bind("bob-1", "bob")
	for i := range 3 * bound {
		sid := fmt.Sprintf("mallory-%d", i)
		evicted, principal := tab.bind(sid, "mallory")
		if evicted != "" && principal != "mallory" {
			t.Fatalf("mallory's session %d evicted %s's %s", i, principal, evicted)
		}
	}
	for _, sid := range []string{"alice-1", "bob-1"} {
		if _, ok := tab.owner(sid); !ok {
			t.Errorf("session %s was forgotten to make room for mallory's", sid)
		}
	}
	if _, ok := tab.owner("mallory-0"); ok {
		t.Error("mallory's oldest session is still kept")
	}
	if p, ok := tab.owner(fmt.Sprintf("mallory-%d", 3*bound-1)); !ok || p != "mallory" {
		t.Errorf("mallory's newest session: %q %v; want kept", p, ok)
	}
	if n := tab.len(); n != bound {
		t.Errorf("the table keeps %d sessions; want %d", n, bound)
	}

	// Among principals holding as many, the least recently used goes.
	tab = newSessionTable(2)
	tab.bind("a", "alice")
	tab.bind("b", "bob")
	tab.owner("a")
	if evicted, p := tab.bind("c", "carol"); evicted != "b" || p != "bob" {
		t.Errorf("bind past the bound evicted %q of %q; want b of bob", evicted, p)
	}
	tab.drop("a")
	tab.drop("c")
	if n := tab.len(); n != 0 {
		t.Errorf("after dropping all, the table keeps %d", n)
	}
}

// TestSessionTableCountsHolders: a client's own header values (mcp.headerEnv)
// make it another principal, "token:<id>/env:<digest>", for its processes
// and sessions. Counted apart, one token holder that sent a new value with
// each initialize held one session per principal, never the most, and so
// ended alice's: the sessions it opened past the bound ended everyone
// else's instead of its own. The table counts them by who holds them.
func TestSessionTableCountsHolders(t *testing.T) {
	const bound = 8
	tab := newSessionTable(bound)
	tab.bind("alice-1", "token:alice")
	tab.bind("alice-2", "token:alice")
	for i := range 3 * bound {
		sid := fmt.Sprintf("mallory-%d", i)
		principal := fmt.Sprintf("token:mallory/env:%016x", i)
		if evicted, p := tab.bind(sid, principal); evicted != "" && !strings.HasPrefix(p, "token:mallory/") {
			t.Fatalf("mallory's session %d evicted %s's %s", i, p, evicted)
		}
	}
	for _, sid := range []string{"alice-1", "alice-2"} {
		if p, ok := tab.owner(sid); !ok || p != "token:alice" {
			t.Errorf("session %s: %q %v; want kept as alice's", sid, p, ok)
		}
	}
	// Each session is still its own principal's.
	if p, ok := tab.owner(fmt.Sprintf("mallory-%d", 3*bound-1)); !ok || p != fmt.Sprintf("token:mallory/env:%016x", 3*bound-1) {
		t.Errorf("mallory's newest session: %q %v; want kept, its own principal's", p, ok)
	}
}

// TestLearnRefusedInitialize: a vat answers initialize 200 with an
// Mcp-Session-Id but a JSON-RPC error in its JSON body (it refused). No
// session was made: the edge keeps no id for it (so a request naming it
// is 404 at the edge), hands none to the client, and passes the body
// on whole. An accepted one is kept.
func TestLearnRefusedInitialize(t *testing.T) {
	tests := []struct {
		name, body string
		kept       bool
	}{
		{"refused", `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no such version"}}`, false},
		{"accepted", `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &mcpRoute{sessions: newSessionTable(8)}
			c := &mcpCall{principal: "alice", era: mcp.Legacy, method: "initialize"}
			req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
			resp := &http.Response{
				StatusCode: http.StatusOK, Request: req,
				Header: http.Header{"Content-Type": {"application/json"}, "Mcp-Session-Id": {"s-" + tt.name}},
				Body:   &closedAtEOF{r: strings.NewReader(tt.body)},
			}
			if err := rt.learn(c, resp); err != nil {
				t.Fatalf("learn: %v", err)
			}
			_, kept := rt.sessions.owner("s-" + tt.name)
			if kept != tt.kept {
				t.Errorf("session kept = %v; want %v", kept, tt.kept)
			}
			if got := resp.Header.Get("Mcp-Session-Id") != ""; got != tt.kept {
				t.Errorf("Mcp-Session-Id to the client = %q; want one only if kept (%v)", resp.Header.Get("Mcp-Session-Id"), tt.kept)
			}
			if b, err := io.ReadAll(resp.Body); err != nil || string(b) != tt.body {
				t.Errorf("body = %s, %v; want %s", b, err, tt.body)
			}
		})
	}
}

// closedAtEOF is a body that closes itself at its end, as a transport's
// may: a read after it is an error.
type closedAtEOF struct {
	r    io.Reader
	done bool
}

func (b *closedAtEOF) Read(p []byte) (int, error) {
	if b.done {
		return 0, errors.New("http: invalid Read on closed Body")
	}
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		b.done = true
	}
	return n, err
}

func (b *closedAtEOF) Close() error { return nil }
