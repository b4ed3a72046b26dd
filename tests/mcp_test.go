//go:build linux

package tests

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"toybox/tests/testenv"
)

// mcpBundle is a tar of manifest.json and the named files.
func mcpBundle(t testing.TB, manifest string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, data []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	add("manifest.json", 0o644, []byte(manifest))
	for name, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		add(name, 0o755, b)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// installEverything installs the Go SDK's conformance everything-server at
// bin as HTTP MCP vat id: it listens only on TCP, so its manifest says
// listen, and toybox-entry relays $TOYBOX_LISTEN to its port.
func (s *stack) installEverything(id, bin string, args ...string) {
	s.t.Helper()
	argv := append([]string{"./everything-server", "-http=127.0.0.1:3000"}, args...)
	cmd, _ := json.Marshal(argv)
	manifest := fmt.Sprintf(`{"command": %s, "listen": {"port": 3000}, "mcp": {"transport": "http", "path": "/mcp"}}`, cmd)
	body := mcpBundle(s.t, manifest, map[string]string{"everything-server": bin})
	code, out := s.adminDo("PUT", "/"+id, bytes.NewReader(body))
	if code != http.StatusCreated {
		_, logs := s.adminDo("GET", "/"+id+"/logs", nil)
		s.t.Fatalf("PUT /%s = %d %s\n%s", id, code, out, logs)
	}
}

// conformanceLog keeps the suite's output where make test prints it (the
// test log keeps a passing test's lines only with -v).
func conformanceLog(t *testing.T, title, out string) {
	t.Helper()
	t.Logf("%s:\n%s", title, out)
	p := os.Getenv("TOYBOX_CONFORMANCE_LOG")
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "===== %s =====\n%s\n", title, out)
}

// TestMCPConformanceHTTPVat is the differential test of the MCP edge for an
// HTTP vat: the official conformance suite runs against the Go SDK's
// everything-server over its own HTTP transport, then against the same
// binary walled behind toybox's /<vat>/mcp, for each requirement set (its
// stateful mode for 2025-11-25, its stateless one for 2026-07-28, where it
// passes them). Every check that passes directly (the suite counts a
// warning as a pass) must pass through toybox.
func TestMCPConformanceHTTPVat(t *testing.T) {
	s := newStack(t, stackOpts{})
	bin := testenv.EverythingServer(t, testenv.EverythingDual)
	port := strings.TrimPrefix(s.http, "127.0.0.1:")
	for _, tt := range []struct {
		requirements, vat string
		args              []string
	}{
		{"2025-11-25", "everything-stateful", []string{"-stateless=false"}},
		{"2026-07-28", "everything-stateless", nil},
	} {
		t.Run(tt.requirements, func(t *testing.T) {
			s := s.in(t)
			s.installEverything(tt.vat, bin, tt.args...)
			direct := testenv.RunConformance(t, testenv.StartEverything(t, bin, tt.args...), tt.requirements)
			through := testenv.RunConformance(t, "http://localhost:"+port+"/"+tt.vat+"/mcp", tt.requirements)
			title := fmt.Sprintf("conformance %s %s@%s", tt.requirements, testenv.ConformanceVersion, testenv.EverythingDual)
			conformanceLog(t, title+", the server over its own HTTP", direct.Summary())
			conformanceLog(t, title+", through toybox /"+tt.vat+"/mcp", through.Output)
			if len(direct.Passed()) == 0 {
				t.Fatalf("the server passed no check directly: the comparison means nothing\n%s", direct.Output)
			}
			lost, warned := direct.Lost(through)
			if len(warned) > 0 {
				t.Logf("passed with a warning through toybox, cleanly directly: %s", strings.Join(warned, ", "))
			}
			if len(lost) > 0 {
				t.Errorf("%d checks pass against the server directly and not through toybox:\n  %s", len(lost), strings.Join(lost, "\n  "))
			}
			t.Logf("%d checks pass directly, %d through toybox", len(direct.Passed()), len(through.Passed()))
		})
	}
}

// mcpPost posts one JSON-RPC message to the public endpoint of vat id.
func (s *stack) mcpPost(id, body string, headers ...string) (int, http.Header, string) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.http+"/"+id+"/mcp", strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

const mcpInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// TestMCPTokensEndToEnd: the owner mints tokens on the admin socket; each
// opens its own walled vat only; a revoked one opens nothing; both facts
// hold after toybox restarts (only hashes are kept, in a 0600 file); a
// removed vat's tokens do not open a vat installed under its id later.
func TestMCPTokensEndToEnd(t *testing.T) {
	s := newStack(t, stackOpts{})
	for _, id := range []string{"alice", "bob"} {
		if code, body := s.install(id, example(t, "mcp-http"), "mcp=http"); code != http.StatusCreated {
			t.Fatalf("PUT /%s?mcp=http = %d %s", id, code, body)
		}
	}
	st := s.status("alice")
	mcpSt, _ := st["mcp"].(map[string]any)
	probe, _ := mcpSt["probe"].(map[string]any)
	if probe["era"] != "legacy" || probe["tool_count"] != float64(3) {
		t.Errorf("alice's MCP status = %v; want the probe's era and tools", mcpSt)
	}
	// docs/mcp.md's curl session: initialize, initialized, a tool call.
	code, h, body := s.mcpPost("alice", mcpInit)
	sid := h.Get("Mcp-Session-Id")
	if code != http.StatusOK || sid == "" || !strings.Contains(body, `"serverInfo":{"name":"toybox-example-mcp-http"`) {
		t.Fatalf("initialize on an open vat: %d %q %s", code, sid, body)
	}
	session := []string{"Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25"}
	if code, _, body := s.mcpPost("alice", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, session...); code != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s", code, body)
	}
	code, h, body = s.mcpPost("alice", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}`, session...)
	if code != http.StatusOK || !strings.Contains(body, `"structuredContent":{"sum":5}`) || h.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("tools/call add: %d %v %s; want the sum 5 on an event stream", code, h, body)
	}
	mint := func(id string) (string, string) {
		t.Helper()
		code, body := s.adminDo("POST", "/"+id+"/tokens", nil)
		var m struct{ Token, ID string }
		if code != http.StatusCreated || json.Unmarshal([]byte(body), &m) != nil || m.Token == "" {
			t.Fatalf("POST /%s/tokens = %d %s", id, code, body)
		}
		return m.Token, m.ID
	}
	keep, _ := mint("alice")
	gone, goneID := mint("alice")
	bobs, _ := mint("bob")
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	check := func(when string) {
		t.Helper()
		for _, c := range []struct {
			name, vat string
			headers   []string
			want      int
		}{
			{"no token", "alice", nil, http.StatusUnauthorized},
			{"alice's token", "alice", bearer(keep), http.StatusOK},
			{"alice's revoked token", "alice", bearer(gone), http.StatusUnauthorized},
			{"bob's token on alice", "alice", bearer(bobs), http.StatusUnauthorized},
			{"alice's token on bob", "bob", bearer(keep), http.StatusUnauthorized},
			{"bob's token", "bob", bearer(bobs), http.StatusOK},
		} {
			code, h, body := s.mcpPost(c.vat, mcpInit, c.headers...)
			if code != c.want {
				t.Errorf("%s: %s = %d %s; want %d", when, c.name, code, body, c.want)
			}
			if code == http.StatusUnauthorized && !strings.Contains(h.Get("WWW-Authenticate"), "resource_metadata=") {
				t.Errorf("%s: %s: WWW-Authenticate %q has no resource_metadata", when, c.name, h.Get("WWW-Authenticate"))
			}
		}
	}
	if code, body := s.adminDo("DELETE", "/alice/tokens/"+goneID, nil); code != http.StatusOK {
		t.Fatalf("DELETE /alice/tokens/%s = %d %s", goneID, code, body)
	}
	check("before a restart")
	raw, err := os.ReadFile(s.state + "/tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), keep[len(keep)-20:]) {
		t.Error("the tokens file holds a token")
	}
	s.stopToybox()
	s.startToybox()
	waitFor(t, "alice and bob serving again", 30e9, func() bool {
		a, _, _ := s.mcpPost("alice", mcpInit, bearer(keep)...)
		b, _, _ := s.mcpPost("bob", mcpInit, bearer(bobs)...)
		return a == http.StatusOK && b == http.StatusOK
	})
	check("after a restart")

	if code, body := s.adminDo("DELETE", "/alice", nil); code != http.StatusOK {
		t.Fatalf("DELETE /alice = %d %s", code, body)
	}
	if code, body := s.install("alice", example(t, "mcp-http"), "mcp=http"); code != http.StatusCreated {
		t.Fatalf("PUT /alice again = %d %s", code, body)
	}
	if code, body := s.adminDo("GET", "/alice/tokens", nil); code != http.StatusOK || strings.Contains(body, `"created"`) {
		t.Errorf("a vat installed again under a removed one's id lists %s; want no token", body)
	}
}

// TestMCPConformanceStdioVat is the differential test for a stdio vat: the
// same everything-server binaries, installed as single executables with
// ?mcp=stdio, served by the bridge inside their walls behind /<vat>/mcp,
// against the same binary over its own HTTP transport. v1.7.0 (both eras)
// for both requirement sets, v1.6.1 (2025 only) for 2025-11-25; the probe
// records them dual and legacy.
func TestMCPConformanceStdioVat(t *testing.T) {
	s := newStack(t, stackOpts{})
	port := strings.TrimPrefix(s.http, "127.0.0.1:")
	for _, tt := range []struct {
		requirements, version, vat, era string
		direct                          []string // the server's own HTTP mode to compare with
	}{
		{"2025-11-25", testenv.EverythingDual, "stdio-dual", "dual", []string{"-stateless=false"}},
		{"2026-07-28", testenv.EverythingDual, "stdio-dual", "dual", nil},
		{"2025-11-25", testenv.EverythingLegacy, "stdio-legacy", "legacy", nil},
	} {
		t.Run(tt.requirements+"-"+tt.version, func(t *testing.T) {
			s := s.in(t)
			bin := testenv.EverythingServer(t, tt.version)
			if code, _ := s.adminDo("GET", "/"+tt.vat, nil); code == http.StatusNotFound {
				if code, body := s.install(tt.vat, bin, "mcp=stdio"); code != http.StatusCreated {
					t.Fatalf("PUT /%s?mcp=stdio = %d %s", tt.vat, code, body)
				}
			}
			st := s.status(tt.vat)
			probe, _ := st["mcp"].(map[string]any)["probe"].(map[string]any)
			if probe["era"] != tt.era || probe["error"] != nil {
				t.Errorf("the probe of %s = %v; want era %s", tt.version, probe, tt.era)
			}
			direct := testenv.RunConformance(t, testenv.StartEverything(t, bin, tt.direct...), tt.requirements)
			through := testenv.RunConformance(t, "http://localhost:"+port+"/"+tt.vat+"/mcp", tt.requirements)
			title := fmt.Sprintf("conformance %s %s@%s", tt.requirements, testenv.ConformanceVersion, tt.version)
			conformanceLog(t, title+", the server over its own HTTP", direct.Summary())
			conformanceLog(t, title+", as a stdio vat through toybox /"+tt.vat+"/mcp", through.Output)
			lost, warned := direct.Lost(through)
			if len(warned) > 0 {
				t.Logf("passed with a warning through toybox, cleanly directly: %s", strings.Join(warned, ", "))
			}
			if len(lost) > 0 {
				t.Errorf("%d checks pass against the server directly and not through toybox:\n  %s", len(lost), strings.Join(lost, "\n  "))
			}
			t.Logf("%d checks pass directly, %d through toybox", len(direct.Passed()), len(through.Passed()))
		})
	}
	st := s.status("stdio-dual")
	if b, _ := st["mcp"].(map[string]any)["bridge"].(map[string]any); b == nil || b["processes"] == nil {
		t.Errorf("the stdio vat's status = %v; want the bridge's counters", st["mcp"])
	}
}

// TestMCPStdioExample: examples/mcp-stdio, a stdio server installed with
// ?mcp=stdio, answers a tool call through /<vat>/mcp in a legacy session,
// and a modern (2026-07-28) request with no session at all; each session
// has a process of its own, and the data folder is the vat's.
func TestMCPStdioExample(t *testing.T) {
	s := newStack(t, stackOpts{})
	if code, body := s.install("counter", example(t, "mcp-stdio"), "mcp=stdio"); code != http.StatusCreated {
		t.Fatalf("PUT /counter?mcp=stdio = %d %s", code, body)
	}
	count := func() string {
		t.Helper()
		code, h, body := s.mcpPost("counter", mcpInit)
		sid := h.Get("Mcp-Session-Id")
		if code != http.StatusOK || sid == "" || !strings.Contains(body, "toybox-example-mcp-stdio") {
			t.Fatalf("initialize: %d %q %s", code, sid, body)
		}
		session := []string{"Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25"}
		if code, _, body := s.mcpPost("counter", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, session...); code != http.StatusAccepted {
			t.Fatalf("notifications/initialized: %d %s", code, body)
		}
		code, _, body = s.mcpPost("counter", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"count","arguments":{}}}`, session...)
		if code != http.StatusOK {
			t.Fatalf("tools/call count: %d %s", code, body)
		}
		return body
	}
	if b := count(); !strings.Contains(b, `"structuredContent":{"count":1}`) {
		t.Errorf("the first session's count: %s; want 1", b)
	}
	if b := count(); !strings.Contains(b, `"structuredContent":{"count":2}`) {
		t.Errorf("a second session's count: %s; want 2 (the vat's data folder)", b)
	}
	modern := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	code, _, body := s.mcpPost("counter", modern, "Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "add")
	if code != http.StatusOK || !strings.Contains(body, `"sum":5`) {
		t.Errorf("a modern tools/call add: %d %s; want the sum 5", code, body)
	}
}

