//go:build linux

package tests

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"toybox/tests/testenv"
	"toybox/vat/packages/npmtest"
)

// The real MCP servers TestRealPackages installs, pinned.
const (
	everythingSpec = "@modelcontextprotocol/server-everything@2025.11.25"
	memorySpec     = "@modelcontextprotocol/server-memory@2026.8.31"
	filesystemSpec = "@modelcontextprotocol/server-filesystem@2026.8.31"
	thinkingSpec   = "@modelcontextprotocol/server-sequential-thinking@2026.8.31"
)

// mcpSession is one Streamable HTTP session with a vat's /<vat>/mcp.
type mcpSession struct {
	s   *stack
	id  string
	sid string
	n   int
}

// openMCP initializes a session with vat id and sends
// notifications/initialized; it returns the session and the
// initialize result.
func openMCP(t *testing.T, s *stack, id string) (*mcpSession, map[string]any) {
	t.Helper()
	code, h, body := s.mcpPost(id, mcpInit)
	sid := h.Get("Mcp-Session-Id")
	if code != http.StatusOK || sid == "" {
		t.Fatalf("initialize through /%s/mcp: %d %q %s\nlog:\n%s", id, code, sid, body, tail(s.tbLog))
	}
	m := &mcpSession{s: s, id: id, sid: sid, n: 1}
	res := rpcResult(t, "initialize", body)
	if code, _, body := s.mcpPost(id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, m.headers()...); code != http.StatusAccepted {
		t.Fatalf("notifications/initialized through /%s/mcp: %d %s", id, code, body)
	}
	return m, res
}

func (m *mcpSession) headers() []string {
	return []string{"Mcp-Session-Id", m.sid, "Mcp-Protocol-Version", "2025-11-25"}
}

// call sends one request and returns its result; an error answer fails
// the test.
func (m *mcpSession) call(t *testing.T, method string, params any) map[string]any {
	t.Helper()
	m.n++
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.n, "method": method, "params": params})
	code, _, body := m.s.mcpPost(m.id, string(req), m.headers()...)
	if code != http.StatusOK {
		t.Fatalf("%s through /%s/mcp: %d %s", method, m.id, code, body)
	}
	return rpcResult(t, method, body)
}

// tool calls tool name and returns the text of its content; a result
// marked isError fails the test.
func (m *mcpSession) tool(t *testing.T, name string, args any) string {
	t.Helper()
	res := m.call(t, "tools/call", map[string]any{"name": name, "arguments": args})
	var text []string
	content, _ := res["content"].([]any)
	for _, c := range content {
		if c, _ := c.(map[string]any); c["type"] == "text" {
			text = append(text, fmt.Sprint(c["text"]))
		}
	}
	if res["isError"] == true {
		t.Fatalf("tools/call %s on %s: an error: %s", name, m.id, strings.Join(text, "\n"))
	}
	return strings.Join(text, "\n")
}

// rpcResult reads the JSON-RPC answer of a POST, JSON or an event
// stream, and returns its result.
func rpcResult(t *testing.T, method, body string) map[string]any {
	t.Helper()
	msg := body
	if strings.HasPrefix(strings.TrimSpace(body), "event:") || strings.HasPrefix(strings.TrimSpace(body), "data:") || strings.HasPrefix(strings.TrimSpace(body), "id:") {
		msg = ""
		for _, l := range strings.Split(body, "\n") {
			if d, ok := strings.CutPrefix(l, "data:"); ok && strings.Contains(d, `"id"`) {
				msg = d
			}
		}
	}
	var out struct {
		Result map[string]any `json:"result"`
		Error  any            `json:"error"`
	}
	if err := json.Unmarshal([]byte(msg), &out); err != nil || out.Error != nil || out.Result == nil {
		t.Fatalf("%s: no result in %q (%v)", method, body, err)
	}
	return out.Result
}

// toolNames lists the names of a tools/list result.
func toolNames(res map[string]any) []string {
	var names []string
	tools, _ := res["tools"].([]any)
	for _, tl := range tools {
		if tl, _ := tl.(map[string]any); tl != nil {
			names = append(names, fmt.Sprint(tl["name"]))
		}
	}
	return names
}

