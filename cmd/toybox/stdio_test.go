package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStdioBridgeEndpoints drives the bridge against endpoints that a vat
// does not behave as: each request gets exactly one answer, stdout holds
// one JSON message a line, and stdin's end ends the bridge in time.
func TestStdioBridgeEndpoints(t *testing.T) {
	const call = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}`
	sse := func(w http.ResponseWriter, body string) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(body))
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    string // in the answer to id 7
	}{
		{"not JSON", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("<html>oops</html>"))
		}, "not JSON"},
		{"a huge event", func(w http.ResponseWriter, r *http.Request) {
			sse(w, "data: "+strings.Repeat("x", 40<<20)+"\n\n")
		}, "ended with no answer"},
		{"no newline", func(w http.ResponseWriter, r *http.Request) {
			sse(w, `data: {"jsonrpc":"2.0","id":7,"result":{}}`)
		}, `"result":{}`},
		{"an event not JSON, then the answer", func(w http.ResponseWriter, r *http.Request) {
			sse(w, "data: <html>oops</html>\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n")
		}, `"result":{}`},
		{"an event not JSON-RPC, then the answer", func(w http.ResponseWriter, r *http.Request) {
			sse(w, "data: {\"oops\":1}\n\ndata: [1]\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n")
		}, `"result":{}`},
		{"the answer twice", func(w http.ResponseWriter, r *http.Request) {
			sse(w, "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"again\":1}}\n\n")
		}, `"result":{}`},
		{"only events not JSON", func(w http.ResponseWriter, r *http.Request) {
			sse(w, "data: oops\n\n")
		}, "ended with no answer"},
		{"202 to a request", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
		}, "answered 202"},
		{"a stream ended before its answer", func(w http.ResponseWriter, r *http.Request) {
			sse(w, ": nothing\n\n")
		}, "ended with no answer"},
		{"a stream taken up again", func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") == "s1-0" {
				sse(w, "id: s1-1\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"resumed\":true}}\n\n")
				return
			}
			if r.Method == http.MethodPost {
				sse(w, "id: s1-0\ndata: \n\n")
				return
			}
			w.WriteHeader(http.StatusMethodNotAllowed)
		}, `"resumed":true`},
		{"a stalled stream", func(w http.ResponseWriter, r *http.Request) {
			sse(w, "")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			var out bytes.Buffer
			b := &stdioBridge{endpoint: srv.URL, out: bufio.NewWriter(&out), client: srv.Client()}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			if err := b.run(ctx, strings.NewReader(call+"\n")); err != nil {
				t.Fatalf("run: %v", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("run took %v after stdin's end; want at most the 5 s grace", d)
			}
			var answers []string
			for line := range strings.Lines(out.String()) {
				if !json.Valid([]byte(line)) || strings.Count(line, "\n") != 1 || !strings.Contains(line, `"jsonrpc":"2.0"`) {
					t.Errorf("stdout line %.100q is not one JSON-RPC message", line)
				}
				if strings.Contains(line, `"id":7`) {
					answers = append(answers, line)
				}
			}
			switch {
			case tt.want == "" && len(answers) != 0:
				t.Errorf("answers = %.200q; want none", answers)
			case tt.want != "" && (len(answers) != 1 || !strings.Contains(answers[0], tt.want)):
				t.Errorf("answers = %.200q; want one with %s", answers, tt.want)
			}
		})
	}
}

// bridgeClient runs the bridge against handler, as a client launches a
// stdio server: in is its stdin, lines what it writes on stdout, ended
// closed once run returns.
type bridgeClient struct {
	in    *os.File // a pipe, as a launched server's stdin is
	lines chan string
	ended chan struct{}
}

func startBridge(t *testing.T, handler http.Handler) *bridgeClient {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inR.Close() })
	outR, outW := io.Pipe()
	c := &bridgeClient{in: inW, lines: make(chan string, 100), ended: make(chan struct{})}
	b := &stdioBridge{endpoint: srv.URL, out: bufio.NewWriter(outW), client: srv.Client()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	go func() {
		defer close(c.ended)
		if err := b.run(ctx, inR); err != nil {
			t.Errorf("run: %v", err)
		}
		outW.Close()
	}()
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-c.ended:
		case <-time.After(20 * time.Second):
			t.Errorf("the bridge still runs 20 s after stdin's end")
		}
	})
	return c
}

func (c *bridgeClient) send(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(c.in, msg+"\n"); err != nil {
		t.Fatalf("writing %s to the bridge: %v", msg, err)
	}
}

// next is the next line the bridge writes that holds want.
func (c *bridgeClient) next(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				t.Fatalf("stdout ended with no line holding %s", want)
			}
			if strings.Contains(line, want) {
				return line
			}
		case <-timeout:
			t.Fatalf("no line holding %s in 10 s", want)
		}
	}
}

// rest is what the bridge writes until it ends.
func (c *bridgeClient) rest(t *testing.T) []string {
	t.Helper()
	c.in.Close()
	var lines []string
	for line := range c.lines {
		lines = append(lines, line)
	}
	return lines
}

const (
	initA = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"a","version":"1"}}}`
	initB = `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`
	initd = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
)