// TestMCPTokenSecrets (R22): a token minted with secrets has them set in
// its own processes alone, over the vat's value. examples/mcp-stdio's key
// tool says which API_KEY its process holds (a hash's start); alice's,
// bob's and an owner-less token's sessions, and alice's stateless
// requests, each see only their own.
func TestMCPTokenSecrets(t *testing.T) {
	s := newStack(t, stackOpts{})
	manifest := `{"command": ["./mcp-stdio"], "env": ["API_KEY"], "mcp": {"transport": "stdio"}}`
	body := mcpBundle(t, manifest, map[string]string{"mcp-stdio": example(t, "mcp-stdio")})
	if code, out := s.adminDo("PUT", "/keys?env="+url.QueryEscape(`{"API_KEY":"vat-key"}`), bytes.NewReader(body)); code != http.StatusCreated {
		t.Fatalf("PUT /keys = %d %s", code, out)
	}
	mint := func(body string) (int, map[string]any) {
		t.Helper()
		code, out := s.adminDo("POST", "/keys/tokens", strings.NewReader(body))
		var m map[string]any
		_ = json.Unmarshal([]byte(out), &m)
		return code, m
	}
	for _, bad := range []string{`{"env": {"OTHER": "x"}}`, `{"env": {"API_KEY": "x"}, "env": {}}`, `{"envs": {}}`, `[1]`} {
		if code, m := mint(bad); code != http.StatusBadRequest {
			t.Errorf("POST /keys/tokens %s = %d %v; want 400", bad, code, m)
		}
	}
	tokens := map[string]string{}
	for who, body := range map[string]string{"alice": `{"env": {"API_KEY": "alice-key"}}`, "bob": `{"env": {"API_KEY": "bob-key"}}`, "plain": ``} {
		code, m := mint(body)
		tok, _ := m["token"].(string)
		if code != http.StatusCreated || tok == "" {
			t.Fatalf("POST /keys/tokens %s = %d %v", body, code, m)
		}
		tokens[who] = tok
	}
	if _, out := s.adminDo("GET", "/keys/tokens", nil); strings.Contains(out, "alice-key") || strings.Count(out, `"API_KEY"`) != 2 {
		t.Errorf("GET /keys/tokens = %s; want the secrets' names, never their values", out)
	}
	hash := func(k string) string {
		sum := sha256.Sum256([]byte(k))
		return hex.EncodeToString(sum[:6])
	}
	want := map[string]string{"alice": hash("alice-key"), "bob": hash("bob-key"), "plain": hash("vat-key")}
	keyOf := func(auth []string, session ...string) string {
		t.Helper()
		code, _, out := s.mcpPost("keys", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"key","arguments":{}}}`, append(auth, session...)...)
		if code != http.StatusOK {
			t.Fatalf("tools/call key: %d %s", code, out)
		}
		return out
	}
	for who, tok := range tokens {
		auth := []string{"Authorization", "Bearer " + tok}
		code, h, out := s.mcpPost("keys", mcpInit, auth...)
		sid := h.Get("Mcp-Session-Id")
		if code != http.StatusOK || sid == "" {
			t.Fatalf("%s's initialize: %d %q %s", who, code, sid, out)
		}
		session := []string{"Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25"}
		if code, _, out := s.mcpPost("keys", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, append(auth, session...)...); code != http.StatusAccepted {
			t.Fatalf("notifications/initialized: %d %s", code, out)
		}
		got := keyOf(auth, session...)
		for other, h := range want {
			if has := strings.Contains(got, h); has != (other == who) {
				t.Errorf("%s's process holds %s's key: %v; want %v (%s)", who, other, has, other == who, got)
			}
		}
		if who != "alice" {
			continue
		}
		modern := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"key","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		code, _, out = s.mcpPost("keys", modern, append(auth, "Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "key")...)
		if code != http.StatusOK || !strings.Contains(out, want["alice"]) || strings.Contains(out, want["plain"]) {
			t.Errorf("alice's stateless tools/call key: %d %s; want her key's %s", code, out, want["alice"])
		}
	}
	// A client's own Toybox-Principal-Env is dropped at the edge: the
	// plain token's process keeps the vat's key.
	forged := []string{"Authorization", "Bearer " + tokens["plain"], "Toybox-Principal-Env", "eyJBUElfS0VZIjoiZm9yZ2VkIn0="}
	code, h, out := s.mcpPost("keys", mcpInit, forged...)
	if code != http.StatusOK {
		t.Fatalf("initialize with a forged Toybox-Principal-Env: %d %s", code, out)
	}
	session := []string{"Mcp-Session-Id", h.Get("Mcp-Session-Id"), "Mcp-Protocol-Version", "2025-11-25"}
	s.mcpPost("keys", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, append(forged, session...)...)
	if got := keyOf(forged, session...); !strings.Contains(got, want["plain"]) || strings.Contains(got, hash("forged")) {
		t.Errorf("with a forged Toybox-Principal-Env: %s; want the vat's key %s", got, want["plain"])
	}
}
