//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// echoed is what tests/mcpecho's echo answers: the headers that reached
// it and the MCP variables of its environment.
type echoed struct {
	Headers http.Header       `json:"headers"`
	Env     map[string]string `json:"env"`
}

// mcpEcho calls echo on vat id with headers, and reads its answer.
func (s *stack) mcpEcho(id string, headers ...string) echoed {
	s.t.Helper()
	code, _, body := s.mcpPost(id, `{"jsonrpc":"2.0","id":7,"method":"echo"}`, headers...)
	var m struct{ Result echoed }
	if code != http.StatusOK || json.Unmarshal([]byte(body), &m) != nil || m.Result.Env == nil {
		s.t.Fatalf("echo on %s: %d %s", id, code, body)
	}
	return m.Result
}

// TestMCPHTTPVatOnItsPort (R47): an http MCP server that knows nothing of
// toybox and binds where ToolHive's variables say ($MCP_HOST:$MCP_PORT,
// or $PORT) is served at /<vat>/mcp unchanged: toybox sets
// MCP_TRANSPORT=streamable-http, MCP_HOST=127.0.0.1, MCP_PORT,
// FASTMCP_PORT and PORT to the port of its manifest's listen, which
// toybox-entry relays to. A manifest that declares one of them is refused.
func TestMCPHTTPVatOnItsPort(t *testing.T) {
	s := newStack(t, stackOpts{})
	for _, tt := range []struct{ vat, arg string }{{"echo-mcp", "mcp"}, {"echo-port", "port"}, {"echo-fastmcp", "fastmcp"}} {
		manifest := fmt.Sprintf(`{"command": ["./mcpecho", %q], "listen": {"port": 3001}, "mcp": {"transport": "http"}}`, tt.arg)
		body := mcpBundle(t, manifest, map[string]string{"mcpecho": example(t, "mcpecho")})
		if code, out := s.adminDo("PUT", "/"+tt.vat, bytes.NewReader(body)); code != http.StatusCreated {
			_, logs := s.adminDo("GET", "/"+tt.vat+"/logs", nil)
			t.Fatalf("PUT /%s = %d %s\n%s", tt.vat, code, out, logs)
		}
		code, h, out := s.mcpPost(tt.vat, mcpInit)
		if code != http.StatusOK || !strings.Contains(out, `"serverInfo":{"name":"mcpecho"`) || h.Get("Mcp-Session-Id") != "" {
			t.Fatalf("initialize on %s: %d %v %s; want mcpecho's answer, no session", tt.vat, code, h, out)
		}
		env := s.mcpEcho(tt.vat).Env
		want := map[string]string{"MCP_TRANSPORT": "streamable-http", "MCP_HOST": "127.0.0.1", "MCP_PORT": "3001", "FASTMCP_PORT": "3001", "PORT": "3001", "TOYBOX_LISTEN": ""}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s: $%s = %q; want %q", tt.vat, k, env[k], v)
			}
		}
	}
	manifest := `{"command": ["./mcpecho", "mcp"], "env": ["MCP_PORT"], "listen": {"port": 3001}, "mcp": {"transport": "http"}}`
	body := mcpBundle(t, manifest, map[string]string{"mcpecho": example(t, "mcpecho")})
	if code, out := s.adminDo("PUT", "/echo-env?env="+url.QueryEscape(`{"MCP_PORT":"4000"}`), bytes.NewReader(body)); code != http.StatusBadRequest || !strings.Contains(out, "env declares MCP_PORT, which toybox sets") {
		t.Errorf("a manifest declaring MCP_PORT: %d %s; want 400 naming it", code, out)
	}
}