// initResult answers an initialize in session id.
func initResult(w http.ResponseWriter, id json.RawMessage, session string) {
	if session != "" {
		w.Header().Set("Mcp-Session-Id", session)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`, id)
}

// rpc is the JSON-RPC message a request to the endpoint carries.
type rpc struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		RequestID  json.RawMessage `json:"requestId"`
		ClientInfo struct {
			Name string `json:"name"`
		} `json:"clientInfo"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
}

func readRPC(r *http.Request) rpc {
	var m rpc
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &m)
	return m
}

// TestStdioBridgeStalledInitialize: an endpoint that takes initialize and
// never answers holds neither stdin nor the bridge: a request sent
// behind it can still be cancelled, and stdin's end (the client quit)
// ends the bridge within the 5 s grace.
func TestStdioBridgeStalledInitialize(t *testing.T) {
	posted := make(chan string, 10)
	c := startBridge(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := readRPC(r)
		posted <- m.Method
		if m.Method == "initialize" {
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	c.send(t, initA)
	if got := <-posted; got != "initialize" {
		t.Fatalf("posted %q; want initialize", got)
	}
	c.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	c.in.Close()
	select {
	case <-c.ended:
		t.Logf("the bridge ended %v after stdin's end", time.Since(start).Round(time.Millisecond))
	case <-time.After(8 * time.Second):
		t.Fatalf("the bridge still runs 8 s after stdin's end, behind a stalled initialize")
	}
	close(posted)
	for m := range posted {
		if m == "tools/list" {
			t.Errorf("a tools/list the client cancelled was posted")
		}
	}
	for line := range c.lines {
		if strings.Contains(line, `"id":2`) {
			t.Errorf("the client got %s; want no answer to a request it cancelled", line)
		}
	}
}

// TestStdioBridgeCancelWaiting: a request that waits for a slot (the
// bridge posts stdioInFlight at once) and is cancelled meanwhile is never
// posted, and the client gets no answer to it.
func TestStdioBridgeCancelWaiting(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var calls []string
	c := startBridge(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := readRPC(r)
		if m.Method != "tools/call" {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		mu.Lock()
		calls = append(calls, string(m.ID))
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, m.ID)
	}))
	for i := range stdioInFlight {
		c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow"}}`, 100+i))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(calls)
		mu.Unlock()
		if n == stdioInFlight {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls posted; want %d", n, stdioInFlight)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.send(t, `{"jsonrpc":"2.0","id":"late","method":"tools/call","params":{"name":"slow"}}`)
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"late"}}`)
	time.Sleep(100 * time.Millisecond)
	close(release)
	lines := c.rest(t)
	for i := range stdioInFlight {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, fmt.Sprintf(`"id":%d,"result"`, 100+i)) }) {
			t.Errorf("no answer to call %d in %q", 100+i, lines)
		}
	}
	for _, line := range lines {
		if strings.Contains(line, `"late"`) {
			t.Errorf("the client got %s; want no answer to a request it cancelled", line)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range calls {
		if id == `"late"` {
			t.Errorf("a call cancelled while it waited for a slot was posted")
		}
	}
}

// TestStdioBridgeInitializeTwice: a client's initialize after one the
// endpoint accepted is refused, not sent, and a new session (the endpoint
// forgot the old one) is opened with the initialize it accepted, not
// one it refused before.
func TestStdioBridgeInitializeTwice(t *testing.T) {
	var mu sync.Mutex
	var posted []string // "method name" of each POST
	live := map[string]bool{}
	sessions := 0
	c := startBridge(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		m := readRPC(r)
		mu.Lock()
		defer mu.Unlock()
		posted = append(posted, m.Method+" "+m.Params.ClientInfo.Name)
		switch {
		case m.Method == "initialize" && m.Params.ClientInfo.Name == "x":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"no x here"}}`, m.ID)
		case m.Method == "initialize":
			sessions++
			id := fmt.Sprint("s", sessions)
			live[id] = true
			initResult(w, m.ID, id)
		case !live[r.Header.Get("Mcp-Session-Id")]:
			http.Error(w, "no such session", http.StatusNotFound)
		case m.Method == "tools/call":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"session":%q}}`, m.ID, r.Header.Get("Mcp-Session-Id"))
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	c.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	if got := c.next(t, `"id":0`); !strings.Contains(got, "no x here") {
		t.Errorf("a refused initialize = %s; want the endpoint's error", got)
	}
	c.send(t, initA)
	c.next(t, `"id":1,"result"`)
	c.send(t, initd)
	c.send(t, initB)
	if got := c.next(t, `"id":2`); !strings.Contains(got, `"error"`) || !strings.Contains(got, "initialize") {
		t.Errorf("a second initialize = %s; want an error that says why", got)
	}
	mu.Lock()
	clear(live) // the endpoint restarted
	mu.Unlock()
	c.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t"}}`)
	if got := c.next(t, `"id":3`); !strings.Contains(got, `"session":"s2"`) {
		t.Errorf("a call after the endpoint forgot the session = %s; want it answered in a new one", got)
	}
	mu.Lock()
	defer mu.Unlock()
	var inits []string
	for _, p := range posted {
		if strings.HasPrefix(p, "initialize") {
			inits = append(inits, p)
		}
	}
	if want := []string{"initialize x", "initialize a", "initialize a"}; !slices.Equal(inits, want) {
		t.Errorf("initialize posted %q; want %q (the refused one once, the accepted one again for the new session)", inits, want)
	}
}

