//go:build linux

package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// mcpAnswer is the JSON-RPC response in an answer's body: the body, or
// the last event that carries an id.
func mcpAnswer(t *testing.T, body string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(body), &m) == nil {
		return m
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var x map[string]json.RawMessage
			if json.Unmarshal([]byte(d), &x) == nil && x["id"] != nil {
				m = x
			}
		}
	}
	if m == nil {
		t.Fatalf("no JSON-RPC answer in %q", body)
	}
	return m
}

// mcpSession opens a legacy session on vat id and returns the headers
// its requests carry.
func (s *stack) mcpSession(id string) []string {
	s.t.Helper()
	code, h, body := s.mcpPost(id, mcpInit)
	sid := h.Get("Mcp-Session-Id")
	if code != http.StatusOK || sid == "" {
		s.t.Fatalf("initialize %s: %d %q %s", id, code, sid, body)
	}
	session := []string{"Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25"}
	if code, _, body := s.mcpPost(id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, session...); code != http.StatusAccepted {
		s.t.Fatalf("notifications/initialized %s: %d %s", id, code, body)
	}
	return session
}

// TestMCPCacheEndToEnd (R48, R34): tests/mcplist, whose list says it is
// public for a minute, walled as two stdio vats. The one whose manifest
// says mcp.cacheToolsList answers tools/list from the cache, to another
// session under its own id, until the server says list_changed, and the
// new list right after; the other sends every tools/list to the server
// (a client's own Toybox-Cache header notwithstanding). The status says
// which caches.
func TestMCPCacheEndToEnd(t *testing.T) {
	s := newStack(t, stackOpts{})
	for id, cache := range map[string]string{"cached": `, "cacheToolsList": true`, "uncached": ""} {
		manifest := fmt.Sprintf(`{"command": ["./mcplist", "--ttl-ms", "60000", "--scope", "public"], "mcp": {"transport": "stdio"%s}}`, cache)
		body := mcpBundle(t, manifest, map[string]string{"mcplist": example(t, "mcplist")})
		if code, out := s.adminDo("PUT", "/"+id, strings.NewReader(string(body))); code != http.StatusCreated {
			t.Fatalf("PUT /%s = %d %s", id, code, out)
		}
	}
	// list walks vat id's list from the first page, as session, with
	// ids id-<n>; each answer must carry its own id.
	list := func(id string, session []string, n int) []string {
		t.Helper()
		var names []string
		cursor := ""
		for i := range 5 {
			params := "{}"
			if cursor != "" {
				params = fmt.Sprintf(`{"cursor":%q}`, cursor)
			}
			rid := fmt.Sprintf(`"%s-%d-%d"`, id, n, i)
			code, _, body := s.mcpPost(id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/list","params":%s}`, rid, params), append(session, "Toybox-Cache", "tools/list")...)
			m := mcpAnswer(t, body)
			if code != http.StatusOK || string(m["id"]) != rid || m["result"] == nil {
				t.Fatalf("tools/list on %s: %d %s; want a result for id %s", id, code, body, rid)
			}
			var res struct {
				Tools []struct {
					Name string `json:"name"`
				} `json:"tools"`
				NextCursor string `json:"nextCursor"`
			}
			if err := json.Unmarshal(m["result"], &res); err != nil {
				t.Fatal(err)
			}
			for _, tl := range res.Tools {
				names = append(names, tl.Name)
			}
			if cursor = res.NextCursor; cursor == "" {
				return names
			}
		}
		t.Fatalf("tools/list on %s: more than 5 pages", id)
		return nil
	}
	call := func(id string, session []string, tool, args string) string {
		t.Helper()
		code, _, body := s.mcpPost(id, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool, args), session...)
		var res struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal(mcpAnswer(t, body)["result"], &res); code != http.StatusOK || err != nil || len(res.Content) == 0 {
			t.Fatalf("tools/call %s on %s: %d %s", tool, id, code, body)
		}
		return res.Content[0].Text
	}
	old := []string{"alpha", "beta", "gamma"}

	// asked is how many tools/list vat id's server was asked, the install
	// probe's walk included.
	asked := func(id string, session []string) int {
		t.Helper()
		n, err := strconv.Atoi(call(id, session, "listed", "{}"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Caching off (the default): every tools/list reaches the server.
	off := s.mcpSession("uncached")
	before := asked("uncached", off)
	for n := range 3 {
		if got := list("uncached", off, n); !slices.Equal(got, old) {
			t.Fatalf("uncached list = %v; want %v", got, old)
		}
	}
	if got := asked("uncached", off) - before; got != 6 {
		t.Errorf("the uncached server was asked %d tools/list; want all 6 (3 lists of 2 pages)", got)
	}

	a, b := s.mcpSession("cached"), s.mcpSession("cached")
	before = asked("cached", a)
	if got := list("cached", a, 0); !slices.Equal(got, old) {
		t.Fatalf("cached list = %v; want %v", got, old)
	}
	if got := list("cached", b, 1); !slices.Equal(got, old) {
		t.Fatalf("another session's list = %v; want %v", got, old)
	}
	if got := asked("cached", a) - before; got != 2 {
		t.Errorf("the cached server was asked %d tools/list; want 2 (one walk; the other from the cache)", got)
	}
	call("cached", a, "grow", `{"name":"delta"}`)
	if got := list("cached", b, 2); !slices.Equal(got, old) {
		t.Errorf("list after a silent change = %v; want the cached %v", got, old)
	}
	call("cached", a, "announce", "{}")
	want := []string{"alpha", "beta", "gamma", "delta"}
	if got := list("cached", b, 3); !slices.Equal(got, want) {
		t.Errorf("list right after list_changed = %v; want %v", got, want)
	}
	if got := asked("cached", a) - before; got != 4 {
		t.Errorf("the cached server was asked %d tools/list; want 4 (the walk after list_changed too)", got)
	}

	for id, want := range map[string]string{"cached": "tools/list:", "uncached": "off:"} {
		st := s.status(id)
		m, _ := st["mcp"].(map[string]any)
		words, _ := m["cache"].(string)
		bridge, _ := m["bridge"].(map[string]any)
		_, counted := bridge["toolsListCache"]
		if !strings.HasPrefix(words, want) || counted != (id == "cached") {
			t.Errorf("GET /%s: mcp.cache %q, bridge counters %v; want %q…, the bridge's cache counters only when cached", id, words, bridge, want)
		}
	}
}
