package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"toybox/tests/testenv"

	"toybox/vat/manifest"
	"toybox/vat/mcp"
)

// TestSessionIDsAreBounded: an MCP vat names the sessions the edge keeps,
// up to maxSessions of them per instance. One that answered every request
// with a new id of 200 KiB (under maxVatHeaderBytes) made the edge keep
// 200 KiB a session: 1.6 GiB at the bound, from one vat. An id over
// maxSessionIDBytes, or with bytes MCP does not allow in one, is not
// kept: the client gets 502 naming why.
func TestSessionIDsAreBounded(t *testing.T) {
	var n atomic.Int64
	long := strings.Repeat("s", 200<<10)
	sock := appOnUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Mcp-Session-Id", fmt.Sprintf("%d-%s", n.Add(1), long))
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	}))
	in := &instance{v: &vat{id: "calc"}, sock: sock, transport: unixTransport(sock)}
	t.Cleanup(in.transport.CloseIdleConnections)
	in.plog = newProxyLog(nil, "calc")
	in.proxy = proxyLogged("calc", nil, in.plog)
	rt := newMCPRoute(in, manifest.MCP{Transport: manifest.TransportHTTP, Path: "/mcp"})
	defer rt.close()
	const requests = 64
	for i := range requests {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "http://localhost/calc/mcp", strings.NewReader(initBody))
		req = req.WithContext(context.WithValue(req.Context(), mcpCallKey{}, &mcpCall{vat: "calc", era: mcp.Legacy, principal: "open"}))
		rt.proxy.ServeHTTP(rec, req)
		if i == 0 && (rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "session id over")) {
			t.Errorf("an answer naming a session of %d bytes = %d %.200s; want 502 naming the session id", len(long), rec.Code, rec.Body)
		}
	}
	kept := 0
	rt.sessions.mu.Lock()
	for id := range rt.sessions.byID {
		kept += len(id)
	}
	rt.sessions.mu.Unlock()
	if kept > requests*maxSessionIDBytes {
		t.Fatalf("%d answers each naming a session of %d bytes: the edge keeps %d bytes of session ids; want at most %d", requests, len(long), kept, requests*maxSessionIDBytes)
	}
}

// TestMCPRecordsClipClientText: the edge's record of each call names the
// session and the method the client sent. A client's Mcp-Session-Id of
// 512 KiB was written whole in each record: within the records' rate
// (mcpLogRate), 10 MiB of log a second from one client.
func TestMCPRecordsClipClientText(t *testing.T) {
	edge := &testenv.Buffer{}
	s, st, _ := unwalledWith(t, Config{
		StopGrace: time.Second, ReadyTimeout: 10 * time.Second,
		BackoffMin: 10 * time.Millisecond, MaxRestarts: 1,
		EdgeLogger: slog.New(slog.NewJSONHandler(edge, nil)),
	})
	installMCP(t, s, st, "alice")
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	c := &mcpClient{t: t, url: front.URL + "/alice/mcp", session: strings.Repeat("s", 512<<10)}
	method := strings.Repeat("m", 8<<10)
	if resp, _ := c.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":%q}`, method)); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a call naming an unknown session = %d; want 404", resp.StatusCode)
	}
	waitFor(t, "the edge's record of the call", func() bool { return strings.Contains(edge.String(), `"msg":"mcp"`) })
	for _, l := range strings.Split(strings.TrimSpace(edge.String()), "\n") {
		if len(l) > 2<<10 {
			t.Errorf("an edge record of %d bytes: %.200s; want at most 2 KiB", len(l), l)
		}
	}
}
