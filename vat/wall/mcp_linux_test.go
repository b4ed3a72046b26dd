package wall

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
	"toybox/vat/mcp"
	"toybox/vat/mcp/mcptest"
)

// mcpWall is a stdio MCP vat running in a real wall, and a client of its
// bridge that speaks as the supervisor does.
type mcpWall struct {
	p    *Process
	out  string // the wall's log
	sock string // the bridge's socket (on the host, outside the wall)
	hc   *http.Client
}

func (m *mcpWall) client(principal string) *mcptest.Client {
	return &mcptest.Client{HTTP: m.hc, URL: "http://bridge/mcp", Principal: principal}
}

func (m *mcpWall) stats(t *testing.T) map[string]any {
	t.Helper()
	st, err := mcptest.Stats(context.Background(), m.hc, "http://bridge")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (m *mcpWall) log() string {
	b, _ := os.ReadFile(m.out)
	return string(b)
}

// startMCP starts the fixture's install/app (the fake server, unless app
// names another binary to run instead) as a stdio MCP vat, its bridge on
// a socket made here, outside the wall, as the supervisor makes it.
func (f *fixture) startMCP(t *testing.T, app string, spec MCP) *mcpWall {
	t.Helper()
	return f.startMCPSock(t, app, spec, filepath.Join(t.TempDir(), "bridge.sock"))
}

// startMCPAt starts the fake server with the bridge's socket also at
// path (a hard link: a socket's path is its inode), open to every uid
// (the attack test's control case).
func (f *fixture) startMCPAt(t *testing.T, path string) *mcpWall {
	t.Helper()
	dir, err := os.MkdirTemp("", "sk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	w := f.startMCPSock(t, "", MCP{}, filepath.Join(dir, "b.sock"))
	if err := os.Link(w.sock, path); err != nil {
		t.Fatal(err)
	}
	return w
}

func (f *fixture) startMCPSock(t *testing.T, app string, spec MCP, sock string) *mcpWall {
	t.Helper()
	if app != "" {
		if err := copyFile(app, filepath.Join(f.install, "server"), 0o755); err != nil {
			t.Fatal(err)
		}
		f.spec.Command = []string{"./server"}
	} else {
		if f.spec.Env == nil {
			f.spec.Env = map[string]string{}
		}
		f.spec.Env[victimEnv] = "mcp-fake"
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	lf, err := l.File()
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	t.Cleanup(func() { _ = lf.Close() })
	spec.Listener = lf
	f.spec.MCP = &spec
	f.caps(t)
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = out.Close() })
	f.spec.Stdout, f.spec.Stderr = out, out
	p, err := Start(context.Background(), f.spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &mcpWall{p: p, out: out.Name(), sock: sock, hc: mcptest.UnixHTTP(sock)}
	t.Cleanup(func() {
		_ = p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("the wall's log:\n%s", m.log())
		}
	})
	return m
}

// callAnswering makes a call whose tool asks the client (method) first,
// answers that request with answer, and returns the call's final result.
// The id the vat's request came with must be one toybox gave it.
func callAnswering(t *testing.T, ctx context.Context, c *mcptest.Client, body []byte, method, answer string) string {
	t.Helper()
	resp, err := c.Open(ctx, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		r, _ := mcptest.Read(resp)
		t.Fatalf("answered at once: %d %s", r.Status, r.Body)
	}
	br := bufio.NewReader(resp.Body)
	for {
		e, err := mcptest.ReadEvent(br)
		if err != nil {
			t.Fatalf("reading the call's stream: %v", err)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(e.Data), &m) != nil {
			continue
		}
		if string(m["method"]) == `"`+method+`"` {
			if !strings.HasPrefix(string(m["id"]), `"tb-`) {
				t.Errorf("the vat's request came with id %s, not one toybox gave it", m["id"])
			}
			a, err := c.Post(ctx, []byte(`{"jsonrpc":"2.0","id":`+string(m["id"])+`,"result":`+answer+`}`))
			if err != nil || a.Status != http.StatusAccepted {
				t.Fatalf("answering %s: %v %+v", method, err, a)
			}
			continue
		}
		if m["result"] != nil {
			return e.Data
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestMCPEverythingInWall runs the Go SDK's conformance server (v1.7.0,
// both eras) as a stdio vat in a real wall: a legacy session, a stateless
// request on the same endpoint, and sampling and elicitation round trips
// through the bridge.
func TestMCPEverythingInWall(t *testing.T) {
	f := newFixture(t, "mcp-everything")
	w := f.startMCP(t, testenv.EverythingServer(t, testenv.EverythingDual), MCP{})
	ctx := ctxT(t)
	c := w.client("alice")
	if err := c.Initialize(ctx, "2025-11-25", map[string]any{"sampling": map[string]any{}, "elicitation": map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Post(ctx, mcptest.Tool(2, "test_simple_text", nil))
	if err != nil || r.Text() != "This is a simple text response for testing." {
		t.Fatalf("test_simple_text = %q, %v", r.Text(), err)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("a call answered at once came as %q; want application/json (lazy JSON)", ct)
	}

	// Sampling: the vat's request comes on the call's stream; the
	// client's answer goes back by POST.
	for _, tc := range []struct {
		tool                 string
		args                 map[string]any
		method, answer, want string
	}{
		{"test_sampling", map[string]any{"prompt": "hi"}, "sampling/createMessage", `{"role":"assistant","content":{"type":"text","text":"hello from the model"},"model":"m","stopReason":"endTurn"}`, "hello from the model"},
		{"test_elicitation", map[string]any{"message": "who?"}, "elicitation/create", `{"action":"accept","content":{"username":"ann","email":"a@example.com"}}`, "accept"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			final := callAnswering(t, ctx, c, mcptest.Tool(3, tc.tool, tc.args), tc.method, tc.answer)
			if !strings.Contains(final, tc.want) {
				t.Errorf("%s answered %s; want it to hold %q", tc.tool, final, tc.want)
			}
		})
	}

	// The same endpoint serves a stateless (2026-07-28) request.
	meta := map[string]any{"_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}}
	modern := &mcptest.Client{HTTP: w.hc, URL: c.URL, Principal: "alice"}
	r, err = modern.Post(ctx, mcptest.Request(7, "server/discover", meta),
		"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "server/discover")
	if err != nil || r.Status != http.StatusOK || !strings.Contains(string(r.Final()["result"]), "supportedVersions") {
		t.Fatalf("server/discover: %v %+v", err, r)
	}
	st := w.stats(t)
	if st["era"] != "dual" || st["serverInfo"] == nil {
		t.Errorf("stats = %v; want era dual and the serverInfo", st)
	}
}

// TestMCPDuplicateIDs: 50 concurrent calls, all with id 1, on one session
// (claude.ai's pattern) each get their own answer.
func TestMCPDuplicateIDs(t *testing.T) {
	f := newFixture(t, "mcp-dupids")
	w := f.startMCP(t, "", MCP{})
	ctx := ctxT(t)
	c := w.client("alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprintf("call-%d", i)
			r, err := c.Post(ctx, mcptest.Tool(1, "echo", map[string]any{"text": want, "sleepMs": rand.IntN(30)}))
			if err != nil {
				errs <- err
				return
			}
			if got := r.Text(); got != want || string(r.Final()["id"]) != "1" {
				errs <- fmt.Errorf("call %d: got %q with id %s", i, got, r.Final()["id"])
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestMCPStdoutNoise: lines that are not JSON-RPC are dropped whole,
// counted and logged; the stream goes on, and the answer's bytes (a ZWJ
// emoji, U+2028, HTML) pass unchanged.
func TestMCPStdoutNoise(t *testing.T) {
	f := newFixture(t, "mcp-noise")
	w := f.startMCP(t, "", MCP{})
	ctx := ctxT(t)
	c := w.client("alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.Post(ctx, mcptest.Tool(2, "noise", nil))
	if err != nil || r.Text() != mcptest.Emoji {
		t.Fatalf("noise = %q, %v; want %q", r.Text(), err, mcptest.Emoji)
	}
	if !strings.Contains(string(r.Body), `\u003c`) && !strings.Contains(string(r.Body), "<b>") {
		t.Errorf("the answer's body %s lost its HTML", r.Body)
	}
	if r2, err := c.Post(ctx, mcptest.Tool(3, "echo", map[string]any{"text": "still here"})); err != nil || r2.Text() != "still here" {
		t.Fatalf("after the noise: %q, %v", r2.Text(), err)
	}
	// One banner per process started (the session's, the spare's), and
	// three lines of the tool's noise (the fourth is JSON-RPC).
	err = mcptest.Eventually(5*time.Second, func() error {
		st := w.stats(t)
		want := st["spawned"].(float64) + 3
		if st["droppedStdoutLines"].(float64) != want {
			return fmt.Errorf("stats %v: want %v dropped lines", st, want)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	// The bridge writes its records a few at a time (at most 20 ms late).
	err = mcptest.Eventually(5*time.Second, func() error {
		if log := w.log(); !strings.Contains(log, "dotenv@17.2.0") || !strings.Contains(log, `"result":"dropped"`) {
			return fmt.Errorf("the vat's log does not name the dropped lines:\n%s", log)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestMCPBigMessages: a 10 MiB answer passes whole; a 40 MiB one (past the
// 32 MiB limit) answers its call with an error and the process is kept.
func TestMCPBigMessages(t *testing.T) {
	f := newFixture(t, "mcp-big")
	w := f.startMCP(t, "", MCP{})
	ctx := ctxT(t)
	c := w.client("alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.Post(ctx, mcptest.Tool(2, "big", map[string]any{"mib": 10}))
	if err != nil || len(r.Text()) != 10<<20 {
		t.Fatalf("a 10 MiB answer: %d bytes, %v", len(r.Text()), err)
	}
	r, err = c.Post(ctx, mcptest.Tool(3, "big", map[string]any{"mib": 40}))
	if err != nil || !strings.Contains(r.Text(), "exceeds") || string(r.Final()["id"]) != "3" {
		t.Fatalf("a 40 MiB answer: %.200q, %v; want an error naming the limit", r.Text(), err)
	}
	if r, err := c.Post(ctx, mcptest.Tool(4, "echo", map[string]any{"text": "kept"})); err != nil || r.Text() != "kept" {
		t.Fatalf("after the 40 MiB answer: %q, %v", r.Text(), err)
	}
	if st := w.stats(t); st["tooLongMessages"].(float64) != 1 {
		t.Errorf("stats %v; want one message too long", st)
	}
}

// TestMCPCrashMidCall: a process that dies answers every call in flight
// with an error naming its exit and its last stderr line; the session
// ends (404), and a new one works.
func TestMCPCrashMidCall(t *testing.T) {
	f := newFixture(t, "mcp-crash")
	w := f.startMCP(t, "", MCP{})
	ctx := ctxT(t)
	c := w.client("alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	slow := make(chan *mcptest.Resp, 1)
	go func() {
		r, _ := c.Post(ctx, mcptest.Tool(2, "slow", map[string]any{"ms": 20000}))
		slow <- r
	}()
	time.Sleep(200 * time.Millisecond)
	r, err := c.Post(ctx, mcptest.Tool(3, "crash", nil))
	if err != nil || !strings.Contains(r.Text(), "exit status 3") || !strings.Contains(r.Text(), "fatal: boom") {
		t.Fatalf("the crashing call: %q, %v", r.Text(), err)
	}
	select {
	case r := <-slow:
		if r == nil || !strings.Contains(r.Text(), "exit status 3") {
			t.Fatalf("the call in flight: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight got no answer")
	}
	err = mcptest.Eventually(5*time.Second, func() error {
		r, err := c.Post(ctx, mcptest.Tool(4, "echo", map[string]any{"text": "x"}))
		if err != nil {
			return fmt.Errorf("after the crash: %w; want 404", err)
		}
		if r.Status != http.StatusNotFound {
			return fmt.Errorf("after the crash: %+v; want 404", r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatalf("a new session after the crash: %v", err)
	}
	if r, err := c.Post(ctx, mcptest.Tool(5, "echo", map[string]any{"text": "again"})); err != nil || r.Text() != "again" {
		t.Fatalf("the new session: %q, %v", r.Text(), err)
	}
	if st := w.stats(t); !strings.Contains(fmt.Sprint(st["lastError"]), "exit status 3") {
		t.Errorf("stats %v; want the crash as the last error", st)
	}
}

// TestMCPGetReplaced: a second GET on a session takes the stream over
// from a first one that went silent (a dropped connection nobody closed):
// 200, never 409, and what comes next reaches the second.
func TestMCPGetReplaced(t *testing.T) {
	f := newFixture(t, "mcp-get")
	w := f.startMCP(t, "", MCP{})
	ctx := ctxT(t)
	c := w.client("alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	// The first GET: opened, then never read again, never closed.
	first, err := c.Get(ctx, "")
	if err != nil || first.StatusCode != http.StatusOK {
		t.Fatalf("the first GET: %v %v", err, first)
	}
	defer first.Body.Close()
	second, err := c.Get(ctx, "")
	if err != nil || second.StatusCode != http.StatusOK {
		t.Fatalf("the second GET: %v %+v", err, second)
	}
	defer second.Body.Close()
	// The noise tool's window/logMessage is a notification for no call:
	// it goes on the GET stream.
	if r, err := c.Post(ctx, mcptest.Tool(2, "noise", nil)); err != nil || r.Text() != mcptest.Emoji {
		t.Fatalf("noise: %q %v", r.Text(), err)
	}
	got := make(chan string, 1)
	go func() {
		br := bufio.NewReader(second.Body)
		for {
			e, err := mcptest.ReadEvent(br)
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			if e.Data != "" {
				got <- e.Data
				return
			}
		}
	}()
	select {
	case d := <-got:
		if !strings.Contains(d, "window/logMessage") {
			t.Errorf("the second GET got %q; want the window/logMessage notification", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second GET got nothing")
	}
	// The first stream was ended, not left to hang.
	if _, err := bufio.NewReader(first.Body).ReadString(0); err == nil {
		t.Error("the replaced GET stream still runs")
	}
}

// TestMCPResume: a client that drops its connection mid-call did not
// cancel it; resuming with Last-Event-ID gets the answer exactly once.
func TestMCPResume(t *testing.T) {
	f := newFixture(t, "mcp-resume")
	w := f.startMCP(t, "", MCP{})
	ctx := ctxT(t)
	c := w.client("alice")
	if err := c.Initialize(ctx, "2025-11-25", nil); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	resp, err := c.Open(cctx, mcptest.Tool(2, "slow", map[string]any{"ms": 1500}), "Accept", "text/event-stream, application/json")
	if err != nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("the call: %v %+v", err, resp)
	}
	prime, err := mcptest.ReadEvent(bufio.NewReader(resp.Body))
	if err != nil || prime.ID == "" || prime.Data != "" {
		t.Fatalf("the priming event: %+v, %v", prime, err)
	}
	cancel() // the client's connection drops
	resp.Body.Close()
	time.Sleep(2 * time.Second)
	g, err := c.Get(ctx, prime.ID)
	if err != nil || g.StatusCode != http.StatusOK {
		t.Fatalf("resuming: %v %+v", err, g)
	}
	r, err := mcptest.Read(g)
	g.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	finals := 0
	for _, m := range r.Msgs() {
		if string(m["id"]) == "2" {
			finals++
		}
	}
	if finals != 1 || r.Text() != "slept" {
		t.Fatalf("resumed stream: %d answers, %q; want one, \"slept\"", finals, r.Text())
	}
	if r, _ := c.Post(ctx, mcptest.Tool(3, "cancelled", nil)); r.Text() != "" {
		t.Errorf("the vat saw cancellations %q; a disconnect is not one", r.Text())
	}
	// An event id of no stream of this session replays nothing.
	if g, err := c.Get(ctx, "NOSUCHSTREAM_1"); err != nil || g.StatusCode != http.StatusNotFound {
		t.Errorf("a foreign Last-Event-ID: %v %+v; want 404", err, g)
	}
}

// TestMCPIdleEviction: a session with no POST for its idle time ends even
// while its GET stream is open; its process goes and the next request
// gets 404.
func TestMCPIdleEviction(t *testing.T) {
	f := newFixture(t, "mcp-idle")
	w := f.startMCP(t, "", MCP{IdleSeconds: 1})
	ctx := ctxT(t)
	c := w.client("alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	g, err := c.Get(ctx, "")
	if err != nil || g.StatusCode != http.StatusOK {
		t.Fatalf("GET: %v %+v", err, g)
	}
	ended := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(g.Body).ReadString(0)
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(15 * time.Second):
		t.Fatal("the idle session's GET stream still runs")
	}
	g.Body.Close()
	if r, err := c.Post(ctx, mcptest.Tool(2, "echo", map[string]any{"text": "x"})); err != nil || r.Status != http.StatusNotFound {
		t.Fatalf("after eviction: %v %+v; want 404", err, r)
	}
	err = mcptest.Eventually(10*time.Second, func() error {
		if st := w.stats(t); st["sessions"].(float64) != 0 || st["processes"].(float64) > 1 {
			return fmt.Errorf("stats %v; want no session and only the spare", st)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestMCPCrossPrincipal: a session id presented by another principal is
// unknown (404); each principal's session has its own process.
func TestMCPCrossPrincipal(t *testing.T) {
	f := newFixture(t, "mcp-principal")
	w := f.startMCP(t, "", MCP{})
	ctx := ctxT(t)
	alice := w.client("alice")
	if err := alice.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := alice.Post(ctx, mcptest.Tool(2, "count", nil)); r.Text() != "1" {
		t.Fatalf("alice's count = %q", r.Text())
	}
	mallory := w.client("mallory")
	mallory.Session, mallory.Version = alice.Session, alice.Version
	if r, err := mallory.Post(ctx, mcptest.Tool(3, "count", nil)); err != nil || r.Status != http.StatusNotFound {
		t.Errorf("mallory's POST on alice's session: %v %+v; want 404", err, r)
	}
	if g, err := mallory.Get(ctx, ""); err != nil || g.StatusCode != http.StatusNotFound {
		t.Errorf("mallory's GET on alice's session: %v %+v; want 404", err, g)
	}
	if code, err := mallory.Delete(ctx); err != nil || code != http.StatusNotFound {
		t.Errorf("mallory's DELETE of alice's session: %v %d; want 404", err, code)
	}
	if r, _ := alice.Post(ctx, mcptest.Tool(4, "count", nil)); r.Text() != "2" {
		t.Errorf("alice's count after mallory = %q; want 2 (her process, untouched)", r.Text())
	}
	if err := mallory.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := mallory.Post(ctx, mcptest.Tool(5, "count", nil)); r.Text() != "1" {
		t.Errorf("mallory's own count = %q; want 1 (a process of her own)", r.Text())
	}
}

// TestMCPServerRequests: sampling, elicitation and roots from the vat
// reach the client on its call's stream, with an id toybox gave them, and
// the client's answers reach the vat.
func TestMCPServerRequests(t *testing.T) {
	f := newFixture(t, "mcp-serverreq")
	w := f.startMCP(t, "", MCP{})
	ctx := ctxT(t)
	c := w.client("alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ tool, method, answer, want string }{
		{"sample", "sampling/createMessage", `{"role":"assistant","content":{"type":"text","text":"yes"},"model":"m"}`, "sampled: yes"},
		{"elicit", "elicitation/create", `{"action":"accept","content":{"n":"ann"}}`, `elicited: {"action":"accept","content":{"n":"ann"}}`},
		{"roots", "roots/list", `{"roots":[]}`, `roots: {"roots":[]}`},
	} {
		r := &mcptest.Resp{Body: []byte(callAnswering(t, ctx, c, mcptest.Tool(9, tc.tool, nil), tc.method, tc.answer))}
		text := r.Text()
		if text != tc.want {
			t.Errorf("%s = %q; want %q", tc.tool, text, tc.want)
		}
	}
	// An answer to nothing the vat asked is refused.
	if a, err := c.Post(ctx, []byte(`{"jsonrpc":"2.0","id":"tb-999","result":{}}`)); err != nil || a.Status != http.StatusBadRequest {
		t.Errorf("an unasked answer: %v %+v; want 400", err, a)
	}
}

// TestMCPStopIsGraceful: stopping the wall ends a process that ignores
// both the end of stdin and SIGTERM (SIGKILL after the graces); a call in
// flight gets an error, and the wall ends.
func TestMCPStopIsGraceful(t *testing.T) {
	f := newFixture(t, "mcp-stop")
	w := f.startMCP(t, "", MCP{})
	ctx := ctxT(t)
	c := w.client("alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Post(ctx, mcptest.Tool(2, "stubborn", nil)); r.Text() != "stubborn" {
		t.Fatalf("stubborn = %q", r.Text())
	}
	inflight := make(chan *mcptest.Resp, 1)
	go func() {
		r, _ := c.Post(ctx, mcptest.Tool(3, "slow", map[string]any{"ms": 60000}))
		inflight <- r
	}()
	time.Sleep(200 * time.Millisecond)
	began := time.Now()
	if err := w.p.Stop(20 * time.Second); err != nil {
		t.Fatalf("Stop: %v; log:\n%s", err, w.log())
	}
	if d := time.Since(began); d > 15*time.Second {
		t.Errorf("the stop took %v", d)
	}
	select {
	case r := <-inflight:
		if r != nil && r.Final() != nil && r.Final()["error"] == nil {
			t.Errorf("the call in flight at the stop: %+v; want an error", r.Final())
		}
	case <-time.After(5 * time.Second):
		t.Error("the call in flight got no answer at the stop")
	}
}

// mcpAttack runs inside a stdio MCP vat's process (the fake's "attack"
// tool): it looks for any way to the bridge's socket, to send a request
// with a principal of its choosing. Each line says HELD (the way is
// closed) or BREACH (a request reached the bridge).
func mcpAttack() string {
	var out []string
	held := func(f string, a ...any) { out = append(out, "HELD "+fmt.Sprintf(f, a...)) }
	breach := func(f string, a ...any) { out = append(out, "BREACH "+fmt.Sprintf(f, a...)) }
	// forge sends a request as "alice" on conn and reports whether the
	// bridge answered it.
	forge := func(what string, conn net.Conn) {
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = conn.Write([]byte("GET /toybox/mcp-stats HTTP/1.1\r\nHost: x\r\nToybox-Principal: alice\r\n\r\n"))
		b := make([]byte, 4096)
		n, _ := conn.Read(b)
		if strings.Contains(string(b[:n]), "sessions") {
			breach("%s: the bridge answered a forged principal", what)
		} else {
			held("%s: connected, but no bridge (%q)", what, b[:min(n, 40)])
		}
	}
	// 1. A descriptor inherited by accident.
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if e.Name() != "0" && e.Name() != "1" && e.Name() != "2" {
			if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && !strings.HasPrefix(target, "/proc/") {
				if f := os.NewFile(uintptr(atoi(e.Name())), "inherited"); f != nil {
					if c, err := net.FileConn(f); err == nil {
						forge("inherited fd "+e.Name(), c)
						continue
					}
					if l, err := net.FileListener(f); err == nil {
						breach("inherited the listening socket as fd %s", e.Name())
						_ = l.Close()
						continue
					}
				}
				out = append(out, "NOTE inherited fd "+e.Name()+" -> "+target)
			}
		}
	}
	// 2. Every socket path the wall shows: the netns's list, and the
	// folders the vat can see.
	paths := map[string]bool{}
	if b, err := os.ReadFile("/proc/net/unix"); err == nil {
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) >= 8 {
				paths[f[7]] = true
			}
		}
	}
	for _, root := range []string{"/run", "/tmp", os.Getenv("HOME"), "/var", "/dev/shm"} {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type()&os.ModeSocket != 0 {
				paths[p] = true
			}
			return nil
		})
	}
	if len(paths) == 0 {
		held("no unix socket path in sight")
	}
	for p := range paths {
		addr := p
		if strings.HasPrefix(p, "@") {
			addr = "\x00" + p[1:]
		}
		c, err := net.Dial("unix", addr)
		if err != nil {
			held("connect %s: %v", p, err)
			continue
		}
		forge("connect "+p, c)
	}
	// 3. The entry's descriptors, and the spawner's: through /proc and
	// pidfd_getfd (both need the process to be dumpable).
	for _, pid := range append([]int{1}, pidsNamed("toybox-spawner")...) {
		if _, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err != nil {
			held("listing /proc/%d/fd: %v", pid, err)
		} else {
			breach("listed /proc/%d/fd", pid)
		}
		pfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			held("pidfd_open %d: %v", pid, err)
			continue
		}
		got := false
		for fd := 3; fd < 64; fd++ {
			nfd, err := unix.PidfdGetfd(pfd, fd, 0)
			if err != nil {
				continue
			}
			got = true
			f := os.NewFile(uintptr(nfd), "stolen")
			if l, err := net.FileListener(f); err == nil {
				breach("took the listening socket from pid %d (fd %d)", pid, fd)
				_ = l.Close()
			}
			_ = f.Close()
		}
		if !got {
			held("pidfd_getfd of pid %d: every descriptor refused", pid)
		}
		_ = unix.Close(pfd)
		if err := unix.PtraceAttach(pid); err != nil {
			held("ptrace pid %d: %v", pid, err)
		} else {
			breach("ptrace-attached pid %d", pid)
			_ = unix.PtraceDetach(pid)
		}
	}
	return strings.Join(out, "\n")
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// pidsNamed lists the processes whose comm is name.
func pidsNamed(name string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err == nil && strings.TrimSpace(string(b)) == name {
			pids = append(pids, atoi(e.Name()))
		}
	}
	return pids
}

// TestAttackForgePrincipal: a stdio MCP server runs in the same wall, as
// the same uid, as the bridge; it must find no way to the bridge's
// socket, where it could name any principal and reach another's
// sessions. The control case puts the socket where the wall shows it (in
// the run folder), and there the same attack gets through: the attack is
// real, and it is the socket's place that stops it.
func TestAttackForgePrincipal(t *testing.T) {
	run := func(t *testing.T, f *fixture, w *mcpWall) string {
		ctx := ctxT(t)
		c := w.client("mallory")
		if err := c.Initialize(ctx, "", nil); err != nil {
			t.Fatal(err)
		}
		r, err := c.Post(ctx, mcptest.Tool(2, "attack", nil))
		if err != nil {
			t.Fatal(err)
		}
		return r.Text()
	}
	t.Run("socket outside the wall", func(t *testing.T) {
		f := newFixture(t, "mcp-attack")
		w := f.startMCP(t, "", MCP{})
		got := run(t, f, w)
		if strings.Contains(got, "BREACH") || !strings.Contains(got, "HELD") {
			t.Errorf("the attack from inside:\n%s", got)
		}
		t.Logf("the attack from inside:\n%s", got)
	})
	t.Run("control: socket in the run folder", func(t *testing.T) {
		f := newFixture(t, "mcp-attack-control")
		w := f.startMCPAt(t, filepath.Join(f.run, "bridge.sock"))
		got := run(t, f, w)
		if !strings.Contains(got, "BREACH connect "+RunMount+"/bridge.sock") {
			t.Errorf("the control attack did not get through:\n%s", got)
		}
	})
}

// TestMCPLegacyVatModernClient: the Go SDK's v1.6.1 server speaks only
// the 2025 revisions; a stateless (2026-07-28) client of it is bridged:
// toybox finds the era by asking, initializes a process itself, answers
// server/discover from its InitializeResult and marks each result
// complete. A 2025 client of the same vat gets a session as usual.
func TestMCPLegacyVatModernClient(t *testing.T) {
	f := newFixture(t, "mcp-legacy")
	w := f.startMCP(t, testenv.EverythingServer(t, testenv.EverythingLegacy), MCP{})
	ctx := ctxT(t)
	c := w.client("alice")
	meta := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}
	r, err := c.Post(ctx, mcptest.Request(1, "server/discover", map[string]any{"_meta": meta}),
		"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "server/discover")
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("server/discover: %v %+v", err, r)
	}
	var disc struct {
		ResultType        string          `json:"resultType"`
		SupportedVersions []string        `json:"supportedVersions"`
		Capabilities      json.RawMessage `json:"capabilities"`
	}
	_ = json.Unmarshal(r.Final()["result"], &disc)
	if disc.ResultType != "complete" || len(disc.SupportedVersions) != 1 || !strings.Contains(string(disc.Capabilities), "tools") {
		t.Errorf("server/discover = %s", r.Final()["result"])
	}
	r, err = c.Post(ctx, mcptest.Request(2, "tools/call", map[string]any{"name": "test_simple_text", "arguments": map[string]any{}, "_meta": meta}),
		"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "test_simple_text")
	if err != nil || r.Text() != "This is a simple text response for testing." || !strings.Contains(string(r.Final()["result"]), `"resultType":"complete"`) {
		t.Fatalf("a bridged tools/call: %v %s", err, r.Final()["result"])
	}
	r, err = c.Post(ctx, mcptest.Request(3, "ping", map[string]any{"_meta": meta}), "Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "ping")
	if err != nil || r.Status != http.StatusNotFound {
		t.Errorf("a removed method: %v %+v; want 404", err, r)
	}
	if st := w.stats(t); st["era"] != "legacy" {
		t.Errorf("stats %v; want era legacy", st)
	}
	legacy := w.client("alice")
	if err := legacy.Initialize(ctx, "2025-06-18", nil); err != nil {
		t.Fatal(err)
	}
	if r, err := legacy.Post(ctx, mcptest.Tool(4, "test_simple_text", nil)); err != nil || r.Text() != "This is a simple text response for testing." {
		t.Errorf("a 2025 session: %v %q", err, r.Text())
	}

	// R31: the Go SDK's 2026-07-28 client asks for sampling and
	// elicitation as multi round-trip results; toybox turns the vat's
	// requests into them and the retries into the vat's answers.
	cs, err := w.client("carol").SDK(ctx, &sdk.ClientOptions{
		//lint:ignore SA1019 the 2025 vat under test asks for sampling, which 2026-07-28 deprecates but keeps
		CreateMessageHandler: func(_ context.Context, req *sdk.CreateMessageRequest) (*sdk.CreateMessageResult, error) {
			prompt := ""
			if tc, ok := req.Params.Messages[0].Content.(*sdk.TextContent); ok {
				prompt = tc.Text
			}
			//lint:ignore SA1019 as above
			return &sdk.CreateMessageResult{Role: "assistant", Model: "m", Content: &sdk.TextContent{Text: "echo of " + prompt}}, nil
		},
		ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"username": "carol"}}, nil
		},
	})
	if err != nil {
		t.Fatalf("the SDK's client: %v", err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Errorf("the SDK's client speaks %q; want 2026-07-28 (stateless, through the bridge)", v)
	}
	for _, tt := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"test_sampling", map[string]any{"prompt": "hi"}, "LLM response: echo of hi"},
		{"test_elicitation", map[string]any{"message": "who?"}, "action=accept, content=map[username:carol]"},
	} {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tt.tool, Arguments: tt.args})
		if err != nil || res.IsError || len(res.Content) == 0 {
			b, _ := json.Marshal(res)
			t.Fatalf("%s through MRTR: %v %s", tt.tool, err, b)
		}
		if tc, ok := res.Content[0].(*sdk.TextContent); !ok || !strings.Contains(tc.Text, tt.want) {
			t.Errorf("%s = %+v; want %q", tt.tool, res.Content[0], tt.want)
		}
	}
}

// TestMCPWithNetwork: a stdio MCP vat with a network shape runs the
// bridge beside the proxy: its processes get the proxy's variables, and
// the entry serves both.
func TestMCPWithNetwork(t *testing.T) {
	f := newFixture(t, "mcp-net")
	f.spec.Net = Net{}
	ea, eb := socketpair(t)
	serveNoGrant(t, eb, f.spec.ID)
	f.spec.EntryCap = ea
	w := f.startMCP(t, "", MCP{})
	ctx := ctxT(t)
	c := w.client("alice")
	if err := c.Initialize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.Post(ctx, mcptest.Tool(2, "env", nil))
	if err != nil {
		t.Fatal(err)
	}
	env := r.Text()
	if !strings.Contains(env, "HTTPS_PROXY=http://127.0.0.1:") || strings.Contains(env, "TOYBOX_LISTEN") || strings.Contains(env, "TOYBOX_CAP_FD") {
		t.Errorf("the process's environment:\n%s", env)
	}
}

// mcpEnv is the fake's "env" tool inside a wall: the process's
// environment, one variable a line.
func mcpEnv() string { return strings.Join(os.Environ(), "\n") }

// TestMCPPrincipalSecrets (R22): the spawner sets a principal's secrets
// (Toybox-Principal-Env, as the supervisor sends a token's) over the
// vat's environment in that principal's processes alone; the processes of
// two principals differ only in them.
func TestMCPPrincipalSecrets(t *testing.T) {
	f := newFixture(t, "mcp-secrets")
	f.spec.Env = map[string]string{"API_KEY": "vat-default"}
	w := f.startMCP(t, "", MCP{})
	ctx := ctxT(t)
	secrets := map[string]map[string]string{
		"alice": {"API_KEY": "alice-secret", "ALICE_ONLY": "a b=c"},
		"bob":   {"API_KEY": "bob-secret"},
		"carol": nil,
	}
	got := map[string][]string{}
	for _, who := range []string{"alice", "bob", "carol"} {
		c := w.client(who)
		c.PrincipalEnv = mcp.EncodeEnv(secrets[who])
		if err := c.Initialize(ctx, "", nil); err != nil {
			t.Fatal(err)
		}
		r, err := c.Post(ctx, mcptest.Tool(2, "env", nil))
		if err != nil {
			t.Fatal(err)
		}
		env := strings.Split(r.Text(), "\n")
		slices.Sort(env)
		got[who] = env
	}
	has := func(who, kv string) bool {
		return strings.Contains("\n"+strings.Join(got[who], "\n")+"\n", "\n"+kv+"\n")
	}
	for who := range got {
		for other, s := range secrets {
			for k, v := range s {
				if h := has(who, k+"="+v); h != (who == other) {
					t.Errorf("%s's process has %s's %s: %v; want %v", who, other, k, h, who == other)
				}
			}
		}
	}
	if !has("carol", "API_KEY=vat-default") || has("alice", "API_KEY=vat-default") {
		t.Errorf("API_KEY: carol's %q, alice's %q; want the vat's for carol, replaced for alice", got["carol"], got["alice"])
	}
	strip := func(env []string) []string {
		return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
			return strings.HasPrefix(kv, "API_KEY=") || strings.HasPrefix(kv, "ALICE_ONLY=")
		})
	}
	for _, who := range []string{"alice", "bob"} {
		if a, b := strip(got[who]), strip(got["carol"]); !slices.Equal(a, b) {
			t.Errorf("%s's environment differs from carol's beyond its secrets:\n%q\n%q", who, a, b)
		}
	}
}

// TestMCPHeldStats: the counters show what the bridge keeps for a resume
// against its bounds (32 MiB per holder, 96 MiB in all) and what those
// bounds dropped. Each client leaves a call of 20 MiB before its answer:
// alice's second passes her bound, and five holders pass the bound of
// all.
func TestMCPHeldStats(t *testing.T) {
	f := newFixture(t, "mcp-held")
	w := f.startMCP(t, "", MCP{Mode: "single"})
	ctx := ctxT(t)
	const answer = 20 << 20
	type held struct {
		Bytes, Bound, HolderBound, MostByOne, DroppedAnswers int64
		Events, Holders                                      int
		Dropped                                              struct{ Session, Holder, All int64 }
	}
	heldNow := func() held {
		t.Helper()
		var st struct{ Held held }
		if err := json.Unmarshal(mustJSON(t, w.stats(t)), &st); err != nil {
			t.Fatal(err)
		}
		return st.Held
	}
	// leave calls big in a new session of principal and leaves at the
	// priming event, then waits until the bridge has kept its answer
	// (and maybe dropped one).
	calls := 0
	leave := func(principal string) string {
		t.Helper()
		c := w.client(principal)
		if err := c.Initialize(ctx, "2025-11-25", nil); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		resp, err := c.Open(cctx, mcptest.Tool(2, "big", map[string]any{"mib": answer >> 20, "sleepMs": 200}), "Accept", "text/event-stream, application/json")
		if err != nil {
			t.Fatal(err)
		}
		prime, err := mcptest.ReadEvent(bufio.NewReader(resp.Body))
		resp.Body.Close()
		if err != nil || prime.ID == "" {
			t.Fatalf("the priming event: %+v %v", prime, err)
		}
		calls++
		err = mcptest.Eventually(30*time.Second, func() error {
			h := heldNow()
			if kept := int64(h.Events) + h.Dropped.Session + h.Dropped.Holder + h.Dropped.All; kept != int64(calls) {
				return fmt.Errorf("held %+v; want %d answers kept or dropped", h, calls)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return prime.ID
	}
	leave("alice")
	leave("alice")
	h := heldNow()
	t.Logf("alice past her bound: %+v", h)
	if h.HolderBound != 32<<20 || h.Bound != 96<<20 || h.Holders != 1 || h.MostByOne != h.Bytes || h.Bytes < answer || h.Bytes > h.HolderBound {
		t.Errorf("held %+v; want alice's one answer, of bounds 32 and 96 MiB", h)
	}
	if h.Dropped.Holder != 1 || h.DroppedAnswers != 1 || h.Dropped.All != 0 {
		t.Errorf("held %+v; want one answer dropped past alice's bound", h)
	}
	for _, p := range []string{"bob", "carol", "dave", "erin"} {
		leave(p)
	}
	h = heldNow()
	t.Logf("five holders past the bound of all: %+v", h)
	if h.Bytes > h.Bound || h.Holders != 4 || h.Dropped.All != 1 || h.DroppedAnswers != 2 {
		t.Errorf("held %+v; want four answers kept within 96 MiB, one dropped past it", h)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
