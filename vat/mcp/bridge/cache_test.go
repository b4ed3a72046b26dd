package bridge

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"toybox/vat/mcp"
	"toybox/vat/mcp/mcptest"
)

// listerEnv makes this test binary mcptest.Lister, its state in the
// folder it names; listerTTLEnv and listerScopeEnv are its ttlMs and
// cacheScope ("-" leaves the key out).
const (
	listerEnv      = "BRIDGE_TEST_LISTER"
	listerTTLEnv   = "BRIDGE_TEST_LISTER_TTL"
	listerScopeEnv = "BRIDGE_TEST_LISTER_SCOPE"
)

func runLister(dir string) int {
	ttl, err := strconv.Atoi(os.Getenv(listerTTLEnv))
	if err != nil {
		ttl = -1
	}
	scope := os.Getenv(listerScopeEnv)
	if scope == "-" {
		scope = ""
	}
	return mcptest.Lister(os.Stdin, os.Stdout, mcptest.ListerConfig{Dir: dir, TTLMs: ttl, Scope: scope})
}

// newLister starts a bridge whose processes are the lister, its tools/list
// answers carrying ttl ("" for none) and scope ("" for none).
func newLister(t *testing.T, cfg Config, ttl, scope string) *httptest.Server {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if scope == "" {
		scope = "-"
	}
	cfg.Spawner = ExecSpawner{Argv: []string{self}, Env: []string{listerEnv + "=" + t.TempDir(), listerTTLEnv + "=" + ttl, listerScopeEnv + "=" + scope}}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b)
	t.Cleanup(func() {
		srv.Close()
		b.Close()
	})
	return srv
}

// cacheOn is the header the supervisor sends for a vat whose manifest
// says mcp.cacheToolsList.
var cacheOn = []string{mcp.HeaderCache, mcp.CacheToolsList}

// page is one tools/list answer as a client reads it.
type page struct {
	id     string
	names  []string
	cursor string // nextCursor; "" for none
	err    string
}

// listPage asks c for the tools/list page at cursor ("" for the first),
// as a stateless request when modern.
func listPage(t *testing.T, c *mcptest.Client, id any, cursor string, modern bool, hdr ...string) page {
	t.Helper()
	params := map[string]any{}
	if cursor != "" {
		params["cursor"] = cursor
	}
	if modern {
		params["_meta"] = modernMeta
		hdr = append(hdr, modernHeaders("tools/list", "")...)
	}
	r, err := c.Post(context.Background(), mcptest.Request(id, "tools/list", params), hdr...)
	if err != nil {
		t.Fatal(err)
	}
	f := r.Final()
	if f == nil {
		t.Fatalf("tools/list: no answer (%d %s)", r.Status, r.Body)
	}
	p := page{id: string(f["id"])}
	if f["error"] != nil {
		p.err = string(f["error"])
		return p
	}
	var res struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
		NextCursor string `json:"nextCursor"`
	}
	if err := json.Unmarshal(f["result"], &res); err != nil {
		t.Fatalf("tools/list result %s: %v", f["result"], err)
	}
	for _, tl := range res.Tools {
		p.names = append(p.names, tl.Name)
	}
	p.cursor = res.NextCursor
	return p
}

// listAll walks every page from the first and returns the names.
func listAll(t *testing.T, c *mcptest.Client, modern bool, hdr ...string) []string {
	t.Helper()
	var names []string
	cursor := ""
	for i := range 10 {
		p := listPage(t, c, 100+i, cursor, modern, hdr...)
		if p.err != "" {
			t.Fatalf("tools/list at %q: %s", cursor, p.err)
		}
		names = append(names, p.names...)
		if cursor = p.cursor; cursor == "" {
			return names
		}
	}
	t.Fatal("tools/list: more than 10 pages")
	return nil
}

// listed asks the lister how many tools/list its processes answered:
// the count at the server.
func listed(t *testing.T, c *mcptest.Client) int {
	t.Helper()
	r, err := c.Post(context.Background(), mcptest.Tool(9, "listed", nil))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(r.Text())
	if err != nil {
		t.Fatalf("listed = %q", r.Text())
	}
	return n
}

func toolCall(t *testing.T, c *mcptest.Client, name string, args map[string]any) {
	t.Helper()
	if r, err := c.Post(context.Background(), mcptest.Tool(8, name, args)); err != nil || strings.HasPrefix(r.Text(), "error") {
		t.Fatalf("%s: %v %q", name, err, r.Text())
	}
}

