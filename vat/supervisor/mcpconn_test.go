package supervisor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"toybox/vat/manifest"
)

// bridgeServer serves h on a unix socket in a folder of the test's and
// returns its path and how many connections it accepted.
func bridgeServer(t *testing.T, h http.Handler) (string, *atomic.Int64, *http.Server) {
	t.Helper()
	dir, err := os.MkdirTemp("", "bt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "b.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var conns, idle atomic.Int64
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			conns.Add(1)
		case http.StateIdle:
			idle.Add(1)
		}
	}}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	idleOf.Store(srv, &idle)
	t.Cleanup(func() { idleOf.Delete(srv) })
	return path, &conns, srv
}

// idleOf counts each bridge server's connections gone idle.
var idleOf sync.Map // *http.Server → *atomic.Int64

func idleCount(srv *http.Server) int64 {
	n, _ := idleOf.Load(srv)
	return n.(*atomic.Int64).Load()
}

// closeIdle closes srv's idle connections, as a wall's restart ends the
// bridge's, once the server has seen its connection go idle after the
// answer the client already read (the client can read it first, and a
// connection still active is not closed).
func closeIdle(t *testing.T, srv *http.Server, idleBefore int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for idleCount(srv) <= idleBefore {
		if time.Now().After(deadline) {
			t.Fatal("the server's connection never went idle")
		}
		time.Sleep(time.Millisecond)
	}
	srv.SetKeepAlivesEnabled(false)
	srv.SetKeepAlivesEnabled(true)
	time.Sleep(50 * time.Millisecond) // the close reaches our end
}

func get(t *testing.T, bt *bridgeTransport, ctx context.Context, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://vat/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return bt.RoundTrip(req)
}

