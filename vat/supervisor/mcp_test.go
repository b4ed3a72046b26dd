package supervisor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/labels"
	"toybox/tests/testenv"
	"toybox/vat/store"
)

var (
	mcpExampleOnce sync.Once
	mcpExampleBin  string
	mcpExampleErr  error
)

// mcpExample is examples/mcp-http, built once: an MCP server of the Go SDK
// serving Streamable HTTP at /mcp on $TOYBOX_LISTEN.
func mcpExample(t *testing.T) string {
	t.Helper()
	mcpExampleOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tbx-mcpex-")
		if err != nil {
			mcpExampleErr = err
			return
		}
		_ = os.Chmod(dir, 0o755)
		mcpExampleBin = filepath.Join(dir, "mcp-http")
		out, err := exec.Command("go", "build", "-o", mcpExampleBin, "toybox/examples/mcp-http").CombinedOutput()
		if err != nil {
			mcpExampleErr = fmt.Errorf("go build examples/mcp-http: %w\n%s", err, out)
		}
	})
	if mcpExampleErr != nil {
		t.Fatal(mcpExampleErr)
	}
	return mcpExampleBin
}

// mcpSupervisor is an unwalled supervisor whose log the test reads, and
// whose crashed vats go off after one restart.
func mcpSupervisor(t *testing.T) (*Supervisor, *store.Store, *testenv.Buffer) {
	t.Helper()
	logs := &testenv.Buffer{}
	s, st, _ := unwalledWith(t, Config{
		StopGrace: time.Second, ReadyTimeout: 10 * time.Second,
		BackoffMin: 10 * time.Millisecond, MaxRestarts: 1, MCPOrigins: []string{"http://localhost:6274"},
		PublicURL: "https://mcp.example",
		Logger:    slog.New(slog.NewJSONHandler(logs, nil)),
	})
	return s, st, logs
}

// installMCP installs examples/mcp-http as vat id (?mcp=http).
func installMCP(t *testing.T, s *Supervisor, st *store.Store, id string) Status {
	t.Helper()
	stat, _, err := s.Install(InstallRequest{ID: labels.VatID(id), Code: storeFile(t, st, mcpExample(t)), MCP: "http", MCPSent: true})
	if err != nil {
		t.Fatal(err)
	}
	return stat
}

// mcpClient speaks to one endpoint through the public handler.
type mcpClient struct {
	t       *testing.T
	url     string
	headers map[string]string
	session string
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// post sends body and returns the answer, its status and the JSON-RPC
// message of its body (the last one of an event stream).
func (c *mcpClient) post(body string, extra ...string) (*http.Response, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Add(extra[i], extra[i+1])
	}
	if h := req.Header.Get("Host"); h != "" {
		req.Host = h
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, lastMessage(b)
}

func lastMessage(b []byte) map[string]any {
	var m map[string]any
	if json.Unmarshal(b, &m) == nil {
		return m
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var x map[string]any
			if json.Unmarshal([]byte(d), &x) == nil {
				m = x
			}
		}
	}
	return m
}

// initialize opens a legacy session.
func (c *mcpClient) initialize() {
	c.t.Helper()
	resp, m := c.post(initBody)
	if resp.StatusCode != http.StatusOK || m["result"] == nil {
		b, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("initialize = %d %s", resp.StatusCode, b)
	}
	c.session = resp.Header.Get("Mcp-Session-Id")
	if c.session == "" {
		c.t.Fatal("initialize answered no Mcp-Session-Id")
	}
	if resp, _ := c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		c.t.Fatalf("notifications/initialized = %d", resp.StatusCode)
	}
}

// call calls a tool and returns its result's text (or structured content).
func (c *mcpClient) call(tool string, args string) (int, string) {
	c.t.Helper()
	resp, m := c.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool, args))
	b, _ := json.Marshal(m["result"])
	if m["error"] != nil {
		b, _ = json.Marshal(m["error"])
	}
	return resp.StatusCode, string(b)
}

