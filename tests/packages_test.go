//go:build linux

package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"toybox/tests/testenv"
	"toybox/vat/packages"
	"toybox/vat/packages/npmtest"
)

// otherHost serves on 127.0.0.2 and counts the requests it gets: a host
// the prepare wall must never reach.
func otherHost(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		testenv.Unavailable(t, "no 127.0.0.2 here: "+err.Error())
	}
	var n atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		http.Error(w, "nothing here", http.StatusNotFound)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String(), &n
}

func (s *stack) installPackage(id, spec, extra string) (int, map[string]any) {
	s.t.Helper()
	q := "package=" + url.QueryEscape(spec)
	if extra != "" {
		q += "&" + extra
	}
	code, body := s.adminDo("PUT", "/"+id+"?"+q, nil)
	var out map[string]any
	_ = json.Unmarshal([]byte(body), &out)
	if out == nil {
		out = map[string]any{"error": body}
	}
	return code, out
}

// TestPackagesEndToEnd installs npm packages through toybox serve, with
// real walls, a real switchboard, and the real npm and node against a
// registry on loopback: the prepare wall reaches the registry and nothing
// else, every tarball is checked against the lock, no install script
// runs, the same spec gives the same code, and a changed file refuses
// the start.
func TestPackagesEndToEnd(t *testing.T) {
	outside, outsideHits := otherHost(t)
	reg := npmtest.Start(t)
	for _, f := range []string{"tb-greeting-1.0.0", "tb-greeting-1.1.0", "tb-mcp-hello", "tb-postinstall"} {
		reg.Publish(t, npmtest.Pack(t, npmtest.Fixture(f)))
	}
	reg.Publish(t, npmtest.PackWith(t, "tb-outside", "OUTSIDE_URL", outside+"/tb-elsewhere.tgz"))
	s := newStack(t, stackOpts{extra: []string{"--npm-registry", reg.URL}})

	// A range resolves once; the lock has every package with its
	// integrity; the code is stored by SHA-256 like any bundle.
	code, st := s.installPackage("hello", "npm:tb-mcp-hello@^1", "")
	if code != http.StatusCreated && code != http.StatusServiceUnavailable {
		t.Fatalf("installing tb-mcp-hello: %d %v\nlog:\n%s", code, st, tail(s.tbLog))
	}
	ref, _ := st["code"].(string)
	if !strings.HasPrefix(ref, "sha256:") {
		t.Fatalf("installed code %q", ref)
	}
	dir := filepath.Join(s.state, "code", strings.TrimPrefix(ref, "sha256:"))
	b, err := os.ReadFile(filepath.Join(dir, packages.LockPath))
	if err != nil {
		t.Fatal(err)
	}
	var lock packages.Lock
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatal(err)
	}
	if lock.Version != "1.0.0" || len(lock.Packages) != 2 {
		t.Errorf("lock: %s@%s with %d packages; want tb-mcp-hello@1.0.0 and its dependency", lock.Name, lock.Version, len(lock.Packages))
	}
	for _, p := range lock.Packages {
		if !strings.HasPrefix(p.Integrity, "sha512-") {
			t.Errorf("lock: %s has integrity %q", p.Path, p.Integrity)
		}
	}
	if err := packages.Verify(dir, strings.TrimPrefix(ref, "sha256:")); err != nil {
		t.Errorf("the stored tree does not verify: %v", err)
	}
	if !strings.Contains(s.tbLog.String(), `"step":"resolve"`) || !strings.Contains(s.tbLog.String(), `"step":"fetch"`) {
		t.Errorf("no prepare steps in the supervisor's log")
	}

	// An installed package is a stdio MCP vat. With no egress at all it
	// answers initialize through /<vat>/mcp, and its dependency loads
	// (node runs the bundle's tree, no package manager, no registry).
	// The install-time probe recorded its era, serverInfo and tools.
	checkPackageMCP(t, s, "hello", "hello, vat")
	before := reg.Requests()
	s.adminDo("POST", "/hello/restart", nil)
	checkPackageMCP(t, s, "hello", "hello, vat")
	if n := reg.Requests() - before; n != 0 {
		t.Errorf("a restart and a session made %d registry requests; want 0", n)
	}

	// The same spec again: the same code hash. It counts in the install
	// metrics as a bundle's install does.
	installs := func() string {
		_, m := s.adminDo("GET", "/metrics", nil)
		for _, l := range strings.Split(m, "\n") {
			if v, ok := strings.CutPrefix(l, `toybox_vat_install_duration_seconds_count{result="ok"} `); ok {
				return v
			}
		}
		return "0"
	}
	counted := installs()
	if _, st2 := s.installPackage("hello2", "npm:tb-mcp-hello@^1", ""); st2["code"] != ref {
		t.Errorf("a second install of the same spec gave code %v; want %s", st2["code"], ref)
	}
	if n := installs(); n == counted {
		t.Errorf("/metrics counted %s serving installs before a package install and %s after; want one more", counted, n)
	}

	// toybox install, with a pasted launcher line: the same code again.
	// (TestImportAndUndo installs one with an env value.)
	code, out := toyboxCLI(t, "install", "--admin", s.admin, "hello3", "--", "npx", "-y", "tb-mcp-hello@^1")
	if code != 0 || !strings.Contains(out, ref) {
		t.Errorf("toybox install hello3 -- npx -y tb-mcp-hello@^1 = %d %q; want code %s", code, out, ref)
	}
	if code, out := toyboxCLI(t, "install", "--admin", s.admin, "hello4", "--", "npx", "--registry", "http://elsewhere", "tb-mcp-hello"); code != 1 || !strings.Contains(out, `npx option "--registry" is refused`) {
		t.Errorf("toybox install -- npx --registry ... = %d %q; want the option refused", code, out)
	}

	// A tarball that does not match its integrity: refused, nothing kept.
	// (A valid tarball of other code, served under 1.1.0's name.)
	reg.Tamper("tb-greeting", "1.1.0", npmtest.Pack(t, npmtest.Fixture("tb-greeting-1.0.0")))
	code, st = s.installPackage("tampered", "npm:tb-mcp-hello@1.0.0", "")
	if code != http.StatusBadRequest || !strings.Contains(st["error"].(string), "integrity") {
		t.Errorf("a tampered tarball: %d %v; want 400 naming the integrity", code, st)
	}
	if c, _ := s.adminDo("GET", "/tampered", nil); c != http.StatusNotFound {
		t.Errorf("after a refused install GET /tampered = %d; want 404", c)
	}

	// A postinstall script: refused with a fixed reason; it never ran.
	code, st = s.installPackage("scripted", "npm:tb-postinstall", "")
	if code != http.StatusBadRequest || !strings.Contains(st["error"].(string), "needs an install script") {
		t.Errorf("a package with a postinstall: %d %v; want 400 needs an install script", code, st)
	}
	_ = filepath.Walk(s.dir, func(p string, _ os.FileInfo, _ error) error {
		if filepath.Base(p) == "postinstall-ran" {
			t.Errorf("the postinstall ran: %s", p)
		}
		return nil
	})

	// A dependency on another host: the prepare wall cannot reach it,
	// and the refusal is logged.
	code, st = s.installPackage("outside", "npm:tb-outside@1.0.0", "")
	if code != http.StatusBadRequest || !strings.Contains(st["error"].(string), packages.ReasonPrepare) {
		t.Errorf("a dependency on another host: %d %v; want 400 %q", code, st, packages.ReasonPrepare)
	}
	if n := outsideHits.Load(); n != 0 {
		t.Errorf("the other host got %d requests from the prepare wall; want 0", n)
	}
	// The wall's proxy answered the refusal of the vat's grant (a 403);
	// npm's report of it is in the supervisor's log.
	if logs := s.tbLog.String(); !strings.Contains(logs, `403 Forbidden - GET `+outside+`/tb-elsewhere.tgz`) {
		t.Errorf("no logged refusal of %s in the supervisor's log:\n%s", outside, tail(s.tbLog))
	}
	// npm's own words stay in the supervisor's log; the answer is fixed.
	if strings.Contains(st["error"].(string), "npm ") || strings.Contains(st["error"].(string), "ERR") {
		t.Errorf("the answer carries npm's output: %v", st["error"])
	}
	if n := strings.Count(st["error"].(string), packages.ReasonPrepare); n != 1 {
		t.Errorf("the answer gives its reason %d times; want once: %v", n, st["error"])
	}

	// A flipped byte in node_modules: the next start is refused.
	f := filepath.Join(dir, "node_modules", "tb-greeting", "index.js")
	b, err = os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if err := os.WriteFile(f, b, 0o640); err != nil {
		t.Fatal(err)
	}
	s.adminDo("POST", "/hello/restart", nil)
	st = s.status("hello")
	if st["status"] != "off: its installed files changed" || st["status_es"] != "apagado: sus archivos instalados cambiaron" || !strings.Contains(st["last_error"].(string), "node_modules/tb-greeting/index.js") {
		t.Errorf("after a flipped byte: %v %v %v; want off: its installed files changed naming the file", st["status"], st["status_es"], st["last_error"])
	}
}

