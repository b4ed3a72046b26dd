// Command door-backend is an example of an operator's door backend.
//
// It is the host service behind a door set (see docs/doors.md). It keeps a kiosk
// display state and counts browser restarts, and shows in every answer the
// request it saw, so a test can check what the supervisor forwarded.
//
//	door-backend -listen unix:/run/kiosk-doors.sock
//	door-backend -listen 127.0.0.1:8099
//
// Routes: GET and POST /kiosk/state, POST /browser/restart, GET /bulk/<n>
// (n bytes), GET /slow/<ms> (answers after ms milliseconds). Once listening it
// prints "ready <address>" on stdout.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type backend struct {
	mu       sync.Mutex
	state    string
	restarts int
}

// seen is the request as the backend received it.
type seen struct {
	Method     string              `json:"method"`
	RequestURI string              `json:"requestURI"`
	Host       string              `json:"host"`
	Vat        string              `json:"vat"`
	Headers    map[string][]string `json:"headers"`
	Body       string              `json:"body"`
}

type answer struct {
	State    string `json:"state"`
	Restarts int    `json:"restarts"`
	Request  seen   `json:"request"`
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10+1))
	if err != nil || len(body) > 64<<10 {
		http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	s := seen{Method: r.Method, RequestURI: r.RequestURI, Host: r.Host, Vat: r.Header.Get("X-Toybox-Vat"), Headers: r.Header, Body: string(body)}
	switch {
	case r.RequestURI == "/kiosk/state" && r.Method == http.MethodGet:
	case r.RequestURI == "/kiosk/state" && r.Method == http.MethodPost:
		b.mu.Lock()
		b.state = string(body)
		b.mu.Unlock()
	case r.RequestURI == "/browser/restart" && r.Method == http.MethodPost:
		b.mu.Lock()
		b.restarts++
		b.mu.Unlock()
	case strings.HasPrefix(r.RequestURI, "/bulk/") && r.Method == http.MethodGet:
		n, err := strconv.Atoi(strings.TrimPrefix(r.RequestURI, "/bulk/"))
		if err != nil || n < 0 || n > 16<<20 {
			http.Error(w, "bad size", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write([]byte(strings.Repeat("x", n)))
		return
	case strings.HasPrefix(r.RequestURI, "/slow/") && r.Method == http.MethodGet:
		ms, err := strconv.Atoi(strings.TrimPrefix(r.RequestURI, "/slow/"))
		if err != nil || ms < 0 || ms > 60000 {
			http.Error(w, "bad delay", http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	default:
		http.Error(w, fmt.Sprintf("no such door: %s %s", r.Method, r.RequestURI), http.StatusNotFound)
		return
	}
	b.mu.Lock()
	a := answer{State: b.state, Restarts: b.restarts, Request: s}
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Door-Backend", "example")
	_ = json.NewEncoder(w).Encode(a)
}

func listen(spec string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(spec, "unix:"); ok {
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(path) // a stale socket of an earlier run
		}
		old := syscall.Umask(0o177) // the socket is 0600: the operator's only
		defer syscall.Umask(old)
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", spec)
}

func main() {
	addr := flag.String("listen", "", "unix:/path.sock or 127.0.0.1:PORT")
	flag.Parse()
	if *addr == "" {
		log.Fatal("door-backend: -listen is required")
	}
	ln, err := listen(*addr)
	if err != nil {
		log.Fatalf("door-backend: listening on %s: %v", *addr, err)
	}
	srv := &http.Server{Handler: &backend{state: "idle"}, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Printf("ready %s\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("door-backend: %v", err)
	}
}