func errMessage(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

// TestMCPEdgeHostAndOrigin: the Host allowlist and the exact Origin check
// answer 403 before any vat work; the vat's own origin and a listed one
// pass.
func TestMCPEdgeHostAndOrigin(t *testing.T) {
	s, st, _ := mcpSupervisor(t)
	installMCP(t, s, st, "alice")
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	host := strings.TrimPrefix(front.URL, "http://")
	tests := []struct {
		name    string
		headers []string
		want    int
	}{
		{"plain", nil, http.StatusOK},
		{"same origin", []string{"Origin", "http://" + host}, http.StatusOK},
		{"listed origin", []string{"Origin", "http://localhost:6274"}, http.StatusOK},
		{"rebinding: a foreign Host", []string{"Host", "evil.test"}, http.StatusForbidden},
		{"rebinding, Origin to match", []string{"Host", "evil.test", "Origin", "http://evil.test"}, http.StatusForbidden},
		{"localhost on another port", []string{"Host", "localhost:1"}, http.StatusForbidden},
		{"a foreign Origin", []string{"Origin", "http://evil.example.com"}, http.StatusForbidden},
		{"two Origins", []string{"Origin", "http://" + host, "Origin", "http://" + host}, http.StatusForbidden},
		{"Origin null", []string{"Origin", "null"}, http.StatusForbidden},
		{"another site, no Origin", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &mcpClient{t: t, url: front.URL + "/alice/mcp"}
			resp, m := c.post(initBody, tt.headers...)
			if resp.StatusCode != tt.want {
				t.Fatalf("initialize with %v = %d %v; want %d", tt.headers, resp.StatusCode, m, tt.want)
			}
			// A foreign Host is the public handler's refusal (plain text),
			// before any vat is named; the MCP edge's own are JSON-RPC.
			if tt.want == http.StatusForbidden && !strings.HasPrefix(tt.name, "rebinding") && (m == nil || m["error"] == nil || m["id"] != nil) {
				t.Errorf("a 403 answered %v; want an id-less JSON-RPC error", m)
			}
		})
	}
	c := &mcpClient{t: t, url: front.URL + "/alice/mcp"}
	resp, _ := c.post(initBody, "Origin", "http://localhost:6274")
	if resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:6274" || !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Mcp-Session-Id") {
		t.Errorf("a listed origin's answer has CORS headers %v", resp.Header)
	}
	// A browser's preflight (R9): the listed origin gets MCP's methods and
	// headers, an Mcp-Param-* it asks for included; another gets 403.
	preflight := func(origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, front.URL+"/alice/mcp", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type, mcp-session-id, mcp-param-region, x-evil")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp = preflight("http://localhost:6274")
	allowed := resp.Header.Get("Access-Control-Allow-Headers")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:6274" ||
		!strings.Contains(allowed, "Mcp-Session-Id") || !strings.Contains(allowed, "mcp-param-region") || strings.Contains(allowed, "x-evil") {
		t.Errorf("preflight of a listed origin = %d %v", resp.StatusCode, resp.Header)
	}
	if resp = preflight("http://evil.example.com"); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight of another origin = %d %v; want 403 without CORS", resp.StatusCode, resp.Header)
	}
}

// TestMCPTokens: a vat with no token is open; once it holds one, every
// request needs it (401 with a challenge naming its metadata otherwise); a
// token of vat alice opens no other vat; a revoked token opens nothing,
// and a vat whose last token is revoked is open again.
func TestMCPTokens(t *testing.T) {
	s, st, _ := mcpSupervisor(t)
	installMCP(t, s, st, "alice")
	installMCP(t, s, st, "bob")
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	ep := func(id string) string { return front.URL + "/" + id + "/mcp" }
	status := func(id, token string) (int, *http.Response) {
		c := &mcpClient{t: t, url: ep(id)}
		var extra []string
		if token != "" {
			extra = []string{"Authorization", "Bearer " + token}
		}
		resp, _ := c.post(initBody, extra...)
		return resp.StatusCode, resp
	}
	if code, _ := status("alice", ""); code != http.StatusOK {
		t.Fatalf("an open vat answered %d", code)
	}
	aliceTok, aliceInfo, err := s.MintToken("alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	bobTok, _, err := s.MintToken("bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	code, resp := status("alice", "")
	if code != http.StatusUnauthorized {
		t.Fatalf("no token: %d; want 401", code)
	}
	wantMeta := fmt.Sprintf(`resource_metadata="%s/.well-known/oauth-protected-resource/alice/mcp"`, front.URL)
	if ch := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, "Bearer ") || !strings.Contains(ch, wantMeta) {
		t.Errorf("WWW-Authenticate = %q; want Bearer with %s", ch, wantMeta)
	}
	if code, _ := status("alice", aliceTok); code != http.StatusOK {
		t.Errorf("alice's token on alice: %d; want 200", code)
	}
	code, resp = status("bob", aliceTok)
	if code != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "/bob/mcp") {
		t.Errorf("alice's token on bob: %d %q; want 401 invalid_token with bob's metadata", code, resp.Header.Get("WWW-Authenticate"))
	}
	if code, _ := status("alice", bobTok); code != http.StatusUnauthorized {
		t.Errorf("bob's token on alice: %d; want 401", code)
	}
	second, _, err := s.MintToken("alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeToken("alice", aliceInfo.ID); err != nil {
		t.Fatal(err)
	}
	if code, _ := status("alice", aliceTok); code != http.StatusUnauthorized {
		t.Errorf("a revoked token: %d; want 401", code)
	}
	if code, _ := status("alice", second); code != http.StatusOK {
		t.Errorf("the token kept: %d; want 200", code)
	}
	if _, err := s.RevokeToken("alice", second); err != nil {
		t.Fatal(err)
	}
	if code, _ := status("alice", ""); code != http.StatusOK {
		t.Errorf("alice with no token left: %d; want 200 (open again)", code)
	}
	st2, _ := s.Status("alice")
	if st2.MCP == nil || st2.MCP.Tokens != 0 || !strings.HasPrefix(st2.MCP.Access, "open") {
		t.Errorf("status MCP = %+v; want 0 tokens, open", st2.MCP)
	}
}