// checkPackageMCP checks that package vat id is a stdio MCP server with no
// egress whose probe was recorded, and that a session reaches its tool.
func checkPackageMCP(t *testing.T, s *stack, id, greeting string) {
	t.Helper()
	st := s.status(id)
	if g, _ := st["grant"].([]any); len(g) != 0 {
		t.Errorf("%s's grant: %v; want none", id, st["grant"])
	}
	m, _ := st["mcp"].(map[string]any)
	if m == nil || m["transport"] != "stdio" {
		t.Fatalf("%s's status has no stdio mcp: %v", id, st)
	}
	probe, _ := m["probe"].(map[string]any)
	info, _ := probe["server_info"].(map[string]any)
	tools, _ := probe["tools"].([]any)
	if probe["era"] != "legacy" || info["name"] != "tb-mcp-hello" || len(tools) != 1 || tools[0] != "greet" {
		t.Errorf("%s's probe: %v; want era legacy, server_info tb-mcp-hello, tools [greet]", id, probe)
	}
	code, h, body := s.mcpPost(id, mcpInit)
	sid := h.Get("Mcp-Session-Id")
	if code != http.StatusOK || sid == "" || !strings.Contains(body, `"serverInfo":{"name":"tb-mcp-hello"`) {
		t.Fatalf("initialize through /%s/mcp: %d %q %s", id, code, sid, body)
	}
	session := []string{"Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25"}
	if code, _, body := s.mcpPost(id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, session...); code != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s", code, body)
	}
	code, _, body = s.mcpPost(id, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"greet","arguments":{"name":"vat"}}}`, session...)
	if code != http.StatusOK || !strings.Contains(body, `"text":"`+greeting+`"`) {
		t.Errorf("tools/call greet: %d %s; want %q", code, body, greeting)
	}
}

// notesServer is a checkout's MCP server: a stdio server whose tool reads
// the file named by its first argument and counts its calls in a file
// beside it.
const notesServer = `'use strict';
const fs = require('fs');
const readline = require('readline');
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id === undefined) return;
  switch (m.method) {
    case 'initialize':
      return send({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: '2025-11-25', capabilities: { tools: {} }, serverInfo: { name: 'notes', version: '0.1.0' } } });
    case 'tools/list':
      return send({ jsonrpc: '2.0', id: m.id, result: { tools: [{ name: 'notes', inputSchema: { type: 'object' } }] } });
    case 'tools/call': {
      const calls = require('path').join(require('path').dirname(process.argv[2]), 'calls');
      let n = 1;
      try { n += Number(fs.readFileSync(calls, 'utf8')); } catch {}
      fs.writeFileSync(calls, String(n));
      return send({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: fs.readFileSync(process.argv[2], 'utf8') + ' from ' + process.argv[2] + ', call ' + n }] } });
    }
  }
  send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'Method not found' } });
});
`

// toyboxCLI runs the built toybox with args and returns its exit code and
// output.
func toyboxCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bins, "toybox"), args...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// TestImportAndUndo imports a Claude Desktop config of three servers (an
// npx line, a program in a checkout folder, and a package the registry
// does not have, which fails midway), rewrites it to the vats' endpoints,
// then undoes it twice.
func TestImportAndUndo(t *testing.T) {
	reg := npmtest.Start(t)
	for _, f := range []string{"tb-greeting-1.0.0", "tb-mcp-hello"} {
		reg.Publish(t, npmtest.Pack(t, npmtest.Fixture(f)))
	}
	s := newStack(t, stackOpts{extra: []string{"--npm-registry", reg.URL}})

	checkout := t.TempDir()
	for name, body := range map[string]string{
		"package.json":                  `{"name":"notes","version":"0.1.0"}`,
		"server.js":                     notesServer,
		"notes.txt":                     "remember the milk",
		".git/HEAD":                     "ref: refs/heads/main\n",
		"node_modules/junk/index.js":    "module.exports = 1;\n",
		"lib/__pycache__/x.cpython.pyc": "junk",
		"lib/util.js":                   "module.exports = 2;\n",
	} {
		p := filepath.Join(checkout, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	entries := map[string]string{
		"hello":       `{"command":"npx","args":["-y","tb-mcp-hello@1.0.0"],"env":{"HELLO_KEY":"k1"}}`,
		"Local Notes": fmt.Sprintf(`{"command":"node","args":[%q,%q]}`, filepath.Join(checkout, "server.js"), filepath.Join(checkout, "notes.txt")),
		"broken":      `{"command":"npx","args":["-y","tb-missing@1.0.0"]}`,
	}
	cfgPath := filepath.Join(t.TempDir(), "claude_desktop_config.json")
	cfg := `{"globalShortcut":"Ctrl+Space","mcpServers":{` +
		`"hello":` + entries["hello"] + `,"Local Notes":` + entries["Local Notes"] + `,"broken":` + entries["broken"] + `}}`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	backups := filepath.Join(s.dir, "backups")
	readCfg := func() map[string]any {
		t.Helper()
		b, err := os.ReadFile(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("the config after import: %v\n%s", err, b)
		}
		return m
	}
	asJSON := func(s string) any {
		var v any
		_ = json.Unmarshal([]byte(s), &v)
		return v
	}

	code, out := toyboxCLI(t, "import", "--admin", s.admin, "--state", s.state, "--backups", backups, "--rewrite", "http://"+s.http, cfgPath)
	if code != 1 || !strings.Contains(out, "broken: left as it was") {
		t.Fatalf("toybox import = %d; want 1 naming broken as left as it was:\n%s", code, out)
	}

	// The npx line: a package vat with the owner's env value.
	st := s.status("hello")
	if env, _ := st["env"].([]any); len(env) != 1 || env[0] != "HELLO_KEY" {
		t.Errorf("hello's env keys: %v; want [HELLO_KEY]", st["env"])
	}
	checkPackageMCP(t, s, "hello", "hello (1.0.0), vat")

	// The checkout: copied without .git, node_modules, __pycache__; its
	// data file copied into the data folder, which the server reads.
	st = s.status("local-notes")
	dir := filepath.Join(s.state, "code", strings.TrimPrefix(st["code"].(string), "sha256:"))
	for _, gone := range []string{".git", "node_modules", "lib/__pycache__"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); err == nil {
			t.Errorf("the checkout's copy has %s", gone)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "lib", "util.js")); err != nil {
		t.Errorf("the checkout's copy lacks lib/util.js: %v", err)
	}
	if err := packages.Verify(dir, strings.TrimPrefix(st["code"].(string), "sha256:")); err != nil {
		t.Errorf("the checkout's bundle does not verify: %v", err)
	}
	dataCopy := filepath.Join(s.state, "data", "local-notes", "notes.txt")
	notes := func(call int) {
		t.Helper()
		code, h, body := s.mcpPost("local-notes", mcpInit)
		session := []string{"Mcp-Session-Id", h.Get("Mcp-Session-Id"), "Mcp-Protocol-Version", "2025-11-25"}
		if code != http.StatusOK {
			t.Fatalf("initialize local-notes: %d %s", code, body)
		}
		s.mcpPost("local-notes", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, session...)
		code, _, body = s.mcpPost("local-notes", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"notes","arguments":{}}}`, session...)
		if want := fmt.Sprintf("remember the milk from %s, call %d", dataCopy, call); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("local-notes tools/call: %d %s; want %q", code, body, want)
		}
	}
	notes(1)

	// The one that failed midway: no vat, its entry as it was, no backup.
	if c, _ := s.adminDo("GET", "/broken", nil); c != http.StatusNotFound {
		t.Errorf("GET /broken = %d; want 404", c)
	}
	m := readCfg()
	servers := m["mcpServers"].(map[string]any)
	if !reflect.DeepEqual(servers["broken"], asJSON(entries["broken"])) || m["globalShortcut"] != "Ctrl+Space" {
		t.Errorf("broken's entry or the other settings changed: %v", m)
	}
	// Claude Desktop launches stdio servers alone: each entry is toybox
	// stdio, from the file that ran the import, and works as the client
	// would launch it.
	self, err := filepath.EvalSymlinks(filepath.Join(bins, "toybox"))
	if err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{"hello": "hello", "Local Notes": "local-notes"} {
		want := map[string]any{"command": self, "args": []any{"stdio", "http://" + s.http + "/" + id + "/mcp"}}
		if !reflect.DeepEqual(servers[name], any(want)) {
			t.Errorf("%s's entry after import: %v; want %v", name, servers[name], want)
		}
	}
	if e, _ := servers["hello"].(map[string]any); e != nil {
		args, _ := e["args"].([]any)
		cmd := exec.Command(e["command"].(string), fmt.Sprint(args[0]), fmt.Sprint(args[1]))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "claude-desktop-like", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Errorf("launching hello's rewritten entry as a stdio client does: %v", err)
		} else {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "desktop"}})
			if err != nil || res.IsError || len(res.Content) == 0 {
				t.Errorf("greet through hello's rewritten entry: %v %+v", err, res)
			} else if tc, _ := res.Content[0].(*sdk.TextContent); tc == nil || !strings.Contains(tc.Text, "desktop") {
				t.Errorf("greet through hello's rewritten entry = %+v; want it to greet desktop", res.Content[0])
			}
			cs.Close()
		}
		cancel()
	}
	fi, err := os.Stat(backups)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the backup folder: %v %v; want 0700", fi, err)
	}
	ents, _ := os.ReadDir(backups)
	live := 0
	for _, e := range ents {
		fi, _ := e.Info()
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("backup %s has mode %v; want 0600", e.Name(), fi.Mode().Perm())
		}
		if strings.Contains(e.Name(), "broken") {
			t.Errorf("a backup of broken is kept: %s", e.Name())
		}
		if !strings.Contains(e.Name(), "-config-") {
			live++
		}
	}
	if live != 2 {
		t.Errorf("%d server backups; want 2 (%v)", live, ents)
	}

	// Undo: every entry as it was, the vats out of service, nothing
	// deleted (the data copy, the checkout and the backups stay).
	code, out = toyboxCLI(t, "import", "--admin", s.admin, "--backups", backups, "--undo")
	if code != 0 || !strings.Contains(out, "hello\trestored") || !strings.Contains(out, "Local Notes\trestored") {
		t.Fatalf("toybox import --undo = %d:\n%s", code, out)
	}
	servers = readCfg()["mcpServers"].(map[string]any)
	for name, e := range entries {
		if !reflect.DeepEqual(servers[name], asJSON(e)) {
			t.Errorf("%s after undo: %v; want %s", name, servers[name], e)
		}
	}
	for _, id := range []string{"hello", "local-notes"} {
		if c, _ := s.adminDo("GET", "/"+id, nil); c != http.StatusNotFound {
			t.Errorf("GET /%s after undo = %d; want 404", id, c)
		}
	}
	if _, err := os.Stat(filepath.Join(checkout, ".git", "HEAD")); err != nil {
		t.Errorf("the checkout changed: %v", err)
	}
	if after, _ := os.ReadDir(backups); len(after) != len(ents) {
		t.Errorf("undo left %d backup files of %d", len(after), len(ents))
	}
	code, out = toyboxCLI(t, "import", "--admin", s.admin, "--backups", backups, "--undo")
	if code != 0 || !strings.Contains(out, "nothing to undo") {
		t.Errorf("a second undo = %d %q; want nothing to undo", code, out)
	}

	// Nothing was deleted: imported again, the checkout's vat comes back
	// with its data folder as it was (the copy kept, the count at 1).
	code, out = toyboxCLI(t, "import", "--admin", s.admin, "--state", s.state, "--backups", backups, cfgPath)
	if code != 1 || !strings.Contains(out, "Local Notes\timported as vat local-notes") {
		t.Fatalf("toybox import again = %d:\n%s", code, out)
	}
	notes(2)
}