// TestStdioBridgeInitializedFirst: a client sends initialized and its
// first request at once (Claude Desktop does), and a server may refuse a
// request before initialized (the Python SDK does): the request goes
// only once the endpoint has taken initialized.
func TestStdioBridgeInitializedFirst(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	c := startBridge(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		m := readRPC(r)
		note := func(s string) { mu.Lock(); seen = append(seen, s); mu.Unlock() }
		switch m.Method {
		case "initialize":
			initResult(w, m.ID, "s1")
		case "notifications/initialized":
			time.Sleep(300 * time.Millisecond)
			note("initialized")
			w.WriteHeader(http.StatusAccepted)
		default:
			note(m.Method)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[]}}`, m.ID)
		}
	}))
	c.send(t, initA)
	c.next(t, `"id":1,"result"`)
	c.send(t, initd)
	c.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	c.next(t, `"id":2,"result"`)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"initialized", "tools/list"}; !slices.Equal(seen, want) {
		t.Errorf("the endpoint took %q; want %q", seen, want)
	}
}

// TestStdioBridgeServerRequests: the server's own requests reach the
// client, on the session's GET stream and inside a call's stream, and
// the client's answers reach the server (a POST it answers 202) in the
// session, with no error for them on stdout.
func TestStdioBridgeServerRequests(t *testing.T) {
	answers := map[string]chan string{"g1": make(chan string, 1), "p1": make(chan string, 1)}
	sse := func(w http.ResponseWriter, events ...string) {
		for _, e := range events {
			fmt.Fprintf(w, "data: %s\n\n", e)
		}
		w.(http.Flusher).Flush()
	}
	c := startBridge(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			return
		}
		if r.Header.Get("Mcp-Session-Id") != "s1" && r.Method == http.MethodGet {
			http.Error(w, "no session", http.StatusBadRequest)
			return
		}
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, `{"jsonrpc":"2.0","id":"g1","method":"roots/list"}`)
			<-r.Context().Done()
			return
		}
		m := readRPC(r)
		switch {
		case m.Method == "initialize":
			initResult(w, m.ID, "s1")
		case r.Header.Get("Mcp-Session-Id") != "s1":
			http.Error(w, "no session", http.StatusBadRequest)
		case m.Method == "tools/call":
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, `{"jsonrpc":"2.0","id":"p1","method":"roots/list"}`)
			select {
			case roots := <-answers["p1"]:
				b, _ := json.Marshal(roots)
				sse(w, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%s}]}}`, m.ID, b))
			case <-time.After(10 * time.Second):
			}
		case m.Method == "" && m.Result != nil:
			var id string
			_ = json.Unmarshal(m.ID, &id)
			if ch, ok := answers[id]; ok {
				ch <- string(m.Result)
			}
			w.WriteHeader(http.StatusAccepted)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	answerRoots := func(line string) {
		var req struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(line), &req); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":{"roots":[{"uri":"file:///%s"}]}}`, req.ID, req.ID))
	}
	c.send(t, initA)
	c.next(t, `"id":1,"result"`)
	c.send(t, initd)
	answerRoots(c.next(t, `"method":"roots/list"`))
	select {
	case got := <-answers["g1"]:
		if !strings.Contains(got, "file:///g1") {
			t.Errorf("the server got %s for its roots/list on the GET stream; want the client's roots", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the client's answer to roots/list on the GET stream did not reach the server")
	}
	c.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"roots"}}`)
	answerRoots(c.next(t, `"id":"p1"`))
	if got := c.next(t, `"id":3`); !strings.Contains(got, `file:///p1`) {
		t.Errorf("a call whose server asked for roots = %s; want the client's roots in its result", got)
	}
	// No answer is under way, only the GET stream: stdin's end ends
	// the bridge without the grace answers get.
	start := time.Now()
	for _, line := range c.rest(t) {
		if strings.Contains(line, `"error"`) {
			t.Errorf("stdout has %s; want no error", line)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the bridge ended %v after stdin's end with no answer under way; want at once", d.Round(time.Millisecond))
	}
}