// TestMCPNoCredentialsIntoVat: the client's Authorization (toybox's token)
// and cookies never reach the vat, nor any header but MCP's own; a forged
// Toybox-Principal is replaced by the edge's.
func TestMCPNoCredentialsIntoVat(t *testing.T) {
	s, st, _ := mcpSupervisor(t)
	installMCP(t, s, st, "alice")
	tok, info, err := s.MintToken("alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	c := &mcpClient{t: t, url: front.URL + "/alice/mcp", headers: map[string]string{
		"Authorization": "Bearer " + tok, "Cookie": "session=secret-cookie", "X-Evil": "evil-header",
		"Toybox-Principal": "token:forged", "Toybox-Vat": "bob", "X-Forwarded-For": "10.9.9.9", "Proxy-Authorization": "Basic c2VjcmV0",
	}}
	c.initialize()
	code, text := c.call("whoami", "{}")
	if code != http.StatusOK {
		t.Fatalf("whoami = %d %s", code, text)
	}
	if !strings.Contains(text, "principal: token:"+info.ID) {
		t.Errorf("the vat saw principal %q; want token:%s", text, info.ID)
	}
	for _, leak := range []string{tok, "secret-cookie", "evil-header", "forged", "Toybox-Vat", "10.9.9.9", "c2VjcmV0", "Cookie", "Authorization"} {
		if strings.Contains(text, leak) {
			t.Errorf("%q reached the vat:\n%s", leak, text)
		}
	}
}

// twoPrincipals installs the MCP example as alice, mints two of its
// tokens, and returns a client of the first with its session initialized,
// and the second token.
func twoPrincipals(t *testing.T) (*mcpClient, string) {
	t.Helper()
	s, st, _ := mcpSupervisor(t)
	installMCP(t, s, st, "alice")
	a, _, _ := s.MintToken("alice", nil)
	b, _, _ := s.MintToken("alice", nil)
	front := httptest.NewServer(s.PublicHandler())
	t.Cleanup(front.Close)
	ca := &mcpClient{t: t, url: front.URL + "/alice/mcp", headers: map[string]string{"Authorization": "Bearer " + a}}
	ca.initialize()
	return ca, b
}

