package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
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