// TestInstallShowsAPackagesTextEscaped: a hostile registry serves, as
// tb-greeting, a tarball whose package.json names itself with an OSC 52
// clipboard write, "erase line", a carriage return and a bidi override.
// The refusal quotes that name: toybox install prints it escaped, and
// the supervisor's journal writes it escaped.
func TestInstallShowsAPackagesTextEscaped(t *testing.T) {
	reg := npmtest.Start(t)
	evil := `tb-greeting\u001b]52;c;ZWNobyBwd25lZA==\u0007\u001b[2K\rhello3  walled\u202e`
	reg.PublishAs(t, "tb-greeting", npmtest.PackWith(t, "tb-greeting-1.0.0", `"name": "tb-greeting"`, `"name": "`+evil+`"`))
	s := newStack(t, stackOpts{extra: []string{"--npm-registry", reg.URL}})
	code, out := toyboxCLI(t, "install", "--admin", s.admin, "greeting", "npm:tb-greeting")
	if code != 1 || !strings.Contains(out, "has no bin to start") {
		t.Fatalf("toybox install greeting npm:tb-greeting = %d %q; want 1 and its refusal", code, out)
	}
	if i := strings.IndexFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' || r == '\u202e' }); i >= 0 {
		t.Errorf("toybox install printed the package's control byte %q at %d:\n%q", out[i], i, out)
	}
	if !strings.Contains(out, `tb-greeting\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2K\rhello3  walled\u202e has no bin`) {
		t.Errorf("toybox install = %q; want the package's name escaped", out)
	}
	// The supervisor's journal quotes the refusal: escaped there too.
	if log := s.tbLog.String(); strings.ContainsRune(log, '\u202e') || !strings.Contains(log, `walled\u202e has no bin`) {
		t.Errorf("the supervisor's log holds the package's bidi override raw, or not at all:\n%s", log)
	}
}