// TestMCPSessionIsItsPrincipals: a session id one principal opened is, to
// another principal of the same vat, a session that does not exist (R6).
func TestMCPSessionIsItsPrincipals(t *testing.T) {
	ca, b := twoPrincipals(t)
	cb := &mcpClient{t: t, url: ca.url, headers: map[string]string{"Authorization": "Bearer " + b}, session: ca.session}
	resp, m := cb.post(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`)
	if resp.StatusCode != http.StatusNotFound || errMessage(m) != "Session not found" || m["id"] != float64(5) {
		t.Errorf("another principal with alice's session: %d %v; want 404 Session not found", resp.StatusCode, m)
	}
	if code, _ := ca.call("add", `{"a":1,"b":2}`); code != http.StatusOK {
		t.Errorf("the session's own principal: %d; want 200", code)
	}
	// A session id the vat never minted gets 404 too, without the vat.
	cb.session = "never-minted"
	if resp, _ := cb.post(`{"jsonrpc":"2.0","id":6,"method":"tools/list"}`); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown session: %d; want 404", resp.StatusCode)
	}
}

// TestMCPOneSessionID: a legacy request that names two sessions is
// refused. The edge checks one Mcp-Session-Id, and a vat that reads
// another (the last, or all joined) would serve a session whose owner the
// edge never checked: another principal's, named beside the caller's own
// or behind an empty first value.
func TestMCPOneSessionID(t *testing.T) {
	ca, b := twoPrincipals(t)
	cb := &mcpClient{t: t, url: ca.url, headers: map[string]string{"Authorization": "Bearer " + b}}
	cb.initialize()
	whoami := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`
	tests := []struct {
		name    string
		session string // the client's own, set first
		extra   []string
	}{
		{"its own, then another's", cb.session, []string{"Mcp-Session-Id", ca.session}},
		{"an empty one, then another's", "", []string{"Mcp-Session-Id", "", "Mcp-Session-Id", ca.session, "Mcp-Protocol-Version", "2025-11-25"}},
		{"its own twice", cb.session, []string{"Mcp-Session-Id", cb.session}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &mcpClient{t: t, url: cb.url, headers: cb.headers, session: tt.session}
			resp, m := c.post(whoami, tt.extra...)
			text, _ := json.Marshal(m)
			if strings.Contains(string(text), ca.session) {
				t.Errorf("another principal's session id reached the vat beside this one's:\n%s", text)
			}
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(errMessage(m), "Mcp-Session-Id") || m["id"] != float64(7) {
				t.Errorf("whoami with %v = %d %v; want 400 naming Mcp-Session-Id", tt.extra, resp.StatusCode, m)
			}
		})
	}
	if code, text := cb.call("whoami", "{}"); code != http.StatusOK || strings.Contains(text, ca.session) {
		t.Errorf("whoami with its own session = %d %s; want 200", code, text)
	}
}

