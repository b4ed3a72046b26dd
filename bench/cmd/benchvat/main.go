// Command benchvat is the static Go vat the benchmarks install and spawn.
//
//	benchvat spawned   writes one byte on stdout and exits (the spawn figure)
//	benchvat           serves HTTP on $TOYBOX_LISTEN:
//	  GET /                                  "ok"
//	  GET /upload?target=HOST:PORT&bytes=N   one bulk upload through the wall's
//	                                         CONNECT proxy ($HTTP_PROXY); {"ns": N}
//	  GET /latency?target=HOST:PORT&n=N      N connects + 1-byte echoes through
//	                                         the proxy; {"ns": [...], "errors": [...]}
//	                                         (the times of those that worked, and
//	                                         why the others failed)
//
// With &direct=1 both dial the target itself, as a program that knows no
// proxy does (the wall's transparent egress answers its connect()).
//
// Failures answer 502 with {"error": "..."}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"toybox/bench/load"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "spawned" {
		_, _ = os.Stdout.Write([]byte{'!'})
		return
	}
	if err := serve(); err != nil {
		fmt.Fprintln(os.Stderr, "benchvat:", err)
		os.Exit(1)
	}
}

func serve() error {
	path := os.Getenv("TOYBOX_LISTEN")
	if path == "" {
		return errors.New("TOYBOX_LISTEN is not set")
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /upload", upload)
	mux.HandleFunc("GET /latency", latency)
	return http.Serve(l, mux)
}

// proxyAddr is the wall's CONNECT proxy, from the proxy variables.
func proxyAddr() (string, error) {
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		if v := os.Getenv(k); v != "" {
			if !strings.Contains(v, "://") {
				return v, nil
			}
			u, err := url.Parse(v)
			if err != nil {
				return "", fmt.Errorf("%s: %w", k, err)
			}
			return u.Host, nil
		}
	}
	return "", errors.New("no proxy variable is set: this vat has no way out")
}

func answer(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

func upload(w http.ResponseWriter, r *http.Request) {
	target := r.URL.Query().Get("target")
	n, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
	if err != nil || n <= 0 {
		answer(w, nil, fmt.Errorf("bytes must be a positive number: %q", r.URL.Query().Get("bytes")))
		return
	}
	direct := r.URL.Query().Get("direct") == "1"
	proxy, err := proxyAddr()
	if err != nil && !direct {
		answer(w, nil, err)
		return
	}
	t0 := time.Now()
	c, err := dial(r.Context(), direct, proxy, target)
	if err != nil {
		answer(w, nil, err)
		return
	}
	defer c.Close()
	if err := load.Upload(c, n); err != nil {
		answer(w, nil, err)
		return
	}
	answer(w, map[string]int64{"ns": time.Since(t0).Nanoseconds()}, nil)
}

func latency(w http.ResponseWriter, r *http.Request) {
	target := r.URL.Query().Get("target")
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil || n <= 0 || n > 100000 {
		answer(w, nil, fmt.Errorf("n must be 1..100000: %q", r.URL.Query().Get("n")))
		return
	}
	direct := r.URL.Query().Get("direct") == "1"
	proxy, err := proxyAddr()
	if err != nil && !direct {
		answer(w, nil, err)
		return
	}
	var res struct {
		NS     []int64  `json:"ns"`
		Dial   []int64  `json:"dial"` // of each in ns: until connected (and the proxy's answer read)
		Errors []string `json:"errors,omitempty"`
	}
	for i := range n {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		t0 := time.Now()
		dialed, err := once(ctx, direct, proxy, target)
		d := time.Since(t0)
		cancel()
		if err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("connect %d: %v", i+1, err))
			continue
		}
		res.NS = append(res.NS, d.Nanoseconds())
		res.Dial = append(res.Dial, dialed.Sub(t0).Nanoseconds())
	}
	answer(w, res, nil)
}

// once makes one connect and echo, and says when the connect was done.
func once(ctx context.Context, direct bool, proxy, target string) (time.Time, error) {
	c, err := dial(ctx, direct, proxy, target)
	if err != nil {
		return time.Time{}, err
	}
	dialed := time.Now()
	defer c.Close()
	return dialed, load.EchoOnce(c)
}

// dial connects to target through the proxy, or itself when direct.
func dial(ctx context.Context, direct bool, proxy, target string) (net.Conn, error) {
	if direct {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", target)
	}
	return load.DialConnect(ctx, proxy, target)
}