func hasName(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// TestRealPackages installs MCP servers as people have them, the real
// packages of the npm registry with their whole trees (mirrored into a
// loopback registry, tests/testenv MirrorNPM), as package vats through
// toybox serve with real walls and a real switchboard, and uses a tool of
// each through /<vat>/mcp.
func TestRealPackages(t *testing.T) {
	reg := npmtest.Start(t)
	published := map[[sha256.Size]byte]bool{} // the trees share most packages
	for _, spec := range []string{everythingSpec, memorySpec, filesystemSpec, thinkingSpec} {
		for _, tgz := range testenv.MirrorNPM(t, spec) {
			if sum := sha256.Sum256(tgz); !published[sum] {
				published[sum] = true
				reg.Publish(t, tgz)
			}
		}
	}
	s := newStack(t, stackOpts{extra: []string{"--npm-registry", reg.URL}})

	t.Run("everything", func(t *testing.T) {
		// The README's line.
		if code, out := toyboxCLI(t, "install", "--admin", s.admin, "everything", "npm:"+everythingSpec); code != 0 {
			t.Fatalf("toybox install everything npm:%s = %d %s\nlog:\n%s", everythingSpec, code, out, tail(s.tbLog))
		}
		m, init := openMCP(t, s, "everything")
		if info, _ := init["serverInfo"].(map[string]any); info["name"] == nil {
			t.Errorf("initialize: no serverInfo: %v", init)
		}
		if names := toolNames(m.call(t, "tools/list", map[string]any{})); !hasName(names, "echo") {
			t.Fatalf("tools/list: %v; want echo among them", names)
		}
		if got := m.tool(t, "echo", map[string]any{"message": "hello, vat"}); !strings.Contains(got, "hello, vat") {
			t.Errorf("tools/call echo = %q; want it to echo hello, vat", got)
		}
		if got := m.tool(t, "add", map[string]any{"a": 2, "b": 3}); got != "The sum of 2 and 3 is 5." {
			t.Errorf("tools/call add 2 3 = %q; want The sum of 2 and 3 is 5.", got)
		}
		// Progress notifications come on the call's own stream, before
		// its result.
		m.n++
		req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"longRunningOperation","arguments":{"duration":1,"steps":2},"_meta":{"progressToken":"p1"}}}`, m.n)
		code, _, body := s.mcpPost("everything", req, m.headers()...)
		if code != http.StatusOK || strings.Count(body, `"method":"notifications/progress"`) != 2 || !strings.Contains(body, "Long running operation completed") {
			t.Errorf("longRunningOperation with a progress token: %d %s; want two progress notifications and its result", code, body)
		}
	})

	t.Run("memory", func(t *testing.T) {
		// By default it writes beside its code, which is read-only.
		if code, st := s.installPackage("memory0", "npm:"+memorySpec, ""); code != http.StatusCreated {
			t.Fatalf("installing %s: %d %v\nlog:\n%s", memorySpec, code, st, tail(s.tbLog))
		}
		m0, _ := openMCP(t, s, "memory0")
		res := m0.call(t, "tools/call", map[string]any{"name": "create_entities", "arguments": map[string]any{"entities": []any{}}})
		if b, _ := json.Marshal(res); res["isError"] != true || !strings.Contains(string(b), "EROFS: read-only file system") {
			t.Errorf("create_entities with no MEMORY_FILE_PATH: %s; want EROFS", b)
		}

		env, _ := json.Marshal(map[string]string{"MEMORY_FILE_PATH": filepath.Join(s.state, "data", "memory", "memory.jsonl")})
		if code, st := s.installPackage("memory", "npm:"+memorySpec, "env="+url.QueryEscape(string(env))); code != http.StatusCreated {
			t.Fatalf("installing %s: %d %v\nlog:\n%s", memorySpec, code, st, tail(s.tbLog))
		}
		m, _ := openMCP(t, s, "memory")
		if names := toolNames(m.call(t, "tools/list", map[string]any{})); !hasName(names, "create_entities") || !hasName(names, "read_graph") {
			t.Fatalf("tools/list: %v; want create_entities and read_graph among them", names)
		}
		entities := map[string]any{"entities": []any{map[string]any{"name": "toybox", "entityType": "project", "observations": []any{"runs vats in walls"}}}}
		m.tool(t, "create_entities", entities)
		if got := m.tool(t, "read_graph", map[string]any{}); !strings.Contains(got, "runs vats in walls") {
			t.Fatalf("read_graph after create_entities = %q; want the entity", got)
		}
		if code, body := s.adminDo("POST", "/memory/restart", nil); code != http.StatusOK {
			t.Fatalf("POST /memory/restart = %d %s", code, body)
		}
		m, _ = openMCP(t, s, "memory")
		if got := m.tool(t, "read_graph", map[string]any{}); !strings.Contains(got, "runs vats in walls") {
			t.Errorf("read_graph after a restart = %q; want the entity stored before it", got)
		}
	})

	// The filesystem server serves the folders its arguments name: here
	// the vat's data folder, its path in the wall too.
	t.Run("filesystem", func(t *testing.T) {
		data := filepath.Join(s.state, "data", "files")
		line, _ := json.Marshal([]string{"npx", "-y", filesystemSpec, data})
		if code, st := s.installPackage("files", string(line), ""); code != http.StatusCreated {
			t.Fatalf("installing %s: %d %v\nlog:\n%s", line, code, st, tail(s.tbLog))
		}
		m, _ := openMCP(t, s, "files")
		if names := toolNames(m.call(t, "tools/list", map[string]any{})); !hasName(names, "write_file") || !hasName(names, "read_text_file") {
			t.Fatalf("tools/list: %v; want write_file and read_text_file among them", names)
		}
		note := filepath.Join(data, "note.txt")
		m.tool(t, "write_file", map[string]any{"path": note, "content": "kept in the data folder"})
		if code, body := s.adminDo("POST", "/files/restart", nil); code != http.StatusOK {
			t.Fatalf("POST /files/restart = %d %s", code, body)
		}
		m, _ = openMCP(t, s, "files")
		if got := m.tool(t, "read_text_file", map[string]any{"path": note}); got != "kept in the data folder" {
			t.Errorf("read_text_file after a restart = %q; want what write_file wrote", got)
		}
		res := m.call(t, "tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": "/etc/hostname"}})
		if res["isError"] != true {
			t.Errorf("read_text_file /etc/hostname, outside its folder: %v; want an error", res)
		}

		// A host folder is not in the wall: the server exits at start,
		// and the install's probe says so in the server's words.
		line, _ = json.Marshal([]string{"npx", "-y", filesystemSpec, t.TempDir()})
		code, st := s.installPackage("files2", string(line), "")
		m2, _ := st["mcp"].(map[string]any)
		probe, _ := m2["probe"].(map[string]any)
		if perr, _ := probe["error"].(string); code != http.StatusCreated || !strings.Contains(perr, "None of the specified directories are accessible") {
			t.Errorf("installing the filesystem server on a host folder: %d, probe %v; want 201 and a probe error in the server's words", code, probe)
		}
	})

	t.Run("sequential-thinking", func(t *testing.T) {
		if code, st := s.installPackage("think", "npm:"+thinkingSpec, ""); code != http.StatusCreated {
			t.Fatalf("installing %s: %d %v\nlog:\n%s", thinkingSpec, code, st, tail(s.tbLog))
		}
		m, _ := openMCP(t, s, "think")
		if names := toolNames(m.call(t, "tools/list", map[string]any{})); !hasName(names, "sequentialthinking") {
			t.Fatalf("tools/list: %v; want sequentialthinking", names)
		}
		got := m.tool(t, "sequentialthinking", map[string]any{"thought": "walls first", "thoughtNumber": 1, "totalThoughts": 1, "nextThoughtNeeded": false})
		if !strings.Contains(got, `"thoughtHistoryLength": 1`) {
			t.Errorf("tools/call sequentialthinking = %q; want a history of one thought", got)
		}
	})
}
