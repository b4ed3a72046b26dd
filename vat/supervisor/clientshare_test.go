package supervisor

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/vat/words"
)

// servingVat adds vat id to s as serving, its app h on a unix socket.
func servingVat(t *testing.T, s *Supervisor, id string, h http.Handler) *instance {
	t.Helper()
	in := &instance{requests: make(chan struct{}, MaxVatRequests)}
	tr := unixTransport(appOnUnix(t, h))
	t.Cleanup(tr.CloseIdleConnections)
	in.proxy = newProxy(id, tr, s.log)
	s.mu.Lock()
	s.vats[id] = &vat{id: id, logs: newRing(1), word: words.Walled, run: in}
	s.mu.Unlock()
	return in
}

// TestOneClientCannotMakeAVatBusy: a client that opens MaxVatRequests
// requests to a vat whose app reads their bodies, and never sends them,
// held every slot of the vat for as long as it liked (no body timeout):
// everyone else got 503 "busy". One client holds at most
// MaxClientVatRequests of them.
func TestOneClientCannotMakeAVatBusy(t *testing.T) {
	s := &Supervisor{cfg: Config{Hosts: testHosts(t)}, log: slog.New(slog.DiscardHandler), vats: map[string]*vat{}}
	in := servingVat(t, s, "bob", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // as an MCP server reads a POST
		_, _ = io.WriteString(w, "got "+string(b))
	}))
	h := s.PublicHandler()

	var pipes []*io.PipeWriter
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for range MaxVatRequests {
		pr, pw := io.Pipe()
		pipes = append(pipes, pw)
		req := httptest.NewRequest("POST", "http://x/bob/", pr)
		req.ContentLength = 100
		req.RemoteAddr = "192.0.2.7:4000"
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code == http.StatusServiceUnavailable {
				mu.Lock()
				refused++
				mu.Unlock()
			}
		}()
	}
	defer func() {
		for _, pw := range pipes {
			_ = pw.CloseWithError(io.ErrUnexpectedEOF)
		}
		wg.Wait()
	}()
	// Wait until every one of them is either refused or in flight.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := refused
		mu.Unlock()
		if n+len(in.requests) == MaxVatRequests {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refused %d, in flight %d: not settled", n, len(in.requests))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := len(in.requests); got > MaxClientVatRequests {
		t.Errorf("one client holds %d of the vat's requests; want at most %d", got, MaxClientVatRequests)
	}

	req := httptest.NewRequest("POST", "http://x/bob/", strings.NewReader("hi"))
	req.RemoteAddr = "198.51.100.9:5000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "got hi" {
		t.Errorf("another client, while the first holds its requests open: %d %q; want 200 \"got hi\"", rec.Code, rec.Body.String())
	}
}