// TestStdioBridgeReusedID: a client sends a request with the id of one
// still in flight (JSON-RPC forbids it). The second is refused (-32600,
// naming the id) and never posted; the first stays the one that id
// names, so a notifications/cancelled for it ends the first's post. The
// id is free once the first is gone.
func TestStdioBridgeReusedID(t *testing.T) {
	var mu sync.Mutex
	var held []string // the name of each tools/call posted
	firstGone := make(chan struct{})
	c := startBridge(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &m)
		switch {
		case m.Method == "initialize":
			initResult(w, m.ID, "s1")
		case m.Method == "tools/call" && m.Params.Name == "quick":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"name":"quick"}}`, m.ID)
		case m.Method == "tools/call":
			mu.Lock()
			held = append(held, m.Params.Name)
			mu.Unlock()
			<-r.Context().Done() // the server holds the call
			if m.Params.Name == "first" {
				close(firstGone)
			}
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	c.send(t, initA)
	c.next(t, `"id":1,"result"`)
	c.send(t, initd)
	c.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"first"}}`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(held)
		mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first call was not posted in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"second"}}`)
	got := c.next(t, `"id":5`)
	if !strings.Contains(got, `"code":-32600`) || !strings.Contains(got, "request id 5") {
		t.Errorf("a request reusing id 5 in flight = %s; want -32600 naming the id", got)
	}
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	select {
	case <-firstGone:
	case <-time.After(10 * time.Second):
		t.Fatalf("a notifications/cancelled for id 5 did not end the first call's post in 10 s")
	}
	// The id is free again once the client cancelled its call.
	c.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"quick"}}`)
	if got := c.next(t, `"id":5`); !strings.Contains(got, `"name":"quick"`) {
		t.Errorf("id 5 after its call was cancelled = %s; want the call answered", got)
	}
	lines := c.rest(t)
	for _, line := range lines {
		if strings.Contains(line, `"id":5`) {
			t.Errorf("stdout has %s after the last answer to id 5; want nothing more for it", line)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"first"}; !slices.Equal(held, want) {
		t.Errorf("held calls posted %q; want %q (a reused id is not sent)", held, want)
	}
}