func openSession(t *testing.T, srv *httptest.Server, principal string) *mcptest.Client {
	t.Helper()
	c := client(srv, principal)
	if err := c.Initialize(context.Background(), "", nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCacheOffByDefault (R48): without the supervisor's mark, every
// tools/list reaches the server, though it says its list is public for a
// minute.
func TestCacheOffByDefault(t *testing.T) {
	srv := newLister(t, Config{}, "60000", "public")
	alice, bob := openSession(t, srv, "alice"), openSession(t, srv, "bob")
	for range 3 {
		listPage(t, alice, 1, "", false)
		listPage(t, bob, 1, "", false)
	}
	listPage(t, client(srv, "carol"), 1, "", true)
	if n := listed(t, alice); n != 7 {
		t.Errorf("the server answered %d tools/list; want all 7", n)
	}
}

// TestCacheListChanged (R48, R34): with the cache on, a public list is
// answered from the cache, to any principal under its own id, page by
// page, until the server says list_changed; the new list comes right
// after it.
func TestCacheListChanged(t *testing.T) {
	for _, modern := range []bool{false, true} {
		t.Run(map[bool]string{false: "legacy", true: "modern"}[modern], func(t *testing.T) {
			srv := newLister(t, Config{Mode: ModeSession}, "60000", "public")
			alice, bob := openSession(t, srv, "alice"), openSession(t, srv, "bob")
			if modern {
				alice, bob = client(srv, "alice"), client(srv, "bob")
			}
			counter := openSession(t, srv, "counter") // asks the server, never lists
			old := []string{"alpha", "beta", "gamma"}
			if got := listAll(t, alice, modern, cacheOn...); !slices.Equal(got, old) {
				t.Fatalf("first list = %v; want %v", got, old)
			}
			if n := listed(t, counter); n != 2 {
				t.Fatalf("the server answered %d tools/list for two pages; want 2", n)
			}
			// Another principal, another id: its own id back, the same
			// pages, and the server asked nothing.
			for _, id := range []any{"bob-1", 77} {
				p := listPage(t, bob, id, "", modern, cacheOn...)
				want, _ := json.Marshal(id)
				if p.id != string(want) || !slices.Equal(p.names, old[:2]) || p.cursor != "2" {
					t.Errorf("bob's cached page = %+v; want id %s, %v and cursor 2", p, want, old[:2])
				}
			}
			if p := listPage(t, bob, 5, "2", modern, cacheOn...); !slices.Equal(p.names, old[2:]) || p.cursor != "" {
				t.Errorf("bob's second page = %+v; want %v and no cursor", p, old[2:])
			}
			if n := listed(t, counter); n != 2 {
				t.Errorf("the server answered %d tools/list; want still 2 (the rest from the cache)", n)
			}
			// The list changes, silently: the cache still serves the old.
			toolCall(t, counter, "grow", map[string]any{"name": "delta"})
			if got := listAll(t, bob, modern, cacheOn...); !slices.Equal(got, old) {
				t.Errorf("list after a silent change = %v; want the cached %v", got, old)
			}
			// list_changed: the very next list is the new one.
			toolCall(t, counter, "announce", nil)
			want := []string{"alpha", "beta", "gamma", "delta"}
			if got := listAll(t, alice, modern, cacheOn...); !slices.Equal(got, want) {
				t.Errorf("list after list_changed = %v; want %v", got, want)
			}
			if n := listed(t, counter); n != 4 {
				t.Errorf("the server answered %d tools/list; want 4", n)
			}
		})
	}
}

// TestCacheOnlyPublicWithTTL: a list is kept only when the server says
// cacheScope "public" and a positive ttlMs, and only for that long; a
// principal with secrets of its own (R22) never shares it.
func TestCacheOnlyPublicWithTTL(t *testing.T) {
	tests := []struct {
		name, ttl, scope string
		env              string // the second lister's Toybox-Principal-Env
		wait             time.Duration
		want             int // tools/list the server answers for two
	}{
		{"public", "60000", "public", "", 0, 1},
		{"private", "60000", "private", "", 0, 2},
		{"no scope", "60000", "", "", 0, 2},
		{"no ttl", "", "public", "", 0, 2},
		{"ttl zero", "0", "public", "", 0, 2},
		{"ttl negative", "-5", "public", "", 0, 2},
		{"expired", "100", "public", "", 300 * time.Millisecond, 2},
		{"principal with secrets", "60000", "public", mcp.EncodeEnv(map[string]string{"API_KEY": "k"}), 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newLister(t, Config{Mode: ModeSingle}, tt.ttl, tt.scope)
			a, b := openSession(t, srv, "a"), client(srv, "b")
			b.PrincipalEnv = tt.env
			if err := b.Initialize(context.Background(), "", nil); err != nil {
				t.Fatal(err)
			}
			listPage(t, a, 1, "", false, cacheOn...)
			time.Sleep(tt.wait)
			listPage(t, b, 1, "", false, cacheOn...)
			if n := listed(t, a); n != tt.want {
				t.Errorf("the server answered %d tools/list; want %d", n, tt.want)
			}
		})
	}
}

// TestCacheBadCursor: an error answer to a page empties the cache (its
// pages may no longer fit together), and is itself never kept.
func TestCacheBadCursor(t *testing.T) {
	srv := newLister(t, Config{Mode: ModeSingle}, "60000", "public")
	c := openSession(t, srv, "a")
	listPage(t, c, 1, "", false, cacheOn...)
	for range 2 {
		if p := listPage(t, c, 2, "99", false, cacheOn...); !strings.Contains(p.err, "invalid cursor") {
			t.Fatalf("a bad cursor = %+v; want its error", p)
		}
	}
	listPage(t, c, 3, "", false, cacheOn...)
	if n := listed(t, c); n != 4 {
		t.Errorf("the server answered %d tools/list; want 4 (the bad cursor twice, the first page again)", n)
	}
}

// TestCacheKey: what a cached answer may be given for.
func TestCacheKey(t *testing.T) {
	tests := []struct {
		name, msg, version string
		want               string // "" for not cacheable
	}{
		{"no params", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "2025-11-25", "2025-11-25\n-"},
		{"empty params", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`, "2025-06-18", "2025-06-18\n-"},
		{"cursor", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"2"}}`, "2025-11-25", "2025-11-25\nc\"2\""},
		{"empty cursor", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":""}}`, "2025-11-25", "2025-11-25\nc\"\""},
		{"modern meta", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":3}}}`, "2026-07-28", "2026-07-28\n-"},
		{"other meta", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"com.example/tenant":"a"}}}`, "2026-07-28", ""},
		{"mrtr retry", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"requestState":"x"}}`, "2026-07-28", ""},
		{"other param", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"filter":"a"}}`, "2025-11-25", ""},
		{"no version", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "", ""},
		{"other method", `{"jsonrpc":"2.0","id":1,"method":"prompts/list"}`, "2025-11-25", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := mcp.Parse([]byte(tt.msg))
			if err != nil {
				t.Fatal(err)
			}
			got, ok := cacheKey(m, tt.version)
			if !ok {
				got = ""
			}
			if got != tt.want {
				t.Errorf("cacheKey(%s, %q) = %q; want %q", tt.msg, tt.version, got, tt.want)
			}
		})
	}
}

// TestCacheable: which results are kept, and for how long.
func TestCacheable(t *testing.T) {
	tests := []struct {
		result string
		want   time.Duration // 0: not kept
	}{
		{`{"tools":[],"ttlMs":5000,"cacheScope":"public"}`, 5 * time.Second},
		{`{"tools":[],"ttlMs":5000,"cacheScope":"public","resultType":"complete"}`, 5 * time.Second},
		{`{"tools":[],"ttlMs":99999999999,"cacheScope":"public"}`, cacheMaxTTL},
		{`{"tools":[],"ttlMs":5000,"cacheScope":"public","resultType":"input_required"}`, 0},
		{`{"tools":[],"ttlMs":5000,"cacheScope":"private"}`, 0},
		{`{"tools":[],"ttlMs":5000,"cacheScope":"PUBLIC"}`, 0},
		{`{"tools":[],"ttlMs":5000}`, 0},
		{`{"tools":[],"ttlMs":1.5,"cacheScope":"public"}`, 0},
		{`{"tools":[],"ttlMs":"5000","cacheScope":"public"}`, 0},
		{`{"tools":[],"ttlMs":5e3,"cacheScope":"public"}`, 0},
		{`{"tools":[],"cacheScope":"public"}`, 0},
		{`{"tools":[],"ttlMs":-1,"cacheScope":"public"}`, 0},
	}
	for _, tt := range tests {
		got, ok := cacheable([]byte(tt.result))
		if !ok {
			got = 0
		}
		if got != tt.want {
			t.Errorf("cacheable(%s) = %v; want %v", tt.result, got, tt.want)
		}
	}
}

// TestCacheHitAsStream: a client that prefers an event stream gets a
// cached answer as one, as it would the vat's.
func TestCacheHitAsStream(t *testing.T) {
	srv := newLister(t, Config{Mode: ModeSingle}, "60000", "public")
	c := openSession(t, srv, "a")
	listPage(t, c, 1, "", false, cacheOn...)
	r, err := c.Post(context.Background(), mcptest.Request("s-1", "tools/list", map[string]any{}), append([]string{"Accept", "text/event-stream, application/json"}, cacheOn...)...)
	if err != nil {
		t.Fatal(err)
	}
	f := r.Final()
	if len(r.Events) == 0 || f == nil || string(f["id"]) != `"s-1"` || f["result"] == nil {
		t.Errorf("a cached answer to a client preferring a stream = %d %q %+v; want one event answering s-1", r.Status, r.Body, r.Events)
	}
	if n := listed(t, c); n != 1 {
		t.Errorf("the server answered %d tools/list; want 1", n)
	}
}