// TestInstallSaysWhyTheRegistryIsRefused: a registry the switchboard
// refuses (here a documentation address, as registry.npmjs.org resolves
// on a machine without internet) fails the install with the
// switchboard's reason in the answer, not only in the supervisor's log:
// the owner sees what to fix (the registry, or the switchboard's handle).
func TestInstallSaysWhyTheRegistryIsRefused(t *testing.T) {
	s := newStack(t, stackOpts{extra: []string{"--npm-registry", "http://203.0.113.9/"}})
	code, out := toyboxCLI(t, "install", "--admin", s.admin, "hello", "npm:tb-mcp-hello@^1")
	if code != 1 || !strings.Contains(out, "its resolve step failed") {
		t.Fatalf("toybox install hello npm:tb-mcp-hello = %d %q; want 1 and the resolve step's failure", code, out)
	}
	want := "egress to http://203.0.113.9:80 was refused: 203.0.113.9 is a documentation address"
	if !strings.Contains(out, want) {
		t.Errorf("toybox install = %q; want it to say %q", out, want)
	}
}

// TestPackageUpgradeKeepsEnv: a package vat's env values are the owner's
// settings. An upgrade to a new version without ?env= keeps them, in the
// stored record and in the server's environment inside its wall. A new
// value for a key replaces that key alone, and --unset-env takes one away.
func TestPackageUpgradeKeepsEnv(t *testing.T) {
	reg := npmtest.Start(t)
	reg.Publish(t, npmtest.Pack(t, npmtest.Fixture("tb-mcp-env")))
	reg.Publish(t, npmtest.PackWith(t, "tb-mcp-env", `"version": "1.0.0"`, `"version": "1.0.1"`))
	reg.Publish(t, npmtest.PackWith(t, "tb-mcp-env", `"version": "1.0.0"`, `"version": "1.0.2"`))
	s := newStack(t, stackOpts{extra: []string{"--npm-registry", reg.URL}})

	// seen is what the server inside the wall has for API_KEY and REGION,
	// and what the stored record holds.
	seen := func(step string) (inWall, stored map[string]any) {
		t.Helper()
		code, h, body := s.mcpPost("envy", mcpInit)
		sid := h.Get("Mcp-Session-Id")
		if code != http.StatusOK || sid == "" {
			t.Fatalf("%s: initialize: %d %s\nlog:\n%s", step, code, body, tail(s.tbLog))
		}
		session := []string{"Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25"}
		s.mcpPost("envy", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, session...)
		code, _, body = s.mcpPost("envy", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"env","arguments":{"names":["API_KEY","REGION"]}}}`, session...)
		var resp struct {
			Result struct {
				Content []struct{ Text string } `json:"content"`
			} `json:"result"`
		}
		if i := strings.Index(body, "{"); i >= 0 {
			body = strings.TrimSpace(body[i:])
		}
		if err := json.Unmarshal([]byte(strings.SplitN(body, "\n", 2)[0]), &resp); err != nil || len(resp.Result.Content) != 1 || code != http.StatusOK {
			t.Fatalf("%s: tools/call env: %d %s", step, code, body)
		}
		if err := json.Unmarshal([]byte(resp.Result.Content[0].Text), &inWall); err != nil {
			t.Fatalf("%s: the tool's answer %q: %v", step, resp.Result.Content[0].Text, err)
		}
		b, err := os.ReadFile(filepath.Join(s.state, "vats", "envy.json"))
		if err != nil {
			t.Fatal(err)
		}
		var rec struct{ Env map[string]any }
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		return inWall, rec.Env
	}
	check := func(step string, want map[string]any) {
		t.Helper()
		inWall, stored := seen(step)
		wantWall := map[string]any{"API_KEY": nil, "REGION": nil}
		for k, v := range want {
			wantWall[k] = v
		}
		if fmt.Sprint(inWall) != fmt.Sprint(wantWall) {
			t.Errorf("%s: the server inside the wall has %v; want %v", step, inWall, wantWall)
		}
		if fmt.Sprint(stored) != fmt.Sprint(want) {
			t.Errorf("%s: the stored record's env is %v; want %v", step, stored, want)
		}
	}
	install := func(step string, args ...string) {
		t.Helper()
		code, out := toyboxCLI(t, append([]string{"install", "--admin", s.admin}, args...)...)
		if code != 0 {
			t.Fatalf("%s: toybox install %v = %d %s\nlog:\n%s", step, args, code, out, tail(s.tbLog))
		}
	}

	install("install", "--env", `{"API_KEY":"sk-1","REGION":"eu"}`, "envy", "npm:tb-mcp-env@1.0.0")
	check("install", map[string]any{"API_KEY": "sk-1", "REGION": "eu"})

	install("upgrade without --env", "envy", "npm:tb-mcp-env@1.0.1")
	check("upgrade without --env", map[string]any{"API_KEY": "sk-1", "REGION": "eu"})

	install("upgrade with one key", "--env", `{"REGION":"us"}`, "envy", "npm:tb-mcp-env@1.0.2")
	check("upgrade with one key", map[string]any{"API_KEY": "sk-1", "REGION": "us"})

	install("upgrade unsetting a key", "--unset-env", "API_KEY", "envy", "npm:tb-mcp-env@1.0.2")
	check("upgrade unsetting a key", map[string]any{"REGION": "us"})

	// Unsetting a key the vat does not have, or one the same install sets,
	// is refused, saying why, and changes nothing.
	code, out := toyboxCLI(t, "install", "--admin", s.admin, "--unset-env", "NOPE", "envy", "npm:tb-mcp-env@1.0.2")
	if code != 1 || !strings.Contains(out, "NOPE") {
		t.Errorf("--unset-env NOPE = %d %q; want 1 naming NOPE", code, out)
	}
	code, out = toyboxCLI(t, "install", "--admin", s.admin, "--env", `{"REGION":"ap"}`, "--unset-env", "REGION", "envy", "npm:tb-mcp-env@1.0.2")
	if code != 1 || !strings.Contains(out, "REGION") {
		t.Errorf("--env REGION and --unset-env REGION = %d %q; want 1 naming REGION", code, out)
	}
	check("after refusals", map[string]any{"REGION": "us"})
}
