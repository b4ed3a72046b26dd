//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestListenPortVat: a program that serves HTTP on a TCP port ($PORT), as
// most web servers do, is reachable at /<vat>/ once installed with
// ?listen=N: toybox-entry relays $TOYBOX_LISTEN to 127.0.0.1:N, and the
// vat is ready when the port accepts. Under the entry the app is pid 2.
func TestListenPortVat(t *testing.T) {
	s := newStack(t, stackOpts{})
	st := s.mustInstall("porty", example(t, "port-app"), "listen=3001")
	if st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	s.mustGet("/porty/hello", "port-app on port 3001: GET /hello")
	s.mustGet("/porty/pid", "pid 2 ppid 1")
	// Many connections at once, each its own relay.
	errs := make(chan string, 16)
	for i := range 16 {
		go func() {
			path := "/porty/n" + string(rune('a'+i))
			code, body := s.in(t).get(path)
			if want := "port-app on port 3001: GET " + path[len("/porty"):]; code != http.StatusOK || body != want {
				errs <- body
				return
			}
			errs <- ""
		}()
	}
	for range 16 {
		if e := <-errs; e != "" {
			t.Errorf("a concurrent GET answered %q", e)
		}
	}
	// An upgrade without ?listen= keeps the port.
	code, body := s.install("porty", example(t, "port-app"), "")
	if code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("reinstall without ?listen= = %d %s", code, body)
	}
	s.mustGet("/porty/again", "port-app on port 3001: GET /again")
	// Unwalled it would listen on the host's own port 3001: it stays off.
	code, body = s.adminDo("POST", "/porty/walls?walled=false", nil)
	if code != http.StatusOK || !strings.Contains(body, "an app that listens on a TCP port (3001) runs only inside its wall") {
		t.Fatalf("POST /porty/walls?walled=false = %d %s; want it off, saying why", code, body)
	}
}

// TestListenRefusals: every bad listen is refused with an error naming the
// field, and nothing is installed.
func TestListenRefusals(t *testing.T) {
	s := newStack(t, stackOpts{})
	for _, tt := range []struct{ query, want string }{
		{"listen=0", `?listen=\"0\": want the TCP port the app listens on, 1-65535`},
		{"listen=65536", `?listen=\"65536\"`},
		{"listen=http", `?listen=\"http\"`},
		{"listen=", `?listen=\"\"`},
		{"listen=3001&mcp=stdio", "?listen=3001: a stdio MCP server (?mcp=stdio) listens on no port"},
	} {
		code, body := s.install("refused", example(t, "port-app"), tt.query)
		if code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("PUT /refused?%s = %d %s; want 400 with %q", tt.query, code, body, tt.want)
		}
	}
	dir := t.TempDir()
	app := filepath.Join(dir, "app")
	if err := os.WriteFile(app, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ manifest, query, want string }{
		{`{"command":["./app"],"listen":{"port":0}}`, "", "listen.port 0 is not a TCP port"},
		{`{"command":["./app"],"listen":{"port":"3001"}}`, "", "listen.port"},
		{`{"command":["./app"],"listen":{"port":5432},"network":{"hosts":["127.0.0.1:5432"]}}`, "", "listen.port 5432 is the port of network.hosts entry"},
		{`{"command":["./app"],"listen":{"port":3001},"mcp":{"transport":"stdio"}}`, "", "a stdio MCP server"},
		{`{"command":["./app"]}`, "listen=3001", `?listen= is for a single executable; a bundle says \"listen\"`},
	} {
		p := "/refused"
		if tt.query != "" {
			p += "?" + tt.query
		}
		code, body := s.adminDo("PUT", p, bytes.NewReader(mcpBundle(t, tt.manifest, map[string]string{"app": app})))
		if code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("PUT %s with %s = %d %s; want 400 with %q", p, tt.manifest, code, body, tt.want)
		}
	}
	if code, body := s.adminDo("GET", "/refused", nil); code != http.StatusNotFound {
		t.Errorf("GET /refused = %d %s; want 404: nothing installed", code, body)
	}
}

// TestListenNeverAccepts: an app whose port never accepts leaves its vat
// off, saying which port was waited for.
func TestListenNeverAccepts(t *testing.T) {
	s := newStack(t, stackOpts{extra: []string{"--ready-timeout", "2s"}})
	dir := t.TempDir()
	app := filepath.Join(dir, "app")
	if err := os.WriteFile(app, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, body := s.install("deaf", app, "listen=3001")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "nothing listened on its port 3001 ($PORT") {
		t.Fatalf("PUT /deaf?listen=3001 of a sleeper = %d %s; want 503 naming port 3001", code, body)
	}
}

// TestListenHTTPMCPServer: an HTTP MCP server on PORT=3001 (the example,
// told only $PORT) is reachable at /<vat>/mcp, and its install probe found
// it through the relay.
func TestListenHTTPMCPServer(t *testing.T) {
	s := newStack(t, stackOpts{})
	if code, body := s.install("mcport", example(t, "mcp-http"), "mcp=http&listen=3001"); code != http.StatusCreated {
		t.Fatalf("PUT /mcport?mcp=http&listen=3001 = %d %s", code, body)
	}
	mcpSt, _ := s.status("mcport")["mcp"].(map[string]any)
	if probe, _ := mcpSt["probe"].(map[string]any); probe["tool_count"] != float64(3) {
		t.Errorf("mcport's MCP status = %v; want the probe's 3 tools", mcpSt)
	}
	code, h, body := s.mcpPost("mcport", mcpInit)
	if code != http.StatusOK || h.Get("Mcp-Session-Id") == "" || !strings.Contains(body, `"serverInfo":{"name":"toybox-example-mcp-http"`) {
		t.Fatalf("initialize at /mcport/mcp: %d %v %s", code, h, body)
	}
}