// TestStdioBridgeRefusedInitializeSession: an endpoint answers initialize
// 200 with an Mcp-Session-Id but a JSON-RPC error in the body (the
// server refused it, as JSON or as an event): no session was made, so
// the bridge sends that id with nothing after it, and the client's next
// initialize goes with no session.
func TestStdioBridgeRefusedInitializeSession(t *testing.T) {
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprint("sse=", sse), func(t *testing.T) {
			var mu sync.Mutex
			var seen []string // "method session" of each request after the refused initialize
			refused := false
			c := startBridge(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				m := readRPC(r)
				mu.Lock()
				first := !refused
				if refused {
					seen = append(seen, r.Method+" "+m.Method+" "+r.Header.Get("Mcp-Session-Id"))
				}
				refused = true
				mu.Unlock()
				switch {
				case r.Method == http.MethodPost && m.Method == "initialize" && first:
					w.Header().Set("Mcp-Session-Id", "refused")
					body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"no such version"}}`, m.ID)
					if sse {
						w.Header().Set("Content-Type", "text/event-stream")
						fmt.Fprintf(w, "data: %s\n\n", body)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, body)
				case r.Method == http.MethodPost && m.Method == "initialize":
					initResult(w, m.ID, "s1")
				case r.Method == http.MethodGet:
					w.WriteHeader(http.StatusMethodNotAllowed)
				default:
					w.WriteHeader(http.StatusAccepted)
				}
			}))
			c.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"1999-01-01","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
			if got := c.next(t, `"id":0`); !strings.Contains(got, "no such version") {
				t.Errorf("a refused initialize = %s; want the endpoint's error", got)
			}
			time.Sleep(200 * time.Millisecond) // a GET stream, had one started
			c.send(t, initA)
			c.next(t, `"id":1,"result"`)
			c.rest(t)
			mu.Lock()
			defer mu.Unlock()
			if len(seen) == 0 || seen[0] != "POST initialize " {
				t.Errorf("after the refused initialize the endpoint got %q; want the next initialize first, with no session", seen)
			}
			for _, s := range seen {
				if strings.HasSuffix(s, " refused") {
					t.Errorf("the endpoint got %q: the id of a session its refused initialize never made", s)
				}
			}
		})
	}
}

// TestStdioBridgeRenewRefused: the endpoint forgot the session, and
// answers the initialize that would open a new one 200, with a session
// id but a JSON-RPC error: no session was made, so the call is answered
// with the endpoint's 404 and that id is never sent.
func TestStdioBridgeRenewRefused(t *testing.T) {
	var mu sync.Mutex
	var seen []string // the session each request carried
	inits := 0
	c := startBridge(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		m := readRPC(r)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Header.Get("Mcp-Session-Id"))
		switch {
		case m.Method == "initialize" && inits == 0:
			inits++
			initResult(w, m.ID, "s1")
		case m.Method == "initialize":
			w.Header().Set("Mcp-Session-Id", "refused")
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"not now"}}`, m.ID)
		case m.Method == "tools/call":
			http.Error(w, "no such session", http.StatusNotFound) // it forgot s1
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	c.send(t, initA)
	c.next(t, `"id":1,"result"`)
	c.send(t, initd)
	c.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t"}}`)
	if got := c.next(t, `"id":2`); !strings.Contains(got, "404") {
		t.Errorf("a call whose session could not be opened again = %s; want the endpoint's 404", got)
	}
	c.rest(t)
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if s == "refused" {
			t.Errorf("the endpoint got session %q, which its refused initialize never made (all: %q)", s, seen)
		}
	}
}