// TestBridgeTransport: requests share kept connections; one the bridge
// closed while idle is not used; an answer's headers are bounded; a
// request whose context ends closes its stream's connection.
func TestBridgeTransport(t *testing.T) {
	streaming := make(chan struct{})
	gone := make(chan struct{})
	path, conns, _ := bridgeServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch string(b) {
		case "close":
			w.Header().Set("Connection", "close")
		case "big":
			w.Header().Set("X-Big", strings.Repeat("x", maxVatHeaderBytes+1))
		case "early":
			w.WriteHeader(http.StatusEarlyHints)
		case "stream":
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("data: 1\n\n"))
			w.(http.Flusher).Flush()
			close(streaming)
			<-r.Context().Done()
			close(gone)
			return
		}
		fmt.Fprintf(w, "echo %s", b)
	}))
	bt := &bridgeTransport{in: &instance{sock: path}}
	defer bt.closeIdle()
	ctx := context.Background()
	read := func(body string) string {
		t.Helper()
		resp, err := get(t, bt, ctx, body)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	for i := range 5 {
		if got, want := read(fmt.Sprint(i)), fmt.Sprintf("200 echo %d", i); got != want {
			t.Fatalf("answer = %q; want %q", got, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 requests in a row took %d connections; want 1 (kept open)", n)
	}
	// The bridge ends the connection after this answer: the next request
	// must not be written on it.
	if got := read("close"); got != "200 echo close" {
		t.Fatalf("answer = %q", got)
	}
	if got := read("after"); got != "200 echo after" {
		t.Errorf("after a closed connection: %q", got)
	}
	// An informational answer is dropped; the final one is the answer.
	if got := read("early"); got != "200 echo early" {
		t.Errorf("after a 103: %q", got)
	}
	if _, err := get(t, bt, ctx, "big"); err == nil || !strings.Contains(err.Error(), "response headers exceeded") {
		t.Errorf("headers over %d bytes: %v; want refused", maxVatHeaderBytes, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	resp, err := get(t, bt, sctx, "stream")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || ev != "data: 1\n" {
		t.Fatalf("stream: %q %v", ev, err)
	}
	<-streaming
	cancel()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the client's context ended, and the bridge's stream went on")
	}
	_ = resp.Body.Close()
}

// keptThenClosed makes one request through bt, which keeps its
// connection idle, and has the bridge (srv) close that connection.
func keptThenClosed(t *testing.T, bt *bridgeTransport, srv *http.Server) {
	t.Helper()
	idle := idleCount(srv)
	resp, err := get(t, bt, context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	bt.mu.Lock()
	n := len(bt.idle)
	bt.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d idle connections; want 1", n)
	}
	closeIdle(t, srv, idle)
}

// TestBridgeTransportIdleClosed: a small request written on an idle
// connection the bridge closed (its wall restarted) fails whole and is
// written again on a new connection.
func TestBridgeTransportIdleClosed(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	path, conns, srv := bridgeServer(t, h)
	bt := &bridgeTransport{in: &instance{sock: path}}
	defer bt.closeIdle()
	keptThenClosed(t, bt, srv)
	resp, err := get(t, bt, context.Background(), "b")
	if err != nil {
		t.Fatalf("a request after the bridge closed the idle connection: %v", err)
	}
	_ = resp.Body.Close()
	if n := conns.Load(); n < 2 {
		t.Errorf("%d connections; want a new one", n)
	}
}

// TestBridgeTransportIdleClosedLargeBody: a body too large to hold in
// memory cannot be written twice, so the idle connection is checked open
// before it is written on (the case above writes a small body at once).
func TestBridgeTransportIdleClosedLargeBody(t *testing.T) {
	var got atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Add(int64(len(b)))
		_, _ = io.WriteString(w, "ok")
	})
	path, conns, srv := bridgeServer(t, h)
	bt := &bridgeTransport{in: &instance{sock: path}}
	defer bt.closeIdle()
	keptThenClosed(t, bt, srv)
	big := strings.Repeat("x", bridgeBufSize+1)
	resp, err := get(t, bt, context.Background(), big)
	if err != nil {
		t.Fatalf("a large request after the bridge closed the idle connection: %v", err)
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections; want 2", n)
	}
	if n := got.Load(); n != int64(1+len(big)) {
		t.Errorf("the bridge read %d body bytes; want %d", n, 1+len(big))
	}
}

// TestBridgeTransportNoResend: a request written whole on a kept
// connection that the bridge then closes without an answer is not
// written again: the bridge may have acted on it (a tools/call runs
// once).
func TestBridgeTransportNoResend(t *testing.T) {
	dir, err := os.MkdirTemp("", "bt")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "b.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var requests atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.ReadAll(req.Body)
					if requests.Add(1) > 1 {
						return // read whole, then gone without an answer
					}
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	bt := &bridgeTransport{in: &instance{sock: path}}
	defer bt.closeIdle()
	resp, err := get(t, bt, context.Background(), "first")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if _, err := get(t, bt, context.Background(), "second"); err == nil {
		t.Fatal("an answer from a bridge that closed without one")
	}
	time.Sleep(50 * time.Millisecond)
	if n := requests.Load(); n != 2 {
		t.Errorf("the bridge got %d requests; want 2 (the second written once)", n)
	}
}

// TestBridgeTransportUnaskedBytes: a bridge that wrote more than its
// answer (a second answer, ahead of any request) had those bytes read as
// the answer to the next request on that connection, whoever's it was:
// another principal's request got an answer, and a session id, made before
// it was asked. A connection with bytes left after an answer is closed,
// never kept.
func TestBridgeTransportUnaskedBytes(t *testing.T) {
	dir, err := os.MkdirTemp("", "bt")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "b.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					b, _ := io.ReadAll(req.Body)
					answer := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
					if string(b) == "alice" {
						// The answer, and one more in the same write.
						answer += "HTTP/1.1 200 OK\r\nMcp-Session-Id: planted\r\nContent-Length: 7\r\n\r\nplanted"
					}
					_, _ = io.WriteString(c, answer)
				}
			}()
		}
	}()
	bt := &bridgeTransport{in: &instance{sock: path}}
	defer bt.closeIdle()
	for _, who := range []string{"alice", "bob"} {
		resp, err := get(t, bt, context.Background(), who)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(b) != who || resp.Header.Get("Mcp-Session-Id") != "" {
			t.Errorf("%s's request got %q (session %q); want its own answer, %q", who, b, resp.Header.Get("Mcp-Session-Id"), who)
		}
	}
}

// TestBridgeBodyOverLimit: a body of unknown length (chunked) that passed
// MaxMCPBody on its way to a stdio vat's bridge was answered 502 "did not
// answer", where an http vat's is 413: Request.Write wraps the body's
// error in a type that hides it, so the MCP proxy's ErrorHandler did not
// see the limit. It is 413 on both.
func TestBridgeBodyOverLimit(t *testing.T) {
	path, _, _ := bridgeServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "{}")
	}))
	in := &instance{v: &vat{id: "calc"}, sock: path}
	in.plog = newProxyLog(nil, "calc")
	in.proxy = proxyLogged("calc", nil, in.plog)
	rt := newMCPRoute(in, manifest.MCP{Transport: manifest.TransportStdio, Path: "/mcp"})
	defer rt.close()
	rec := httptest.NewRecorder()
	body := io.MultiReader(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"`), io.LimitReader(zeros{}, MaxMCPBody))
	req := httptest.NewRequest(http.MethodPost, "http://localhost/calc/mcp", body)
	req.ContentLength = -1
	req.Body = http.MaxBytesReader(rec, req.Body, MaxMCPBody)
	req = req.WithContext(context.WithValue(req.Context(), mcpCallKey{}, &mcpCall{vat: "calc"}))
	rt.proxy.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over %d bytes to a stdio vat = %d %s; want 413", MaxMCPBody, rec.Code, rec.Body)
	}
}