// TestMCPNotReady: a vat that is starting, or off, is said so at once:
// 503, Retry-After, and a JSON-RPC error naming its status word. No
// handshake is held open.
func TestMCPNotReady(t *testing.T) {
	s, st, _ := mcpSupervisor(t)
	dir := t.TempDir()
	slow := filepath.Join(dir, "slow")
	// Listens after 3 s: exec's the example then.
	script := "#!/bin/sh\nsleep 3\nexec " + mcpExample(t) + "\n"
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := s.Install(InstallRequest{ID: "slow", Code: storeFile(t, st, slow), MCP: "http", MCPSent: true})
		done <- err
	}()
	c := &mcpClient{t: t, url: front.URL + "/slow/mcp"}
	waitFor(t, "the vat to be installing", func() bool { _, err := s.Status("slow"); return err == nil })
	start := time.Now()
	resp, m := c.post(initBody)
	took := time.Since(start)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("while starting: %d Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	data, _ := m["error"].(map[string]any)["data"].(map[string]any)
	if data["status"] != "starting" || !strings.Contains(errMessage(m), "starting") {
		t.Errorf("while starting: %v; want a JSON-RPC error naming its status word", m)
	}
	if took > 2*time.Second {
		t.Errorf("the 503 took %v: held, not said at once", took)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if resp, _ := c.post(initBody); resp.StatusCode != http.StatusOK {
		b, _ := s.Logs("slow")
		st, _ := s.Status("slow")
		t.Errorf("once it serves: %d; want 200 (%+v)\n%s", resp.StatusCode, st, b)
	}

	// Off: an app that exits at once is off after its one restart.
	dead := filepath.Join(dir, "dead")
	if err := os.WriteFile(dead, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Install(InstallRequest{ID: "dead", Code: storeFile(t, st, dead), MCP: "stdio", MCPSent: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the vat to be off", func() bool { st, _ := s.Status("dead"); return st.Word().Off() })
	c = &mcpClient{t: t, url: front.URL + "/dead/mcp"}
	resp, m = c.post(initBody)
	data, _ = m["error"].(map[string]any)["data"].(map[string]any)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || data["status"] != "off: it stopped" {
		t.Errorf("an off vat: %d %v; want 503 naming \"off: it stopped\"", resp.StatusCode, m)
	}
}

// waitFor waits up to 30 s for ok, and fails t naming what it waited for.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, func() error {
		if !ok() {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		return nil
	})
}

// TestMCPOnlyItsEndpoint: an MCP vat serves nothing but /<vat>/mcp: its
// own endpoint path (or any other) is not a way around the edge's checks.
func TestMCPOnlyItsEndpoint(t *testing.T) {
	s, st, _ := mcpSupervisor(t)
	installMCP(t, s, st, "alice")
	if _, _, err := s.MintToken("alice", nil); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	for _, p := range []string{"/alice/mcp/", "/alice/", "/alice", "/alice/other", "/alice/mcp/x"} {
		c := &mcpClient{t: t, url: front.URL + p}
		if resp, m := c.post(initBody); resp.StatusCode != http.StatusNotFound || !strings.Contains(errMessage(m), "/alice/mcp") {
			t.Errorf("POST %s = %d %v; want 404 naming the endpoint", p, resp.StatusCode, m)
		}
	}
}

// TestMCPStatusAndMetadata: GET /<vat> shows the probe's era, serverInfo
// and tools; the protected-resource metadata names the vat's own endpoint.
func TestMCPStatusAndMetadata(t *testing.T) {
	s, st, logs := mcpSupervisor(t)
	stat := installMCP(t, s, st, "alice")
	ms := stat.MCP
	if ms == nil || ms.Probe == nil {
		t.Fatalf("status MCP = %+v; want the probe's facts", ms)
	}
	p := ms.Probe
	if p.Era != "legacy" || p.ServerInfo == nil || p.ServerInfo.Name != "toybox-example-mcp-http" || p.ToolCount != 3 || strings.Join(p.Tools, ",") != "add,count,whoami" || p.Error != "" {
		t.Errorf("probe = %+v (%+v); want legacy, the example's name and its three tools", p, p.ServerInfo)
	}
	if ms.Endpoint != "/alice/mcp" || ms.Transport != "http" || ms.Auth != "toybox" || ms.Sessions != 0 {
		t.Errorf("status MCP = %+v", ms)
	}
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	resp, err := http.Get(front.URL + "/.well-known/oauth-protected-resource/alice/mcp")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var prm map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&prm); err != nil || prm["resource"] != front.URL+"/alice/mcp" {
		t.Errorf("PRM = %v, %v; want resource %s/alice/mcp", prm, err, front.URL)
	}
	if resp, _ := http.Get(front.URL + "/.well-known/oauth-protected-resource/nobody/mcp"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("PRM of no vat: %d; want 404", resp.StatusCode)
	}
	c := &mcpClient{t: t, url: front.URL + "/alice/mcp"}
	c.initialize()
	if got, _ := s.Status("alice"); got.MCP.Sessions != 1 {
		t.Errorf("sessions after one initialize = %d; want 1", got.MCP.Sessions)
	}
	// One record per decision, with its facts (written once the answer
	// is out: the client may read it first).
	waitFor(t, "the record of notifications/initialized", func() bool { return strings.Contains(logs.String(), `"method":"notifications/initialized"`) })
	var found bool
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "mcp" || rec["method"] != "notifications/initialized" {
			continue
		}
		found = rec["vat"] == "alice" && rec["era"] == "legacy" && rec["session"] == c.session && rec["result"] == float64(202) &&
			strings.HasPrefix(rec["principal"].(string), "client:") && rec["reason"] == "proxied"
		if !found {
			t.Errorf("record %v lacks the decision's facts", rec)
		}
	}
	if !found {
		t.Errorf("no mcp record for notifications/initialized in:\n%s", logs.String())
	}
}

// TestMCPOnItsOwnOrigin: the endpoint is also /mcp on the vat's own
// origin, http://<vat>.localhost:PORT/mcp, with its metadata there naming
// that URL; another vat's origin does not reach it.
func TestMCPOnItsOwnOrigin(t *testing.T) {
	s, st, _ := mcpSupervisor(t)
	installMCP(t, s, st, "alice")
	if _, _, err := s.MintToken("alice", nil); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	port := front.URL[strings.LastIndexByte(front.URL, ':')+1:]
	own := "alice.localhost:" + port
	c := &mcpClient{t: t, url: front.URL + "/mcp"}
	resp, _ := c.post(initBody, "Host", own)
	want := fmt.Sprintf(`resource_metadata="http://%s/.well-known/oauth-protected-resource/mcp"`, own)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), want) {
		t.Errorf("POST /mcp on alice's own origin = %d %q; want 401 naming %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), want)
	}
	req, _ := http.NewRequest(http.MethodGet, front.URL+"/.well-known/oauth-protected-resource/mcp", nil)
	req.Host = own
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	var prm map[string]any
	if err := json.NewDecoder(r2.Body).Decode(&prm); err != nil || prm["resource"] != "http://"+own+"/mcp" {
		t.Errorf("PRM on alice's own origin = %v, %v; want resource http://%s/mcp", prm, err, own)
	}
	if resp, _ := c.post(initBody, "Host", "bob.localhost:"+port); resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /mcp on bob's origin (no such vat) = %d; want 404", resp.StatusCode)
	}
}

