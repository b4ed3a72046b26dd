package bridge

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"toybox/vat/mcp"
	"toybox/vat/mcp/mcptest"
)

// These tests run the bridge outside a wall, its processes the fake
// server (this test binary again); vat/wall's tests run it in real walls.

const fakeEnv = "BRIDGE_TEST_FAKE"

func TestMain(m *testing.M) {
	if dir := os.Getenv(listerEnv); dir != "" {
		os.Exit(runLister(dir))
	}
	if os.Getenv(fakeEnv) == "1" {
		mcptest.ModernOnly = os.Getenv("BRIDGE_TEST_MODERN") == "1"
		if os.Getenv(iconEnv) == "1" {
			mcptest.Icon = bigIcon
		}
		mcptest.Tools["env"] = fakeEnviron
		os.Exit(mcptest.Fake(os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func newBridge(t *testing.T, cfg Config, env ...string) (*Bridge, *httptest.Server) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env = append(env, fakeEnv+"=1")
	if cfg.Era == mcp.Modern {
		env = append(env, "BRIDGE_TEST_MODERN=1")
	}
	cfg.Spawner = ExecSpawner{Argv: []string{self}, Env: env}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b)
	t.Cleanup(func() {
		srv.Close()
		b.Close()
	})
	return b, srv
}

func client(srv *httptest.Server, principal string) *mcptest.Client {
	return &mcptest.Client{HTTP: srv.Client(), URL: srv.URL + Path, Principal: principal}
}

func pid(t *testing.T, c *mcptest.Client) string {
	t.Helper()
	r, err := c.Post(context.Background(), mcptest.Tool(9, "pid", nil))
	if err != nil || r.Text() == "" {
		t.Fatalf("pid: %v %+v", err, r)
	}
	return r.Text()
}

// TestModes: which sessions share a process, per mode.
func TestModes(t *testing.T) {
	tests := []struct {
		mode Mode
		// whether alice's two sessions share a process, and alice and bob
		sameAlice, sameAcross bool
	}{
		{ModeSession, false, false},
		{ModeShared, true, false},
		{ModeSingle, true, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			_, srv := newBridge(t, Config{Mode: tt.mode})
			ctx := context.Background()
			a1, a2, b1 := client(srv, "alice"), client(srv, "alice"), client(srv, "bob")
			for _, c := range []*mcptest.Client{a1, a2, b1} {
				if err := c.Initialize(ctx, "", nil); err != nil {
					t.Fatal(err)
				}
			}
			if got := pid(t, a1) == pid(t, a2); got != tt.sameAlice {
				t.Errorf("alice's sessions share a process: %v; want %v", got, tt.sameAlice)
			}
			if got := pid(t, a1) == pid(t, b1); got != tt.sameAcross {
				t.Errorf("alice and bob share a process: %v; want %v", got, tt.sameAcross)
			}
			if tt.mode != ModeSession {
				// A server request on a shared process cannot be routed
				// to one session: the vat is told so, and the call ends.
				r, err := a1.Post(ctx, mcptest.Tool(3, "sample", nil))
				if err != nil || !strings.Contains(r.Text(), "sampled:") {
					t.Fatalf("sample on a shared process: %v %q", err, r.Text())
				}
			}
		})
	}
}

// TestProcessBound: at its bound the bridge ends the least recently used
// session to make room; that session's next request gets 404.
func TestProcessBound(t *testing.T) {
	b, srv := newBridge(t, Config{MaxProcs: 2, NoSpare: true})
	ctx := context.Background()
	c1, c2, c3 := client(srv, "a"), client(srv, "b"), client(srv, "c")
	for _, c := range []*mcptest.Client{c1, c2} {
		if err := c.Initialize(ctx, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	if _, err := c2.Post(ctx, mcptest.Tool(2, "echo", map[string]any{"text": "x"})); err != nil {
		t.Fatal(err)
	}
	if err := c3.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := c1.Post(ctx, mcptest.Tool(3, "echo", map[string]any{"text": "x"})); r.Status != http.StatusNotFound {
		t.Errorf("the least recently used session: %d; want 404", r.Status)
	}
	if r, _ := c2.Post(ctx, mcptest.Tool(4, "echo", map[string]any{"text": "kept"})); r.Text() != "kept" {
		t.Errorf("the recent session: %q; want kept", r.Text())
	}
	err := mcptest.Eventually(5*time.Second, func() error {
		if st := b.Stats(); st.Processes > 2 || st.Sessions != 2 {
			return fmt.Errorf("stats %+v; want at most 2 processes, 2 sessions", st)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestProcessBoundPerPrincipal: at the bound, a principal that opens
// session after session ends its own, not one of a principal holding
// fewer. Ending the least recently used session of anyone let one client
// end every other client's session with MaxProcs initializes.
func TestProcessBoundPerPrincipal(t *testing.T) {
	const bound = 4
	_, srv := newBridge(t, Config{MaxProcs: bound, NoSpare: true})
	ctx := context.Background()
	alice := client(srv, "alice")
	if err := alice.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	var mallory []*mcptest.Client
	for range 2 * bound {
		time.Sleep(5 * time.Millisecond) // each later than alice's
		c := client(srv, "mallory")
		if err := c.Initialize(ctx, "", nil); err != nil {
			t.Fatal(err)
		}
		mallory = append(mallory, c)
	}
	if r, err := alice.Post(ctx, mcptest.Tool(2, "echo", map[string]any{"text": "kept"})); err != nil || r.Text() != "kept" {
		t.Errorf("alice's session after mallory's %d: %d %q %v; want kept", len(mallory), r.Status, r.Text(), err)
	}
	if r, _ := mallory[0].Post(ctx, mcptest.Tool(3, "echo", map[string]any{"text": "x"})); r.Status != http.StatusNotFound {
		t.Errorf("mallory's oldest session: %d; want 404", r.Status)
	}
	if r, _ := mallory[len(mallory)-1].Post(ctx, mcptest.Tool(4, "echo", map[string]any{"text": "new"})); r.Text() != "new" {
		t.Errorf("mallory's newest session: %q; want new", r.Text())
	}
}

// TestProcessBoundPerHolder: a client's own header values (mcp.headerEnv)
// make it another principal, "token:<id>/env:<digest>", with processes of
// its own. Counted apart, a token holder that sent a new value with each
// initialize held one process per principal, never the most: in session
// mode its sessions past the bound ended alice's; in shared mode its
// shared processes took every slot, for good, and alice got 503. The
// bound counts processes by who holds them (mcp.Holder): the holder's
// own go first.
func TestProcessBoundPerHolder(t *testing.T) {
	const bound = 4
	for _, mode := range []Mode{ModeSession, ModeShared} {
		t.Run(string(mode), func(t *testing.T) {
			_, srv := newBridge(t, Config{MaxProcs: bound, NoSpare: true, Mode: mode})
			ctx := context.Background()
			alice := client(srv, "token:alice")
			if mode == ModeSession {
				if err := alice.Initialize(ctx, "", nil); err != nil {
					t.Fatal(err)
				}
			}
			var mallory []*mcptest.Client
			for i := range 2 * bound {
				time.Sleep(5 * time.Millisecond) // each later than alice's
				c := client(srv, fmt.Sprintf("token:mallory/env:%016x", i))
				if err := c.Initialize(ctx, "", nil); err != nil {
					t.Fatalf("mallory's session %d: %v", i, err)
				}
				mallory = append(mallory, c)
			}
			if mode == ModeShared {
				if err := alice.Initialize(ctx, "", nil); err != nil {
					t.Fatalf("alice, after mallory's %d values took every process: %v", len(mallory), err)
				}
			}
			if r, err := alice.Post(ctx, mcptest.Tool(2, "echo", map[string]any{"text": "kept"})); err != nil || r.Text() != "kept" {
				t.Errorf("alice's session after mallory's %d: %d %q %v; want kept", len(mallory), r.Status, r.Text(), err)
			}
			if r, _ := mallory[len(mallory)-1].Post(ctx, mcptest.Tool(4, "echo", map[string]any{"text": "new"})); r.Text() != "new" && mode == ModeSession {
				t.Errorf("mallory's newest session: %q; want new", r.Text())
			}
		})
	}
}

// TestSpare: a spare process waits for the next session, and comes back
// once taken.
func TestSpare(t *testing.T) {
	b, srv := newBridge(t, Config{})
	wait := func(want string) {
		t.Helper()
		err := mcptest.Eventually(5*time.Second, func() error {
			if st := b.Stats(); !st.Spare {
				return fmt.Errorf("%s: stats %+v; want a spare", want, st)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wait("at start")
	if err := client(srv, "a").Initialize(context.Background(), "", nil); err != nil {
		t.Fatal(err)
	}
	wait("after a session took it")
	if st := b.Stats(); st.Processes != 2 || st.Spawned != 2 {
		t.Errorf("stats %+v; want the session's process and a new spare", st)
	}
}

func modernHeaders(method, name string) []string {
	h := []string{mcp.HeaderVersion, mcp.ModernVersion, mcp.HeaderMethod, method}
	if name != "" {
		h = append(h, mcp.HeaderName, name)
	}
	return h
}

var modernMeta = map[string]any{
	mcp.MetaProtocolVersion:    mcp.ModernVersion,
	mcp.MetaClientCapabilities: map[string]any{},
}

// TestModernRequests: a stateless request is checked against its
// mirrored headers before any process sees it, and its errors keep their
// HTTP status.
func TestModernRequests(t *testing.T) {
	_, srv := newBridge(t, Config{Era: mcp.Dual})
	ctx := context.Background()
	c := client(srv, "alice")
	call := mcptest.Request(5, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}, "_meta": modernMeta})
	region := mcptest.Request(6, "tools/call", map[string]any{"name": "region", "arguments": map[string]any{"region": "eu"}, "_meta": modernMeta})
	tests := []struct {
		name   string
		body   []byte
		hdr    []string
		status int
		code   string
	}{
		{"good", call, modernHeaders("tools/call", "echo"), 200, ""},
		{"name mismatch", call, modernHeaders("tools/call", "other"), 400, "-32020"},
		{"no method header", call, []string{mcp.HeaderVersion, mcp.ModernVersion}, 400, "-32020"},
		{"unknown version", call, []string{mcp.HeaderVersion, "2099-01-01", mcp.HeaderMethod, "tools/call", mcp.HeaderName, "echo"}, 400, "-32022"},
		{"unknown method", mcptest.Request(6, "nope/nope", map[string]any{"_meta": modernMeta}), modernHeaders("nope/nope", ""), 404, "-32601"},
		{"param header", region, append(modernHeaders("tools/call", "region"), "Mcp-Param-Region", "=?base64?ZXU=?="), 200, ""},
		{"param header missing", region, modernHeaders("tools/call", "region"), 400, "-32020"},
		{"param header mismatch", region, append(modernHeaders("tools/call", "region"), "Mcp-Param-Region", "us"), 400, "-32020"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := c.Post(ctx, tt.body, tt.hdr...)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tt.status {
				t.Fatalf("status %d; want %d (%s)", r.Status, tt.status, r.Body)
			}
			if tt.code != "" && !strings.Contains(string(r.Final()["error"]), tt.code) {
				t.Errorf("error %s; want code %s", r.Final()["error"], tt.code)
			}
		})
	}
	// GET and DELETE without a session have no stateless meaning.
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		req, _ := http.NewRequest(m, c.URL, nil)
		req.Header.Set(mcp.HeaderPrincipal, "alice")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s without a session: %d; want 405", m, resp.StatusCode)
		}
	}
}

// TestProgressTokens: two concurrent calls with the same progress token
// each get only their own progress, under the token they sent.
func TestProgressTokens(t *testing.T) {
	_, srv := newBridge(t, Config{})
	ctx := context.Background()
	c := client(srv, "alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := mcptest.Request(i, "tools/call", map[string]any{"name": "progress", "arguments": map[string]any{}, "_meta": map[string]any{"progressToken": "same"}})
			r, err := c.Post(ctx, body, "Accept", "text/event-stream, application/json")
			if err != nil {
				t.Error(err)
				return
			}
			n := 0
			for _, m := range r.Msgs() {
				if string(m["method"]) == `"notifications/progress"` {
					n++
					if !strings.Contains(string(m["params"]), `"progressToken":"same"`) {
						t.Errorf("progress %s does not carry the client's token", m["params"])
					}
				}
			}
			if n != 3 || r.Text() != "progressed" {
				t.Errorf("call %d: %d progress notifications, %q; want 3, progressed", i, n, r.Text())
			}
		}()
	}
	wg.Wait()
}

// TestNoPrincipal: a request the supervisor did not name is refused.
func TestNoPrincipal(t *testing.T) {
	_, srv := newBridge(t, Config{NoSpare: true})
	c := client(srv, "")
	r, err := c.Post(context.Background(), mcptest.Request(1, "initialize", map[string]any{}))
	if err != nil || r.Status != http.StatusBadRequest {
		t.Fatalf("no principal: %v %+v; want 400", err, r)
	}
}

// TestRequestTimeout: a call with no answer in time gets -32001, and the
// vat is told it is cancelled. The timeout also bounds the process's
// initialize, so it leaves a loaded machine room for that.
func TestRequestTimeout(t *testing.T) {
	_, srv := newBridge(t, Config{RequestTimeout: 5 * time.Second})
	ctx := context.Background()
	c := client(srv, "alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.Post(ctx, mcptest.Tool(7, "slow", map[string]any{"ms": 30000}))
	if err != nil || !strings.Contains(string(r.Final()["error"]), "-32001") || string(r.Final()["id"]) != "7" {
		t.Fatalf("a slow call: %v %+v; want -32001 for id 7", err, r.Final())
	}
	if r, _ := c.Post(ctx, mcptest.Tool(8, "cancelled", nil)); r.Text() == "" {
		t.Error("the vat was not told the call was cancelled")
	}
}

// TestCrashLoop: a command that keeps exiting is not started again and
// again: after CrashLoop exits the bridge says it is crashing, and a new
// session gets 503 naming it.
func TestCrashLoop(t *testing.T) {
	b, err := New(Config{Spawner: ExecSpawner{Argv: []string{"/bin/sh", "-c", "echo gone >&2; exit 4"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	srv := httptest.NewServer(b)
	defer srv.Close()
	st := waitCrashing(t, b)
	if !strings.Contains(st.Crashing, "exit status 4") || !strings.Contains(st.Crashing, "gone") || st.Spawned != CrashLoop {
		t.Errorf("stats %+v; want %d processes and the reason", st, CrashLoop)
	}
	time.Sleep(200 * time.Millisecond)
	if again := b.Stats(); again.Spawned != st.Spawned {
		t.Errorf("%d processes after the crash loop was seen; want none", again.Spawned-st.Spawned)
	}
	r, err := client(srv, "a").Post(context.Background(), mcptest.Request(0, "initialize", map[string]any{"protocolVersion": "2025-11-25"}))
	if err != nil || r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "crashing") {
		t.Errorf("initialize while crashing: %v %+v; want 503 naming it", err, r)
	}
}

// TestCrashLoopOfInstantExits: a process that is gone by the time its
// start returns is still entered and then forgotten: the bridge never
// keeps a dead spare, which left it starting nothing more and never
// seeing the crash loop (seen in CI: TestCrashLoop's shell had exited
// before the bridge entered it as its spare). Each process here has
// exited before Spawn returns, and each start pauses before the process
// is entered, as a start held up by the bridge's lock or the scheduler
// does.
func TestCrashLoopOfInstantExits(t *testing.T) {
	pause := func() { time.Sleep(20 * time.Millisecond) }
	beforeAdmit.Store(&pause)
	t.Cleanup(func() { beforeAdmit.Store(nil) })
	b, err := New(Config{Spawner: exitedSpawner{}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if st := waitCrashing(t, b); st.Spare || st.Processes != 0 || st.Spawned != CrashLoop {
		t.Errorf("stats %+v; want no process left, none spare, %d started", st, CrashLoop)
	}
}

// waitCrashing waits up to 10 s for b to say it is crashing, and returns
// its stats then.
func waitCrashing(t *testing.T, b *Bridge) Stats {
	t.Helper()
	var st Stats
	err := mcptest.Eventually(10*time.Second, func() error {
		if st = b.Stats(); st.Crashing == "" {
			return fmt.Errorf("stats %+v; want crashing", st)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSpareEndingAsHandedOut: a spare whose process ends as a session
// takes it is not handed out (nobody would tell the session it ended);
// the session gets a new process and works.
func TestSpareEndingAsHandedOut(t *testing.T) {
	b, srv := newBridge(t, Config{})
	if err := mcptest.Eventually(5*time.Second, func() error {
		if !b.Stats().Spare {
			return errors.New("no spare yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	sp := b.spare
	b.mu.Unlock()
	reached, release := make(chan struct{}), make(chan struct{})
	hold := func(p *proc) {
		if p == sp {
			close(reached)
			<-release
		}
	}
	beforeForget.Store(&hold)
	t.Cleanup(func() { beforeForget.Store(nil) })
	defer close(release)
	if err := sp.child.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-time.After(5 * time.Second):
		t.Fatal("the spare's end was never seen")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := client(srv, "alice")
	if err := c.Initialize(ctx, "2025-06-18", nil); err != nil {
		t.Fatalf("initialize as the spare ended: %v", err)
	}
	r, err := c.Post(ctx, mcptest.Tool(2, "echo", map[string]any{"text": "alive"}))
	if err != nil || r.Text() != "alive" {
		t.Fatalf("a call on the new session: %v %+v", err, r)
	}
}

// exitedSpawner's processes have exited by the time Spawn returns: each
// is a real /bin/true, waited for before Spawn returns.
type exitedSpawner struct{}

func (exitedSpawner) Spawn(stdin, stdout, stderr *os.File, env []string) (Child, error) {
	c, err := ExecSpawner{Argv: []string{"/bin/true"}}.Spawn(stdin, stdout, stderr, env)
	if err != nil {
		return nil, err
	}
	<-c.Done()
	return c, nil
}

// TestBatch: a 2025-03-26 session may send a batch, answered as one
// array with each request's own answer; a later revision's may not.
func TestBatch(t *testing.T) {
	_, srv := newBridge(t, Config{})
	ctx := context.Background()
	batch := []byte("[" + string(mcptest.Tool(1, "echo", map[string]any{"text": "a", "sleepMs": 20})) + "," +
		string(mcptest.Tool(1, "echo", map[string]any{"text": "b"})) + `,{"jsonrpc":"2.0","method":"notifications/x"}]`)
	old := client(srv, "alice")
	if err := old.Initialize(ctx, "2025-03-26", nil); err != nil {
		t.Fatal(err)
	}
	r, err := old.Post(ctx, batch)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("a batch: %v %+v", err, r)
	}
	var answers []map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &answers); err != nil || len(answers) != 2 {
		t.Fatalf("the batch's answers %s: %v", r.Body, err)
	}
	for i, want := range []string{"a", "b"} {
		one := &mcptest.Resp{Body: mustJSON(answers[i])}
		if one.Text() != want {
			t.Errorf("answer %d = %q; want %q", i, one.Text(), want)
		}
	}
	newer := client(srv, "alice")
	if err := newer.Initialize(ctx, "2025-06-18", nil); err != nil {
		t.Fatal(err)
	}
	if r, err := newer.Post(ctx, batch); err != nil || r.Status != http.StatusBadRequest {
		t.Errorf("a batch on a 2025-06-18 session: %v %+v; want 400", err, r)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestLegacyClientModernVat: a 2025 client of a vat that speaks only
// 2026-07-28 gets a session: toybox answers its initialize from the vat's
// server/discover and adds the per-request _meta to what it forwards.
func TestLegacyClientModernVat(t *testing.T) {
	_, srv := newBridge(t, Config{Era: mcp.Modern})
	ctx := context.Background()
	c := client(srv, "alice")
	if err := c.Initialize(ctx, "2025-06-18", map[string]any{"roots": map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	if c.Version != "2025-06-18" {
		t.Errorf("negotiated %q; want the client's 2025-06-18", c.Version)
	}
	if r, err := c.Post(ctx, mcptest.Tool(2, "echo", map[string]any{"text": "through"})); err != nil || r.Text() != "through" {
		t.Fatalf("a bridged call: %v %+v", err, r)
	}
	if r, err := c.Post(ctx, mcptest.Tool(3, "echo", nil)); err != nil || r.Final()["error"] != nil {
		t.Fatalf("a bridged call with no arguments: %v %s", err, r.Final()["error"])
	}
	if r, err := c.Post(ctx, mcptest.Request(4, "ping", nil)); err != nil || r.Final()["result"] == nil {
		t.Errorf("ping: %v %+v; want toybox's own answer", err, r)
	}
}

// TestSharedLogLevels: on a shared process each session's log level is
// its own; the vat is asked for the most verbose one.
func TestSharedLogLevels(t *testing.T) {
	_, srv := newBridge(t, Config{Mode: ModeShared})
	ctx := context.Background()
	quiet, loud := client(srv, "alice"), client(srv, "alice")
	for c, level := range map[*mcptest.Client]string{quiet: "error", loud: "debug"} {
		if err := c.Initialize(ctx, "", nil); err != nil {
			t.Fatal(err)
		}
		if r, err := c.Post(ctx, mcptest.Request(1, "logging/setLevel", map[string]any{"level": level})); err != nil || r.Final()["result"] == nil {
			t.Fatalf("setLevel %s: %v %+v", level, err, r)
		}
	}
	if r, _ := quiet.Post(ctx, mcptest.Tool(2, "level", nil)); r.Text() != "debug" {
		t.Errorf("the vat's level = %q; want debug, the most verbose asked", r.Text())
	}
	streams := map[*mcptest.Client]*http.Response{}
	for _, c := range []*mcptest.Client{quiet, loud} {
		g, err := c.Get(ctx, "")
		if err != nil || g.StatusCode != http.StatusOK {
			t.Fatalf("GET: %v %+v", err, g)
		}
		defer g.Body.Close()
		streams[c] = g
	}
	if r, _ := quiet.Post(ctx, mcptest.Tool(3, "log", nil)); r.Text() != "logged" {
		t.Fatalf("log = %q", r.Text())
	}
	got := func(c *mcptest.Client) bool {
		ch := make(chan bool, 1)
		go func() {
			br := bufio.NewReader(streams[c].Body)
			for {
				e, err := mcptest.ReadEvent(br)
				if err != nil {
					ch <- false
					return
				}
				if e.Data != "" { // not the priming event
					ch <- strings.Contains(e.Data, "an info line")
					return
				}
			}
		}()
		select {
		case ok := <-ch:
			return ok
		case <-time.After(time.Second):
			return false
		}
	}
	if !got(loud) {
		t.Error("the debug session did not get the info line")
	}
	if got(quiet) {
		t.Error("the error session got the info line")
	}
}

// stuckLog is a vat log that takes nothing until the test ends.
type stuckLog struct{ done chan struct{} }

func (l stuckLog) Write(b []byte) (int, error) {
	<-l.done
	return len(b), nil
}

// TestStderrFloodDoesNotStall: a process that floods stderr while the
// vat's log takes nothing still answers; the lines that could not wait
// are counted.
func TestStderrFloodDoesNotStall(t *testing.T) {
	log := stuckLog{done: make(chan struct{})}
	b, srv := newBridge(t, Config{VatLog: log})
	t.Cleanup(func() { close(log.done) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := client(srv, "alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.Post(ctx, mcptest.Tool(2, "flood", nil))
	if err != nil || r.Text() != "flooded" {
		t.Fatalf("flood: %v %+v", err, r)
	}
	if st := b.Stats(); st.StderrLost == 0 {
		t.Errorf("stats %+v; want lost stderr lines counted", st)
	}
}

// fakeEnviron is the fake's "env" tool: its process's environment,
// sorted, one variable a line.
func fakeEnviron() string {
	env := os.Environ()
	slices.Sort(env)
	return strings.Join(env, "\n")
}

// envOf calls the fake's env tool on c: its process's environment.
// modern makes it a stateless (2026-07-28) request.
func envOf(t *testing.T, c *mcptest.Client, modern bool) []string {
	t.Helper()
	body, hdr := mcptest.Tool(7, "env", nil), []string(nil)
	if modern {
		body = mcptest.Request(7, "tools/call", map[string]any{"name": "env", "arguments": map[string]any{}, "_meta": modernMeta})
		hdr = modernHeaders("tools/call", "env")
	}
	r, err := c.Post(context.Background(), body, hdr...)
	if err != nil || r.Text() == "" {
		t.Fatalf("env: %v %+v", err, r)
	}
	return strings.Split(r.Text(), "\n")
}

// without returns env without the variables named in names.
func without(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, k)
	})
}

// TestPrincipalSecrets (R22): a principal's secrets are set in its own
// processes alone, over the vat's value of the same name; the processes
// of two principals differ only in them. The spare, started before anyone
// asked, never serves a principal with secrets.
func TestPrincipalSecrets(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]map[string]string{
		"alice": {"API_KEY": "alice-secret", "ALICE_ONLY": "a"},
		"bob":   {"API_KEY": "bob-secret"},
		"carol": nil,
	}
	for _, mode := range []Mode{ModeSession, ModeShared, ModeSingle} {
		t.Run(string(mode), func(t *testing.T) {
			b, err := New(Config{Mode: mode, Spawner: ExecSpawner{Argv: []string{self}, Env: []string{fakeEnv + "=1", "API_KEY=vat-default"}}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(b)
			t.Cleanup(func() { srv.Close(); b.Close() })
			ctx := context.Background()
			got := map[string][]string{}
			for _, who := range []string{"alice", "bob", "carol"} {
				c := client(srv, who)
				c.PrincipalEnv = mcp.EncodeEnv(secrets[who])
				if err := c.Initialize(ctx, "", nil); err != nil {
					t.Fatal(err)
				}
				got[who] = envOf(t, c, false)
				// A stateless request of the same principal: its
				// stateless process.
				sl := client(srv, who)
				sl.PrincipalEnv = c.PrincipalEnv
				if modern := envOf(t, sl, true); mode != ModeSingle && !slices.Equal(modern, got[who]) {
					t.Errorf("%s's stateless process has %q; its session's %q", who, modern, got[who])
				}
			}
			for who, env := range got {
				for other, s := range secrets {
					for k, v := range s {
						has := slices.Contains(env, k+"="+v)
						if want := other == who && mode != ModeSingle; has != want {
							t.Errorf("%s's process has %s=%s (%s's): %v; want %v", who, k, v, other, has, want)
						}
					}
				}
			}
			if mode == ModeSingle {
				// One process for everyone holds no one's secrets.
				if !slices.Contains(got["alice"], "API_KEY=vat-default") {
					t.Errorf("single mode: alice's process lacks the vat's API_KEY: %q", got["alice"])
				}
				return
			}
			if !slices.Contains(got["carol"], "API_KEY=vat-default") || slices.Contains(got["alice"], "API_KEY=vat-default") {
				t.Errorf("API_KEY: carol's %q, alice's %q; want the vat's for carol, replaced for alice", got["carol"], got["alice"])
			}
			base := without(got["carol"], "API_KEY")
			for _, who := range []string{"alice", "bob"} {
				if rest := without(got[who], "API_KEY", "ALICE_ONLY"); !slices.Equal(rest, base) {
					t.Errorf("%s's environment differs from carol's beyond its secrets:\n%q\n%q", who, rest, base)
				}
			}
		})
	}
}

// TestPrincipalSecretsRefused: a Toybox-Principal-Env that is not a
// principal's environment is refused whole, before any process starts.
func TestPrincipalSecretsRefused(t *testing.T) {
	_, srv := newBridge(t, Config{Mode: ModeSession, NoSpare: true})
	for _, bad := range []string{"%%%", mcp.EncodeEnv(map[string]string{"LD_PRELOAD=x": "y"}), mcp.EncodeEnv(map[string]string{"K": "a\x00b"})} {
		c := client(srv, "alice")
		c.PrincipalEnv = bad
		if err := c.Initialize(context.Background(), "", nil); err == nil {
			t.Errorf("initialize with Toybox-Principal-Env %q: no error; want 400", bad)
		}
	}
}

// iconEnv makes the fake server's serverInfo carry bigIcon.
const iconEnv = "BRIDGE_TEST_ICON"

// bigIcon is an icon as a data: URI, as a server may give one in its
// serverInfo (2025-11-25): 96 KiB.
var bigIcon = "data:image/png;base64," + strings.Repeat("iVBORw0KGgo", 96<<10/11)

// TestStatsBounded: the counters stay small whatever serverInfo the vat
// gives. The supervisor reads at most maxStatsJSON of them; one past it
// is not JSON there, and the vat's status lost every counter (and the
// probe the server's own era), so a server hid its dropped lines and its
// crash loop with a large icon.
func TestStatsBounded(t *testing.T) {
	const maxStatsJSON = 64 << 10 // what the supervisor reads (bridgeStats)
	_, srv := newBridge(t, Config{NoSpare: true}, iconEnv+"=1")
	c := client(srv, "alice")
	if err := c.Initialize(context.Background(), "", nil); err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Get(srv.URL + StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var st Stats
	if len(b) > maxStatsJSON || json.Unmarshal(b, &st) != nil {
		t.Fatalf("the counters are %d bytes; want valid JSON of at most %d", len(b), maxStatsJSON)
	}
	var info struct{ Name, Version string }
	if json.Unmarshal(st.ServerInfo, &info) != nil || info.Name != "fake-mcp" || info.Version != "1" {
		t.Errorf("serverInfo = %s; want its name and version kept", st.ServerInfo)
	}
}

// TestRefusedInitializeNoSession: a vat refuses initialize (a JSON-RPC
// error, HTTP 200). No session was made: a JSON answer names none, and
// the id an event stream gave before its answer came is unknown (404).
func TestRefusedInitializeNoSession(t *testing.T) {
	for _, accept := range []string{"application/json", "text/event-stream"} {
		t.Run(accept, func(t *testing.T) {
			// A legacy bridge whose vat speaks 2026-07-28 only:
			// initialize is an unknown method to it.
			b, srv := newBridge(t, Config{NoSpare: true}, "BRIDGE_TEST_MODERN=1")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c := client(srv, "alice")
			r, err := c.Post(ctx, mcptest.Request(1, "initialize", map[string]any{
				"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
				"clientInfo": map[string]any{"name": "mcptest", "version": "1"},
			}), "Accept", accept+", application/json")
			if err != nil {
				t.Fatal(err)
			}
			if f := r.Final(); f == nil || f["error"] == nil {
				t.Fatalf("the initialize = %d %q %+v; want the vat's error", r.Status, r.Body, r.Events)
			}
			sid := r.Header.Get(mcp.HeaderSession)
			if accept == "application/json" && sid != "" {
				t.Errorf("a refused initialize's JSON answer names session %q; want none", sid)
			}
			if err := mcptest.Eventually(5*time.Second, func() error {
				b.mu.Lock()
				defer b.mu.Unlock()
				if n := len(b.sessions); n != 0 {
					return fmt.Errorf("%d sessions after a refused initialize; want none", n)
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
			if sid != "" {
				c.Session = sid
				if r, err := c.Post(ctx, mcptest.Tool(2, "echo", map[string]any{"text": "x"})); err != nil || r.Status != http.StatusNotFound {
					t.Errorf("a call in the refused initialize's session: %v %d; want 404", err, r.Status)
				}
			}
		})
	}
}