// TestMCPHeadersIntoHTTPVat (R46, R47): what reaches an http vat is MCP's
// transport headers, toybox's own and the vat's declared extras; never a
// client's X-Evil, Cookie, Authorization or Toybox-*. The transport
// headers cross unchanged, statuses come back as the vat said them, and
// the edge neither mints nor asks for a session of a server that has none.
func TestMCPHeadersIntoHTTPVat(t *testing.T) {
	s := newStack(t, stackOpts{})
	manifest := `{"command": ["./mcpecho", "mcp"], "listen": {"port": 3001}, "mcp": {"transport": "http", "headers": ["X-Tenant"]}}`
	body := mcpBundle(t, manifest, map[string]string{"mcpecho": example(t, "mcpecho")})
	if code, out := s.adminDo("PUT", "/echo", bytes.NewReader(body)); code != http.StatusCreated {
		t.Fatalf("PUT /echo = %d %s", code, out)
	}
	got := s.mcpEcho("echo",
		"X-Evil", "evil-header", "Cookie", "session=secret-cookie", "Authorization", "Bearer secret-token",
		"Toybox-Principal", "token:forged", "Toybox-Principal-Env", "Zm9yZ2Vk", "X-Tenant", "acme",
		"Mcp-Protocol-Version", "2025-11-25", "Last-Event-ID", "ev-3", "Mcp-Method", "echo", "Mcp-Name", "n1",
		"Mcp-Param-Region", "eu-west", "Mcp-Param-Unknown-To-Toybox", "=?base64?eA==?=")
	dump, _ := json.Marshal(got.Headers)
	for _, leak := range []string{"evil", "secret-cookie", "secret-token", "forged", "Zm9yZ2Vk", `"Cookie"`, `"Authorization"`, `"X-Evil"`} {
		if bytes.Contains(dump, []byte(leak)) {
			t.Errorf("%s reached the vat: %s", leak, dump)
		}
	}
	for k, v := range map[string]string{
		"X-Tenant": "acme", "Mcp-Protocol-Version": "2025-11-25", "Last-Event-Id": "ev-3", "Mcp-Method": "echo", "Mcp-Name": "n1",
		"Mcp-Param-Region": "eu-west", "Mcp-Param-Unknown-To-Toybox": "=?base64?eA==?=", "Toybox-Principal": "client:local",
	} {
		if g := strings.Join(got.Headers[k], ","); g != v {
			t.Errorf("the vat got %s: %q; want %q (all: %s)", k, g, v, dump)
		}
	}
	// A modern request: the same, its Mcp-Session-Id ignored (2026-07-28).
	modern := s.mcpEcho("echo", "Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "echo", "Mcp-Session-Id", "made-up", "X-Tenant", "acme")
	if modern.Headers.Get("Mcp-Session-Id") != "" || modern.Headers.Get("Mcp-Protocol-Version") != "2026-07-28" || modern.Headers.Get("X-Tenant") != "acme" {
		t.Errorf("a modern request reached the vat with %v", modern.Headers)
	}

	// Statuses as the vat said them; none made up, no session asked for.
	for _, st := range []int{http.StatusNotFound, http.StatusBadRequest, http.StatusConflict, http.StatusTeapot} {
		code, _, out := s.mcpPost("echo", fmt.Sprintf(`{"jsonrpc":"2.0","id":8,"method":"test/status","params":{"status":%d}}`, st))
		if code != st || !strings.Contains(out, fmt.Sprintf("status %d as asked", st)) {
			t.Errorf("the vat answered %d: the client got %d %s", st, code, out)
		}
	}
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		req, _ := http.NewRequest(method, "http://"+s.http+"/echo/mcp", nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" || !strings.Contains(string(b), "keeps no stream") {
			t.Errorf("%s: %d Allow %q %s; want the vat's own 405", method, resp.StatusCode, resp.Header.Get("Allow"), b)
		}
	}
	// A session id the vat never minted is a session the edge does not
	// know: 404, and the client initializes again.
	if code, _, out := s.mcpPost("echo", `{"jsonrpc":"2.0","id":9,"method":"echo"}`, "Mcp-Session-Id", "never-minted", "Mcp-Protocol-Version", "2025-11-25"); code != http.StatusNotFound || !strings.Contains(out, "Session not found") {
		t.Errorf("an unknown session: %d %s; want 404", code, out)
	}
}

// TestMCPStreamsBothWays (R47): a request body reaches an http vat as it
// is sent, and the vat's events reach the client as they are written. The
// vat answers each read of the body with an event; the client waits for
// the event for its first part before it sends the rest. A proxy that held
// either direction back would never see that event.
func TestMCPStreamsBothWays(t *testing.T) {
	s := newStack(t, stackOpts{})
	manifest := `{"command": ["./mcpecho", "mcp"], "listen": {"port": 3001}, "mcp": {"transport": "http"}}`
	body := mcpBundle(t, manifest, map[string]string{"mcpecho": example(t, "mcpecho")})
	if code, out := s.adminDo("PUT", "/echo", bytes.NewReader(body)); code != http.StatusCreated {
		t.Fatalf("PUT /echo = %d %s", code, out)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.http+"/echo/mcp", pr)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Method", "test/upload")
	// The edge reads the first 16 KiB before it forwards (the method and
	// id are there): the first part is past it.
	first := bytes.Repeat([]byte{' '}, 40<<10)
	go func() { _, _ = pw.Write(first) }()
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		done <- result{resp, err}
	}()
	var resp *http.Response
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		resp = r.resp
	case <-time.After(20 * time.Second):
		t.Fatal("no answer's headers while the body is still open: the request was held back")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("upload: %d %v", resp.StatusCode, resp.Header)
	}
	events := make(chan string, 64)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- d
			}
		}
	}()
	waitGot := func(n int) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case e, ok := <-events:
				if !ok {
					t.Fatalf("the stream ended before the vat had %d bytes", n)
				}
				var m struct{ Got int }
				if json.Unmarshal([]byte(e), &m) == nil && m.Got == n {
					return
				}
			case <-deadline:
				t.Fatalf("no event saying the vat has %d bytes while the body is open: a direction was held back", n)
			}
		}
	}
	waitGot(len(first))
	rest := bytes.Repeat([]byte{' '}, 1000)
	if _, err := pw.Write(rest); err != nil {
		t.Fatal(err)
	}
	waitGot(len(first) + len(rest))
	_ = pw.Close()
	for e := range events {
		if strings.Contains(e, `"done"`) {
			if !strings.Contains(e, fmt.Sprintf(`"done":%d`, len(first)+len(rest))) {
				t.Errorf("the vat's last event %s; want all %d bytes", e, len(first)+len(rest))
			}
			return
		}
	}
	t.Error("the stream ended with no final event")
}