// TestMCPEdgeLogger: the edge's decision records go to EdgeLogger when
// there is one (cmd/toybox writes them a few at a time), none to Logger.
func TestMCPEdgeLogger(t *testing.T) {
	logs, edge := &testenv.Buffer{}, &testenv.Buffer{}
	s, st, _ := unwalledWith(t, Config{
		StopGrace: time.Second, ReadyTimeout: 10 * time.Second,
		BackoffMin: 10 * time.Millisecond, MaxRestarts: 1,
		Logger:     slog.New(slog.NewJSONHandler(logs, nil)),
		EdgeLogger: slog.New(slog.NewJSONHandler(edge, nil)),
	})
	installMCP(t, s, st, "alice")
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	c := &mcpClient{t: t, url: front.URL + "/alice/mcp"}
	c.initialize()
	waitFor(t, "the edge's record of notifications/initialized", func() bool {
		return strings.Contains(edge.String(), `"msg":"mcp"`) && strings.Contains(edge.String(), `"method":"notifications/initialized"`)
	})
	if strings.Contains(logs.String(), `"msg":"mcp"`) {
		t.Errorf("an edge record on Logger, not EdgeLogger:\n%s", logs.String())
	}
}

// TestMCPBodyOverLimit: a POST whose Content-Length is over MaxMCPBody was
// read as far as the edge's 16 KiB peek and then passed on, for the
// limit to end it halfway: the client sent 32 MiB for nothing, or, with
// no body coming, waited for an answer that never came. It is 413 at once
// now, before any of its body is read. One whose length is not said
// (chunked) is still ended at the limit, with 413.
func TestMCPBodyOverLimit(t *testing.T) {
	s, st, _ := mcpSupervisor(t)
	installMCP(t, s, st, "alice")
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	c := &mcpClient{t: t, url: front.URL + "/alice/mcp"}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if resp, m := c.post(initBody); resp.StatusCode != http.StatusOK {
			return fmt.Errorf("initialize = %d %v", resp.StatusCode, m)
		}
		return nil
	})

	t.Run("declared", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /alice/mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n{\"jsonrpc\":\"2.0\",", strings.TrimPrefix(front.URL, "http://"), MaxMCPBody+1)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("a POST saying %d bytes: %v; want 413 at once", MaxMCPBody+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a POST saying %d bytes = %d %s; want 413", MaxMCPBody+1, resp.StatusCode, b)
		}
	})
	t.Run("chunked", func(t *testing.T) {
		body := io.MultiReader(strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"x":"`), io.LimitReader(zeros{}, MaxMCPBody))
		req, err := http.NewRequest(http.MethodPost, c.url, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a chunked POST over %d bytes = %d %s; want 413", MaxMCPBody, resp.StatusCode, b)
		}
	})
}

// zeros reads as an endless run of '0'.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// TestMCPRecordLimitersOfUnknownVats: each id a visitor named on the
// public socket got a limiter of MCP records of its own, and past 4096
// the map was cleared whole, so a visitor naming 4097 vats nobody
// installed gave every installed vat its burst of records again. Ids
// nobody installed now share one limiter; an installed vat keeps its own
// until it is removed.
func TestMCPRecordLimitersOfUnknownVats(t *testing.T) {
	s := newTestSupervisor(t)
	erin := &vat{id: "erin"}
	s.mu.Lock()
	s.vats[erin.id] = erin
	s.mu.Unlock()
	mine := s.mcpRecords("erin")
	for i := range 5000 {
		s.mcpRecords(fmt.Sprintf("nobody-%d", i))
	}
	if s.mcpRecords("erin") != mine {
		t.Error("the installed vat's limiter was made anew after 5000 unknown ids: its burst is back")
	}
	s.mu.Lock()
	n := len(s.mcpLogs)
	s.mu.Unlock()
	if n != 2 {
		t.Errorf("%d limiters after 5000 unknown ids; want 2 (the vat's, and the one the unknown share)", n)
	}
	s.forget(erin)
	s.mu.Lock()
	_, kept := s.mcpLogs["erin"]
	s.mu.Unlock()
	if kept {
		t.Error("a removed vat's limiter is kept")
	}
}