// nodeServer is a Node HTTP server with no signal handler of its own: as a
// wall's pid 1 it ignored SIGTERM (the kernel drops a signal pid 1 has no
// handler for), so every stop waited the grace and ended in SIGKILL.
const nodeServer = `require("http").createServer((q, r) => r.end("node " + process.pid + "\n")).listen(+process.env.PORT)`

// TestNodeServerStopsOnSIGTERM: with toybox-entry as pid 1 of every wall
// (no way out included), a stop reaches the Node server as SIGTERM, which
// ends it at once: it dies of SIGTERM (the entry passes its status on as
// 143), not of the SIGKILL after the grace.
func TestNodeServerStopsOnSIGTERM(t *testing.T) {
	s := newStack(t, stackOpts{extra: []string{"--stop-grace", "10s"}})
	dir := t.TempDir()
	js := filepath.Join(dir, "server.js")
	if err := os.WriteFile(js, []byte(nodeServer), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := `{"command":["/usr/bin/node","server.js"],"listen":{"port":3000}}`
	if code, body := s.adminDo("PUT", "/noder", bytes.NewReader(mcpBundle(t, manifest, map[string]string{"server.js": js}))); code != http.StatusCreated {
		t.Fatalf("PUT /noder = %d %s", code, body)
	}
	s.mustGet("/noder/", "node 2")
	if code, body := s.adminDo("POST", "/noder/restart", nil); code != http.StatusOK {
		t.Fatalf("POST /noder/restart = %d %s", code, body)
	}
	s.mustGet("/noder/", "node 2")
	// The supervisor's record of the stop: how the first wall ended.
	stopped := regexp.MustCompile(`"msg":"vat stopped","vat":"noder","exit":"([^"]*)"`)
	var exit string
	waitFor(t, "the stop's record", 10*time.Second, func() bool {
		if m := stopped.FindStringSubmatch(s.tbLog.String()); m != nil {
			exit = m[1]
			return true
		}
		return false
	})
	if exit != "exit status 143" {
		t.Errorf("the Node server's wall ended with %q; want \"exit status 143\" (the app died of the SIGTERM the entry forwarded, not of a SIGKILL after the grace)", exit)
	}
	// The status says the owner's restart ended it, not a crash of its own.
	if got := fmt.Sprint(s.status("noder")["last_exit"]); got != "exit status 143 (stopped by toybox)" {
		t.Errorf("last_exit after a restart = %q; want \"exit status 143 (stopped by toybox)\"", got)
	}
}

// pythonApp is a Python vat on $TOYBOX_LISTEN: it prints a line to stdout
// when it starts (buffered to a pipe unless PYTHONUNBUFFERED), and /orphan
// leaves an orphan: a shell that starts a short sleep in the background
// and exits at once, so the sleep is reparented to the wall's pid 1. It
// answers the wall's zombies once the sleep has ended.
const pythonApp = `#!/usr/bin/python3
import http.server, os, socketserver, subprocess, time

class H(http.server.BaseHTTPRequestHandler):
    def address_string(self):
        return "supervisor"
    def do_GET(self):
        if self.path == "/orphan":
            subprocess.run(["/bin/sh", "-c", "sleep 0.2 & exit 0"], check=True)
            time.sleep(1)
            zombies = []
            for p in os.listdir("/proc"):
                if p.isdigit():
                    try:
                        with open("/proc/%s/stat" % p) as f:
                            st = f.read()
                    except OSError:
                        continue
                    if st.rsplit(")", 1)[1].split()[0] == "Z":
                        zombies.append(st.split(")")[0] + ")")
            body = "zombies: %s\n" % (", ".join(zombies) or "none")
        else:
            body = "python %d\n" % os.getpid()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())

class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

print("python vat started", os.getpid())
S(os.environ["TOYBOX_LISTEN"], H).serve_forever()
`

// TestPythonVat: real python3 in a wall. Its prints show in GET
// /<vat>/logs while it runs (PYTHONUNBUFFERED), and an orphan it leaves is
// reaped by the wall's pid 1, toybox-entry: no zombie stays.
func TestPythonVat(t *testing.T) {
	s := newStack(t, stackOpts{})
	app := filepath.Join(t.TempDir(), "app.py")
	if err := os.WriteFile(app, []byte(pythonApp), 0o755); err != nil {
		t.Fatal(err)
	}
	s.mustInstall("pyth", app, "")
	s.mustGet("/pyth/", "python 2")
	if code, logs := s.adminDo("GET", "/pyth/logs", nil); code != http.StatusOK || !strings.Contains(logs, "python vat started 2") {
		t.Errorf("GET /pyth/logs = %d %q; want the app's print while it runs", code, logs)
	}
	s.mustGet("/pyth/orphan", "zombies: none")
}