// TestMCPHeaderEnv (R46): a stdio vat's manifest maps X-Api-Key to
// API_KEY (mcp.headerEnv). Each client's value is set in its own
// processes alone: clients on one address (one principal, client:local)
// with different keys get different processes, one with no key the vat's
// own, and a client that takes another's session id with its own key
// finds no such session. examples/mcp-stdio's key tool says which API_KEY
// its process holds (a hash's start). A single-mode vat with a mapping is
// refused, saying why.
func TestMCPHeaderEnv(t *testing.T) {
	s := newStack(t, stackOpts{})
	manifest := `{"command": ["./mcp-stdio"], "env": ["API_KEY"], "mcp": {"transport": "stdio", "mode": "shared", "headerEnv": [{"header": "X-Api-Key", "env": "API_KEY"}]}}`
	body := mcpBundle(t, manifest, map[string]string{"mcp-stdio": example(t, "mcp-stdio")})
	if code, out := s.adminDo("PUT", "/keys?env="+url.QueryEscape(`{"API_KEY":"vat-key"}`), bytes.NewReader(body)); code != http.StatusCreated {
		t.Fatalf("PUT /keys = %d %s", code, out)
	}
	hash := func(k string) string {
		sum := sha256.Sum256([]byte(k))
		return hex.EncodeToString(sum[:6])
	}
	keys := map[string]string{"alice": "alice-key", "bob": "bob-key", "nobody": ""}
	want := map[string]string{"alice": hash("alice-key"), "bob": hash("bob-key"), "nobody": hash("vat-key")}
	sessions := map[string]string{}
	open := func(who string) []string {
		t.Helper()
		var h []string
		if keys[who] != "" {
			h = []string{"X-Api-Key", keys[who]}
		}
		code, hd, out := s.mcpPost("keys", mcpInit, h...)
		sid := hd.Get("Mcp-Session-Id")
		if code != http.StatusOK || sid == "" {
			t.Fatalf("%s's initialize: %d %q %s", who, code, sid, out)
		}
		sessions[who] = sid
		h = append(h, "Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25")
		if code, _, out := s.mcpPost("keys", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, h...); code != http.StatusAccepted {
			t.Fatalf("notifications/initialized: %d %s", code, out)
		}
		return h
	}
	const callKey = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"key","arguments":{}}}`
	for _, who := range []string{"alice", "bob", "nobody", "alice"} {
		h := open(who)
		code, _, got := s.mcpPost("keys", callKey, h...)
		if code != http.StatusOK {
			t.Fatalf("%s's tools/call key: %d %s", who, code, got)
		}
		for other, hs := range want {
			if has := strings.Contains(got, hs); has != (other == who) {
				t.Errorf("%s's process holds %s's key: %v; want %v (%s)", who, other, has, other == who, got)
			}
		}
	}
	// Bob with alice's session: another principal's session is none.
	code, _, out := s.mcpPost("keys", callKey, "X-Api-Key", "bob-key", "Mcp-Session-Id", sessions["alice"], "Mcp-Protocol-Version", "2025-11-25")
	if code != http.StatusNotFound || strings.Contains(out, want["alice"]) {
		t.Errorf("bob's key on alice's session: %d %s; want 404", code, out)
	}
	// A stateless request gets its own value's process too.
	modern := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"key","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	code, _, out = s.mcpPost("keys", modern, "X-Api-Key", "bob-key", "Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "key")
	if code != http.StatusOK || !strings.Contains(out, want["bob"]) || strings.Contains(out, want["alice"]) {
		t.Errorf("bob's stateless tools/call key: %d %s; want his key's %s", code, out, want["bob"])
	}
	// A forged Toybox-Principal-Env is dropped; the header's value wins.
	code, _, out = s.mcpPost("keys", modern, "X-Api-Key", "bob-key", "Toybox-Principal-Env", "eyJBUElfS0VZIjoiZm9yZ2VkIn0=", "Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "key")
	if code != http.StatusOK || !strings.Contains(out, want["bob"]) || strings.Contains(out, hash("forged")) {
		t.Errorf("with a forged Toybox-Principal-Env: %d %s; want bob's key", code, out)
	}
	// Two values of the header: which one is meant is not known.
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.http+"/keys/mcp", strings.NewReader(mcpInit))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Add("X-Api-Key", "alice-key")
	req.Header.Add("X-Api-Key", "bob-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "X-Api-Key is sent 2 times") {
		t.Errorf("X-Api-Key twice: %d %s; want 400", resp.StatusCode, b)
	}

	single := strings.Replace(manifest, `"shared"`, `"single"`, 1)
	body = mcpBundle(t, single, map[string]string{"mcp-stdio": example(t, "mcp-stdio")})
	if code, out := s.adminDo("PUT", "/single", bytes.NewReader(body)); code != http.StatusBadRequest || !strings.Contains(out, "one process serves every client") {
		t.Errorf("a single-mode vat with mcp.headerEnv: %d %s; want 400 saying why", code, out)
	}
}
