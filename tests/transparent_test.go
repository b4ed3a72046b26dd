//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
)

// netResult is what the netclient vat answers for one command.
type netResult struct {
	Out  string `json:"out"`
	Code int    `json:"code"`
}

// runIn runs argv inside vat id's wall (the netclient vat), without any
// proxy variable unless proxy, with files written to its $TMPDIR first.
func (s *stack) runIn(id string, proxy bool, files map[string]string, argv ...string) netResult {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"argv": argv, "files": files, "proxy": proxy})
	c := &http.Client{Timeout: 90 * time.Second}
	resp, err := c.Post("http://"+s.http+"/"+id+"/run", "application/json", bytes.NewReader(body))
	if err != nil {
		s.t.Fatalf("running %q: %v", argv, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r netResult
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil {
		s.t.Fatalf("running %q: %d %s", argv, resp.StatusCode, b)
	}
	return r
}

// helloServer serves HTTP on 127.0.0.1, answering every request with text,
// and returns its port.
func helloServer(t testing.TB, text string) string {
	port, _ := countingServer(t, text)
	return port
}

// countingServer is helloServer, counting the connections it accepts.
func countingServer(t testing.TB, text string) (string, *atomic.Int64) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{Listener: inner}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, text) })}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port), &l.n
}

type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// speakFirstServer writes text to each connection as it is accepted,
// then closes it.
func speakFirstServer(t testing.TB, text string) string {
	return tcpServer(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.WriteString(c, text+"\n")
	})
}

// cClient connects to argv[1]:argv[2] (an IPv4 address), sends a GET and
// prints what comes back, or the connect's errno by name.
const cClient = `#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char **argv) {
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons(atoi(argv[2]));
	inet_pton(AF_INET, argv[1], &sa.sin_addr);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		printf("connect: %s\n", errno == ECONNREFUSED ? "ECONNREFUSED" : strerror(errno));
		return 2;
	}
	const char *req = "GET / HTTP/1.0\r\n\r\n";
	write(fd, req, strlen(req));
	char buf[4096];
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf)) > 0) {
		fwrite(buf, 1, n, stdout);
	}
	return 0;
}
`

// TestTransparentEgress: ordinary clients that use no proxy (curl, Node
// 20's fetch, Python's urllib, Go's net/http with Proxy nil, busybox nc,
// a C program) reach a granted server on the host's loopback, by address
// and by name, from inside a real wall; an ungranted one is refused with
// ECONNREFUSED and one JSON record of the entry's.
func TestTransparentEgress(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local", sbArgs: []string{"--config", resolverConfig(t, "granted.test")}})
	granted := helloServer(t, "hello through the wall")
	refused, refusedHits := countingServer(t, "you should not see this")
	first := speakFirstServer(t, "the server spoke first")
	grant := fmt.Sprintf(`[{"host":"127.0.0.1","port":%s},{"host":"127.0.0.1","port":%s},{"host":"granted.test","port":%s}]`, granted, first, granted)
	if st := s.mustInstall("nina", example(t, "netclient"), q("egress", grant)); st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	// The word is what the entry reported it got, once it has.
	st := s.waitEgress("nina", "transparent")
	if !strings.HasPrefix(fmt.Sprint(st["egress_es"]), "transparente") {
		t.Fatalf("status = %v; want transparent egress", st)
	}
	clients := []struct {
		name  string
		files map[string]string
		argv  func(url, host, port string) []string
		// refusal is what the client says when its connect is refused.
		refusal string
	}{
		{"curl", nil, func(url, _, _ string) []string { return []string{"curl", "-sS", "--max-time", "20", url} }, "Couldn't connect to server"},
		{"node fetch", nil, func(url, _, _ string) []string {
			return []string{"/usr/bin/node", "-e", `fetch(process.argv[1]).then(r => r.text()).then(t => process.stdout.write(t), e => { console.log("ERR", e.cause && e.cause.code || e.message); process.exit(3) })`, url}
		}, "ECONNREFUSED"},
		{"python urllib", nil, func(url, _, _ string) []string {
			return []string{"python3", "-c", "import sys, urllib.request\ntry:\n print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode(), end='')\nexcept Exception as e:\n print('ERR', e); sys.exit(3)", url}
		}, "Connection refused"},
		{"go net/http", nil, func(url, _, _ string) []string { return []string{"go-get", url} }, "connection refused"},
		{"C", map[string]string{"client.c": cClient}, func(_, host, port string) []string {
			return []string{"sh", "-c", `gcc -o client client.c && ./client "$0" "$1"`, host, port}
		}, "ECONNREFUSED"},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			s := s.in(t)
			r := s.runIn("nina", false, c.files, c.argv("http://127.0.0.1:"+granted+"/", "127.0.0.1", granted)...)
			if !strings.Contains(r.Out, "hello through the wall") {
				t.Errorf("granted: %+v; want the server's answer", r)
			}
			r = s.runIn("nina", false, c.files, c.argv("http://127.0.0.1:"+refused+"/", "127.0.0.1", refused)...)
			if strings.Contains(r.Out, "you should not see this") || !strings.Contains(r.Out, c.refusal) {
				t.Errorf("refused: %+v; want %q", r, c.refusal)
			}
			if c.name != "C" {
				r = s.runIn("nina", false, nil, c.argv("http://granted.test:"+granted+"/", "granted.test", granted)...)
				if !strings.Contains(r.Out, "hello through the wall") {
					t.Errorf("by name: %+v; want the server's answer", r)
				}
			}
		})
	}
	t.Run("busybox nc", func(t *testing.T) {
		s := s.in(t)
		r := s.runIn("nina", false, nil, "busybox", "nc", "127.0.0.1", first)
		if !strings.Contains(r.Out, "the server spoke first") {
			t.Errorf("granted: %+v; want the server's greeting", r)
		}
		r = s.runIn("nina", false, nil, "busybox", "nc", "127.0.0.1", refused)
		if r.Code == 0 || !strings.Contains(r.Out, "refused") {
			t.Errorf("refused: %+v; want connection refused", r)
		}
	})
	t.Run("loopback with the proxy variables", func(t *testing.T) {
		// NO_PROXY names loopback: proxy-aware clients go straight to
		// 127.0.0.1 too, and reach the host's granted listener.
		s := s.in(t)
		for _, argv := range [][]string{
			{"curl", "-sS", "--max-time", "20", "http://127.0.0.1:" + granted + "/"},
			{"python3", "-c", "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:" + granted + "/', timeout=20).read().decode())"},
		} {
			if r := s.runIn("nina", true, nil, argv...); !strings.Contains(r.Out, "hello through the wall") {
				t.Errorf("%s with the proxy variables: %+v; want the host server's answer", argv[0], r)
			}
		}
	})
	t.Run("the wall's own loopback stays inside", func(t *testing.T) {
		// A server of the app's own on the granted port number: the
		// app's connect reaches it, not the host's. The same program
		// first reaches the host's server on that port, then listens on
		// it itself: its next connect must stay inside (what the entry
		// found before must not decide it).
		s := s.in(t)
		py := "import http.server, threading, urllib.request\n" +
			"get = lambda: urllib.request.urlopen('http://127.0.0.1:" + granted + "/', timeout=20).read().decode().strip()\n" +
			"print('before:', get())\n" +
			"class H(http.server.BaseHTTPRequestHandler):\n" +
			" def do_GET(self):\n  self.send_response(200); self.end_headers(); self.wfile.write(b'inside the wall')\n" +
			" def log_message(self, *a): pass\n" +
			"srv = http.server.HTTPServer(('127.0.0.1', " + granted + "), H)\n" +
			"threading.Thread(target=srv.serve_forever, daemon=True).start()\n" +
			"print('after:', get())\n"
		r := s.runIn("nina", false, nil, "python3", "-c", py)
		if !strings.Contains(r.Out, "before: hello through the wall") {
			t.Errorf("%+v; want the host server's answer before the app listens", r)
		}
		if !strings.Contains(r.Out, "after: inside the wall") {
			t.Errorf("%+v; want the app's own server's answer once it listens", r)
		}
	})
	t.Run("attacks", func(t *testing.T) {
		// A hostile program races the notifier (the address and the
		// descriptor change under it, many threads at once), tries to
		// re-aim the socket it was handed (AF_UNSPEC, a second connect,
		// MSG_FASTOPEN), and io_uring: the refused server never sees a
		// connection.
		s := s.in(t)
		src, err := os.ReadFile("testdata/attack.c")
		if err != nil {
			t.Fatal(err)
		}
		before := refusedHits.Load()
		r := s.runIn("nina", false, map[string]string{"attack.c": string(src)}, "sh", "-c", `gcc -o attack attack.c -lpthread && ./attack "$0" "$1"`, granted, refused)
		for _, want := range []string{
			"DIAL granted OK", "LISTEN-INSIDE OK", "UNSPEC EISCONN", "RECONNECT EISCONN", "FASTOPEN-INJECTED EOPNOTSUPP",
			"FASTOPEN-FRESH EOPNOTSUPP", "SENDMSG-FASTOPEN EOPNOTSUPP", "IO_URING EPERM", "PIDFD_GETFD EPERM",
			"FLIP done", "SWAP done", "INJECTED says granted", "MANY done",
		} {
			if !strings.Contains(r.Out, want) {
				t.Errorf("the attack's output lacks %q:\n%s", want, r.Out)
			}
		}
		if strings.Contains(r.Out, "MANY wrong") {
			t.Errorf("a connect from one of many threads got the wrong answer:\n%s", r.Out)
		}
		if n := refusedHits.Load() - before; n != 0 {
			t.Errorf("the refused server accepted %d connections from the attack:\n%s", n, r.Out)
		}
	})
	t.Run("the refused server saw nothing", func(t *testing.T) {
		if n := refusedHits.Load(); n != 0 {
			t.Errorf("the refused server accepted %d connections", n)
		}
	})
	t.Run("the last refusal in the status", func(t *testing.T) {
		s := s.in(t)
		s.runIn("nina", false, nil, "curl", "-sS", "--max-time", "20", "http://127.0.0.1:"+refused+"/")
		last, _ := s.status("nina")["last_refusal"].(map[string]any)
		if last["target"] != "tcp://127.0.0.1:"+refused || last["by"] != "supervisor" || !strings.Contains(fmt.Sprint(last["reason"]), "not granted") {
			t.Errorf("last_refusal = %v; want the supervisor's refusal of tcp://127.0.0.1:%s", last, refused)
		}
		// Decided by the supervisor, logged there: the same keys.
		rec := `"msg":"egress decision","vat":"nina","op":"connect","target":"tcp://127.0.0.1:` + refused + `","allow":false,"reason":`
		if !strings.Contains(s.tbLog.String(), rec) {
			t.Errorf("the supervisor's log has no record %s", rec)
		}
	})
	t.Run("the refusal's record", func(t *testing.T) {
		s := s.in(t)
		// The entry writes its records a few at a time (at most 20 ms late).
		testenv.WaitFor(t, 5*time.Second, func() error {
			_, logs := s.adminDo("GET", "/nina/logs", nil)
			for line := range strings.Lines(logs) {
				i := strings.Index(line, "{")
				if i < 0 {
					continue
				}
				var rec map[string]any
				if json.Unmarshal([]byte(line[i:]), &rec) != nil {
					continue
				}
				if rec["msg"] == "egress decision" && rec["vat"] == "nina" && rec["target"] == "tcp://127.0.0.1:"+refused && rec["allow"] == false && rec["reason"] != "" && rec["path"] == "transparent" {
					return nil
				}
			}
			return fmt.Errorf("no JSON record of the refusal of 127.0.0.1:%s in the vat's log:\n%s", refused, logs)
		})
	})
}

// resolverConfig starts a DNS server on 127.0.0.1 that answers name with
// 127.0.0.1 (and every other name with NXDOMAIN), and returns a switchboard
// config file that resolves through it.
func resolverConfig(t testing.TB, name string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			question, err := p.Question()
			if err != nil {
				continue
			}
			rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
			found := strings.EqualFold(strings.TrimSuffix(question.Name.String(), "."), name)
			if !found {
				rh.RCode = dnsmessage.RCodeNameError
			}
			b := dnsmessage.NewBuilder(nil, rh)
			_ = b.StartQuestions()
			_ = b.Question(question)
			if found && question.Type == dnsmessage.TypeA {
				_ = b.StartAnswers()
				_ = b.AResource(dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}})
			}
			if out, err := b.Finish(); err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	path := filepath.Join(t.TempDir(), "switchboard.json")
	cfg := fmt.Sprintf(`{"resolver":%q}`, pc.LocalAddr().String())
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitEgress waits until vat id's egress word starts with prefix (the
// entry reports what its wall got shortly after it starts) and returns
// the status.
func (s *stack) waitEgress(id, prefix string) map[string]any {
	s.t.Helper()
	var st map[string]any
	testenv.WaitFor(s.t, 15*time.Second, func() error {
		st = s.status(id)
		if !strings.HasPrefix(fmt.Sprint(st["egress"]), prefix) {
			return fmt.Errorf("status = %v; want egress %q...", st, prefix)
		}
		return nil
	})
	return st
}

// TestTransparentEgressNested: under another seccomp notifier (tests/nested
// holds a listener over toybox serve and everything it starts) the kernel
// refuses the app's filter a listener. The wall runs with the proxy alone,
// and the status and toybox doctor say so, with the kernel's reason; a
// client that ignores the proxy gets nowhere, one that uses it gets out.
func TestTransparentEgressNested(t *testing.T) {
	s := newStack(t, stackOpts{nested: true, sbArgs: []string{"--config", resolverConfig(t, "granted.test")}})
	granted := helloServer(t, "hello through the proxy")
	grant := fmt.Sprintf(`[{"host":"granted.test","port":%s},{"host":"127.0.0.1","port":%s}]`, granted, granted)
	if st := s.mustInstall("nora", example(t, "netclient"), q("egress", grant)); st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	st := s.waitEgress("nora", "proxy only")
	if !strings.Contains(fmt.Sprint(st["egress"]), "another seccomp notifier") || !strings.HasPrefix(fmt.Sprint(st["egress_es"]), "solo proxy") {
		t.Errorf("status = %v; want proxy only, naming the other notifier, in en and es", st)
	}
	if r := s.runIn("nora", true, nil, "curl", "-sS", "--max-time", "20", "http://granted.test:"+granted+"/"); !strings.Contains(r.Out, "hello through the proxy") {
		t.Errorf("curl with the proxy variables: %+v; want the server's answer", r)
	}
	if r := s.runIn("nora", false, nil, "curl", "-sS", "--max-time", "20", "http://127.0.0.1:"+granted+"/"); strings.Contains(r.Out, "hello through the proxy") || r.Code == 0 {
		t.Errorf("curl without a proxy: %+v; want no way out (nothing answers connect())", r)
	}
	out, _ := exec.Command(filepath.Join(bins, "examples", "nested"), filepath.Join(bins, "toybox"), "doctor", "--entry", filepath.Join(bins, "toybox-entry")).CombinedOutput()
	if !strings.Contains(string(out), "warn egress: proxy only") || !strings.Contains(string(out), "another seccomp notifier") {
		t.Errorf("toybox doctor under another notifier:\n%s\nwant a warning that walls get the proxy alone, and why", out)
	}
	out, _ = exec.Command(filepath.Join(bins, "toybox"), "doctor", "--entry", filepath.Join(bins, "toybox-entry")).CombinedOutput()
	if !strings.Contains(string(out), "ok   egress: transparent") {
		t.Errorf("toybox doctor:\n%s\nwant transparent egress", out)
	}
}

// TestTransparentEgressMCPStdio: a stdio MCP vat's processes (started by
// the bridge inside the wall, per session) get transparent egress as an
// app does: its tool's plain connect (Go's net/http, Proxy nil) reaches a
// granted server on the host's loopback, and one to an ungranted server is
// refused, with the entry's record and the status's last refusal.
func TestTransparentEgressMCPStdio(t *testing.T) {
	s := newStack(t, stackOpts{})
	granted := helloServer(t, "hello to the MCP tool")
	refused, refusedHits := countingServer(t, "you should not see this")
	grant := fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, granted)
	if code, body := s.install("fetcher", filepath.Join(bins, "examples", "mcpfetch"), q("mcp", "stdio", "egress", grant)); code != http.StatusCreated {
		t.Fatalf("PUT /fetcher?mcp=stdio = %d %s", code, body)
	}
	s.waitEgress("fetcher", "transparent")
	code, h, body := s.mcpPost("fetcher", mcpInit)
	sid := h.Get("Mcp-Session-Id")
	if code != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %q %s", code, sid, body)
	}
	session := []string{"Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25"}
	if code, _, body := s.mcpPost("fetcher", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, session...); code != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s", code, body)
	}
	call := func(id int, url string) string {
		t.Helper()
		code, _, body := s.mcpPost("fetcher", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"fetch","arguments":{"url":%q}}}`, id, url), session...)
		if code != http.StatusOK {
			t.Fatalf("tools/call fetch %s: %d %s", url, code, body)
		}
		return body
	}
	if b := call(2, "http://127.0.0.1:"+granted+"/"); !strings.Contains(b, "hello to the MCP tool") {
		t.Errorf("fetch of the granted server: %s; want its answer", b)
	}
	if b := call(3, "http://127.0.0.1:"+refused+"/"); !strings.Contains(b, "connection refused") || strings.Contains(b, "you should not see this") {
		t.Errorf("fetch of the ungranted server: %s; want connection refused", b)
	}
	if n := refusedHits.Load(); n != 0 {
		t.Errorf("the ungranted server accepted %d connections", n)
	}
	last, _ := s.status("fetcher")["last_refusal"].(map[string]any)
	if last["target"] != "tcp://127.0.0.1:"+refused {
		t.Errorf("last_refusal = %v; want tcp://127.0.0.1:%s", last, refused)
	}
	rec := `"msg":"egress decision","vat":"fetcher","op":"connect","target":"tcp://127.0.0.1:` + refused + `","scheme":"tcp","allow":false`
	testenv.WaitFor(t, 5*time.Second, func() error { // records are written at most 20 ms late
		_, logs := s.adminDo("GET", "/fetcher/logs", nil)
		if !strings.Contains(logs, rec) || !strings.Contains(logs, `"path":"transparent"`) {
			return fmt.Errorf("the vat's log has no transparent refusal record %s:\n%s", rec, logs)
		}
		return nil
	})
}

// TestTransparentDNS: the wall's DNS stub answers real resolvers. A lookup
// of both families (glibc's getaddrinfo through getent and Python, Node's
// dns.lookup with all) gets the stub's IPv4 address at once: the AAAA
// query has a definitive empty answer, so nothing waits for a timeout.
// Over TCP (glibc with RES_OPTIONS=use-vc, and a query written by hand)
// the stub answers too, and the name it hands out connects through the
// grant.
func TestTransparentDNS(t *testing.T) {
	s := newStack(t, stackOpts{sbArgs: []string{"--config", resolverConfig(t, "granted.test")}})
	granted := helloServer(t, "hello by name")
	grant := fmt.Sprintf(`{"host":"granted.test","port":%s}`, granted)
	if st := s.mustInstall("dina", example(t, "netclient"), q("egress", grant)); st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	s.waitEgress("dina", "transparent")
	// timed runs a shell command and prints how long it took (ms) last.
	timed := func(cmd string) (string, int) {
		t.Helper()
		r := s.runIn("dina", false, nil, "sh", "-c", `s=$(date +%s%N); `+cmd+`; e=$?; echo "ms=$(( ($(date +%s%N) - s) / 1000000 ))"; exit $e`)
		var ms int
		if i := strings.LastIndex(r.Out, "ms="); i >= 0 {
			_, _ = fmt.Sscanf(r.Out[i:], "ms=%d", &ms)
		}
		if r.Code != 0 {
			t.Errorf("%s: %+v", cmd, r)
		}
		return r.Out, ms
	}
	for _, c := range []struct{ name, cmd, want string }{
		{"getent ahosts", "getent ahosts granted.test", "198.18."},
		{"python getaddrinfo", `python3 -c 'import socket; print(sorted({(f, a[0]) for f, _, _, _, a in socket.getaddrinfo("granted.test", 80)}))'`, "198.18."},
		{"node dns.lookup all", `node -e 'require("dns").lookup("granted.test", {all: true}, (e, a) => { if (e) { console.log("ERR", e.code); process.exit(3) } console.log(JSON.stringify(a)) })'`, `"family":4`},
		{"getent ahosts over TCP", "RES_OPTIONS=use-vc getent ahosts granted.test", "198.18."},
		{"curl by name over TCP", "RES_OPTIONS=use-vc curl -sS --max-time 20 http://granted.test:" + granted + "/", "hello by name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, ms := timed(c.cmd)
			if !strings.Contains(out, c.want) {
				t.Errorf("%s:\n%s\nwant %q", c.cmd, out, c.want)
			}
			// glibc waits 5 s for an answer that does not come.
			if ms > 2000 {
				t.Errorf("%s took %d ms; want no wait for a timeout", c.cmd, ms)
			}
		})
	}
	t.Run("a TCP query by hand", func(t *testing.T) {
		// An AAAA and an A query on one TCP connection, each with its
		// two-byte length: NOERROR with no answer, then the address.
		py := `import socket, struct
def q(qid, qtype):
    name = b"".join(bytes([len(p)]) + p for p in b"granted.test".split(b".")) + b"\0"
    m = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", qtype, 1)
    return struct.pack(">H", len(m)) + m
s = socket.create_connection(("127.0.0.53", 53), timeout=5)
s.sendall(q(7, 28) + q(8, 1))
f = s.makefile("rb")
for _ in range(2):
    n, = struct.unpack(">H", f.read(2))
    m = f.read(n)
    qid, flags, _, an = struct.unpack(">HHHH", m[:8])
    print("id", qid, "rcode", flags & 15, "answers", an, "addr", ".".join(map(str, m[-4:])) if an else "-")
`
		r := s.runIn("dina", false, map[string]string{"q.py": py}, "python3", "q.py")
		for _, want := range []string{"id 7 rcode 0 answers 0 addr -", "id 8 rcode 0 answers 1 addr 198.18."} {
			if !strings.Contains(r.Out, want) {
				t.Errorf("%+v; want %q", r, want)
			}
		}
	})
}

// TestTransparentEgressSchemeGrant: a grant that names a scheme (https or
// http) admits a program's plain connect too. The entry reads what the
// stream opens with and asks for that scheme: the switchboard checks an
// https stream's ClientHello (SNI = the granted name) as it does for the
// proxy. curl and Node's fetch reach a granted TLS server by name; an SNI
// for another name is refused by the switchboard before the server sees a
// request; an http grant carries plain requests.
func TestTransparentEgressSchemeGrant(t *testing.T) {
	s := newStack(t, stackOpts{sbArgs: []string{"--config", resolverConfig(t, "granted.test")}})
	var tlsHits atomic.Int64
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tlsHits.Add(1)
		fmt.Fprintln(w, "hello over tls")
	}))
	ts.StartTLS()
	t.Cleanup(ts.Close)
	tlsPort := fmt.Sprint(ts.Listener.Addr().(*net.TCPAddr).Port)
	httpPort := helloServer(t, "hello over http")
	grant := fmt.Sprintf(`[{"scheme":"https","host":"granted.test","port":%s},{"scheme":"http","host":"granted.test","port":%s}]`, tlsPort, httpPort)
	if st := s.mustInstall("sara", example(t, "netclient"), q("egress", grant)); st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	s.waitEgress("sara", "transparent")
	url := "https://granted.test:" + tlsPort + "/"
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"curl", []string{"curl", "-sSk", "--max-time", "20", url}},
		{"node fetch", []string{"env", "NODE_TLS_REJECT_UNAUTHORIZED=0", "/usr/bin/node", "-e", `fetch(process.argv[1]).then(r => r.text()).then(t => process.stdout.write(t), e => { console.log("ERR", e.cause && e.cause.code || e.message); process.exit(3) })`, url}},
	} {
		if r := s.runIn("sara", false, nil, c.argv...); !strings.Contains(r.Out, "hello over tls") {
			t.Errorf("%s %s: %+v; want the TLS server's answer", c.name, url, r)
		}
	}
	// Through the wall's proxy: the CONNECT asks for tcp, is refused for
	// the scheme alone, and checks https before it reads the ClientHello,
	// in one hop (a direct connection's check).
	if r := s.runIn("sara", true, nil, "curl", "-sSk", "--max-time", "20", url); !strings.Contains(r.Out, "hello over tls") {
		t.Errorf("curl through the proxy %s: %+v; want the TLS server's answer", url, r)
	}
	if !sbLogged(s, 5*time.Second, func() bool { return directDecisions(s, "check", tlsPort) > 0 }) {
		t.Errorf("no check allowed on a direct connection in the switchboard's log:\n%s", tail(s.sbLog))
	}
	before := tlsHits.Load()
	r := s.runIn("sara", false, nil, "curl", "-sSk", "--max-time", "20", "--connect-to", "other.test:"+tlsPort+":granted.test:"+tlsPort, "https://other.test:"+tlsPort+"/")
	if r.Code == 0 || strings.Contains(r.Out, "hello over tls") || tlsHits.Load() != before {
		t.Errorf("an SNI of another name: %+v (%d requests reached the server); want it refused", r, tlsHits.Load()-before)
	}
	if !sbLogged(s, 5*time.Second, func() bool { return strings.Contains(s.sbLog.String(), "other.test") }) {
		t.Errorf("the switchboard logged no refusal naming the SNI other.test:\n%s", tail(s.sbLog))
	}
	if r := s.runIn("sara", false, nil, "curl", "-sS", "--max-time", "20", "http://granted.test:"+httpPort+"/"); !strings.Contains(r.Out, "hello over http") {
		t.Errorf("curl over an http grant: %+v; want the server's answer", r)
	}
	if r := s.runIn("sara", false, nil, "curl", "-sSk", "--max-time", "20", "https://127.0.0.1:"+tlsPort+"/"); !strings.Contains(r.Out, "Couldn't connect") {
		t.Errorf("curl to the ungranted address: %+v; want the connect refused", r)
	}
}

// blackholeServer returns the port of a listener on 127.0.0.1 whose
// backlog is full and never accepted: a connect to it never completes
// (the kernel drops its SYNs), as a black-holed target's.
func blackholeServer(t testing.TB) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	// One connection fills the queue (backlog 0 holds one).
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c2, err := net.DialTimeout("tcp", addr, 300*time.Millisecond); err == nil {
		c2.Close()
		t.Fatalf("a second connect to %s completed; want the listener black-holed", addr)
	}
	return fmt.Sprint(sa.(*unix.SockaddrInet4).Port)
}

// cNonblock connects to argv[1] (a black hole) and argv[2] (a server),
// both non-blocking: the first connect must return EINPROGRESS at once,
// the second must complete while the first is still pending.
const cNonblock = `#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
static long ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000 + t.tv_nsec / 1000000; }
static int dial(const char *port, int *err) {
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons(atoi(port));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	*err = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 ? 0 : errno;
	return fd;
}
int main(int argc, char **argv) {
	int e;
	long t0 = ms();
	int slow = dial(argv[1], &e);
	printf("SLOW %s in %ld ms\n", e == EINPROGRESS ? "EINPROGRESS" : strerror(e), ms() - t0);
	long t1 = ms();
	int fast = dial(argv[2], &e);
	struct pollfd p = {.fd = fast, .events = POLLOUT};
	if (e == EINPROGRESS) poll(&p, 1, 5000);
	int so = e == EINPROGRESS ? -1 : e;
	socklen_t l = sizeof so;
	if (e == EINPROGRESS) getsockopt(fast, SOL_SOCKET, SO_ERROR, &so, &l);
	printf("FAST %s in %ld ms\n", so == 0 ? "connected" : strerror(so), ms() - t1);
	struct pollfd q = {.fd = slow, .events = POLLOUT};
	printf("SLOW poll %d\n", poll(&q, 1, 300));
	return 0;
}
`

// TestTransparentEgressNonblocking: a non-blocking connect to a target
// that never answers does not hold the app's thread: connect() returns
// EINPROGRESS once the switchboard has decided, and the socket is handed
// over with its handshake under way. A second connect, to a fast server,
// completes meanwhile (a C client with O_NONBLOCK and poll), and Node's
// event loop keeps turning while one of its connects hangs.
func TestTransparentEgressNonblocking(t *testing.T) {
	s := newStack(t, stackOpts{})
	fast := helloServer(t, "fast")
	slow := blackholeServer(t)
	grant := fmt.Sprintf(`[{"host":"127.0.0.1","port":%s},{"host":"127.0.0.1","port":%s}]`, fast, slow)
	if st := s.mustInstall("nell", example(t, "netclient"), q("egress", grant)); st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	s.waitEgress("nell", "transparent")
	t.Run("C", func(t *testing.T) {
		s := s.in(t)
		r := s.runIn("nell", false, map[string]string{"nb.c": cNonblock}, "sh", "-c", `gcc -o nb nb.c && ./nb "$0" "$1"`, slow, fast)
		var slowMS, fastMS, pollN int
		i, j, k := strings.Index(r.Out, "SLOW EINPROGRESS in "), strings.Index(r.Out, "FAST connected in "), strings.Index(r.Out, "SLOW poll ")
		if i < 0 || j < 0 || k < 0 {
			t.Fatalf("%+v; want EINPROGRESS for the black hole, then the fast server connected", r)
		}
		_, _ = fmt.Sscanf(r.Out[i:], "SLOW EINPROGRESS in %d ms", &slowMS)
		_, _ = fmt.Sscanf(r.Out[j:], "FAST connected in %d ms", &fastMS)
		_, _ = fmt.Sscanf(r.Out[k:], "SLOW poll %d", &pollN)
		if slowMS > 1000 || fastMS > 1000 || pollN != 0 {
			t.Errorf("%+v; want both connects answered within 1 s and the black hole still connecting", r)
		}
	})
	t.Run("node", func(t *testing.T) {
		s := s.in(t)
		js := `const net = require("net");
const [slow, fast] = process.argv.slice(2);
let last = Date.now(), gap = 0;
setInterval(() => { const now = Date.now(); gap = Math.max(gap, now - last); last = now; }, 5);
const t0 = Date.now();
net.connect({host: "127.0.0.1", port: +slow}).on("error", () => {});
const f = net.connect({host: "127.0.0.1", port: +fast}, () => { console.log("FAST connected in " + (Date.now() - t0) + " ms"); f.destroy(); });
setTimeout(() => { console.log("GAP " + gap); process.exit(0); }, 1500);
`
		r := s.runIn("nell", false, map[string]string{"nb.js": js}, "/usr/bin/node", "nb.js", slow, fast)
		var fastMS, gap int
		i, j := strings.Index(r.Out, "FAST connected in "), strings.Index(r.Out, "GAP ")
		if i < 0 || j < 0 {
			t.Fatalf("%+v; want the fast connect to complete", r)
		}
		_, _ = fmt.Sscanf(r.Out[i:], "FAST connected in %d ms", &fastMS)
		_, _ = fmt.Sscanf(r.Out[j:], "GAP %d", &gap)
		if fastMS > 1000 || gap > 500 {
			t.Errorf("%+v; want the fast connect within 1 s and no event-loop stall over 500 ms", r)
		}
	})
}

// cRelisten is handed a socket of the host's network by a non-blocking
// connect to argv[1] (a black hole, so its handshake stays under way) and
// tries to turn it into a listener there: the kernel's shutdown(2) of a
// socket in SYN_SENT disconnects it (inet_shutdown), and a disconnected
// socket can be bound and listened on again, in its own network. It binds
// 0.0.0.0:argv[3] and waits 4 s for a connection. Then shutdown(2) as
// programs use it: SHUT_WR on a connection to argv[2] (an HTTP server,
// which answers once it sees the end of the request), and on a unix
// socket pair of the wall's own.
const cRelisten = `#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <stddef.h>
#include <unistd.h>
static const char *say(int r) { return r == 0 ? "OK" : strerror(errno); }
static int state(int fd) { struct tcp_info ti; socklen_t l = sizeof ti; return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0 ? ti.tcpi_state : -1; }
static int dial(const char *port) {
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons(atoi(port));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
	printf("CONNECT %s\n", r == 0 ? "OK" : errno == EINPROGRESS ? "EINPROGRESS" : strerror(errno));
	return fd;
}
int main(int argc, char **argv) {
	int fd = dial(argv[1]);
	printf("STATE before %d\n", state(fd));
	printf("SHUTDOWN %s\n", say(shutdown(fd, SHUT_RDWR)));
	printf("STATE after %d\n", state(fd));
	struct sockaddr_in any = {0};
	any.sin_family = AF_INET;
	any.sin_port = htons(atoi(argv[3]));
	printf("BIND %s\n", say(bind(fd, (struct sockaddr *)&any, sizeof any)));
	printf("LISTEN %s\n", say(listen(fd, 8)));
	fflush(stdout);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	if (poll(&p, 1, 4000) == 1 && (p.revents & POLLIN) && accept(fd, NULL, NULL) >= 0) {
		printf("ACCEPTED a connection\n");
	} else {
		printf("ACCEPTED none\n");
	}
	int h = dial(argv[2]);
	struct pollfd q = {.fd = h, .events = POLLOUT};
	poll(&q, 1, 5000);
	const char *req = "GET / HTTP/1.0\r\n\r\n";
	write(h, req, strlen(req));
	printf("HALF-CLOSE %s\n", say(shutdown(h, SHUT_WR)));
	char buf[4096];
	int got = 0;
	struct pollfd rq = {.fd = h, .events = POLLIN};
	while (poll(&rq, 1, 5000) == 1) {
		ssize_t n = read(h, buf + got, sizeof buf - 1 - got);
		if (n <= 0) break;
		got += n;
	}
	buf[got] = 0;
	printf("ANSWER %s\n", strstr(buf, "hello over a half-close") ? "read" : "missing");
	// The connection has ended (the server closed after its answer):
	// the kernel would bind the socket again, in the host's network.
	shutdown(h, SHUT_RDWR);
	for (int i = 0; i < 100 && state(h) != 7; i++) usleep(10000);
	printf("DEAD-STATE %d\n", state(h));
	printf("DEAD-BIND %s\n", say(bind(h, (struct sockaddr *)&any, sizeof any)));
	// The wall's own sockets bind as they would anywhere: a relative unix
	// path in the working folder, under the umask; an abstract name; UDP.
	umask(077);
	int u = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un un = {0};
	un.sun_family = AF_UNIX;
	strcpy(un.sun_path, "rel.sock");
	printf("UNIX-BIND %s\n", say(bind(u, (struct sockaddr *)&un, sizeof un)));
	struct stat stt;
	const char *st = say(stat("rel.sock", &stt));
	printf("UNIX-FILE %s %o\n", st, stt.st_mode & 0777);
	struct sockaddr_un got_un = {0};
	socklen_t gl = sizeof got_un;
	getsockname(u, (struct sockaddr *)&got_un, &gl);
	printf("UNIX-NAME %s\n", got_un.sun_path);
	listen(u, 1);
	int uc = socket(AF_UNIX, SOCK_STREAM, 0);
	printf("UNIX-CONNECT %s\n", say(connect(uc, (struct sockaddr *)&un, sizeof un)));
	struct sockaddr_un ab = {0};
	ab.sun_family = AF_UNIX;
	memcpy(ab.sun_path, "\0toybox-abstract", 16);
	int a = socket(AF_UNIX, SOCK_DGRAM, 0);
	printf("ABSTRACT-BIND %s\n", say(bind(a, (struct sockaddr *)&ab, offsetof(struct sockaddr_un, sun_path) + 16)));
	int d = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in lo = {0};
	lo.sin_family = AF_INET;
	inet_pton(AF_INET, "127.0.0.1", &lo.sin_addr);
	printf("UDP-BIND %s\n", say(bind(d, (struct sockaddr *)&lo, sizeof lo)));
	printf("BIND-BADFD %s\n", say(bind(1000, (struct sockaddr *)&lo, sizeof lo)));
	printf("BIND-NOTSOCK %s\n", say(bind(open("/dev/null", O_RDONLY), (struct sockaddr *)&lo, sizeof lo)));
	printf("BIND-FAULT %s\n", say(bind(d, (struct sockaddr *)8, sizeof lo)));
	int sp[2];
	socketpair(AF_UNIX, SOCK_STREAM, 0, sp);
	printf("PAIR-SHUTDOWN %s\n", say(shutdown(sp[0], SHUT_WR)));
	printf("PAIR-EOF %zd\n", read(sp[1], buf, 1));
	printf("BADFD %s\n", say(shutdown(1000, SHUT_WR)));
	return 0;
}
`

// TestAttackRelistenHandedOverSocket: a socket the entry put in place of
// the app's is of the host's network. While its handshake is under way,
// the kernel's shutdown(2) would disconnect it, and a disconnected socket
// listens wherever its network is: a listener on the host's network,
// reached by every host process and beyond, from inside a wall. The
// entry answers that shutdown itself (ENOTCONN, the socket still
// connecting), so the socket can be neither bound nor listened on, and
// shutdown(2) everywhere else does what the kernel's does.
func TestAttackRelistenHandedOverSocket(t *testing.T) {
	s := newStack(t, stackOpts{})
	slow := blackholeServer(t)
	hello := helloServer(t, "hello over a half-close")
	grant := fmt.Sprintf(`[{"host":"127.0.0.1","port":%s},{"host":"127.0.0.1","port":%s}]`, slow, hello)
	if st := s.mustInstall("rhea", example(t, "netclient"), q("egress", grant)); st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	s.waitEgress("rhea", "transparent")
	port := freePort(t)
	var reached atomic.Bool
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 200*time.Millisecond); err == nil {
				reached.Store(true)
				c.Close()
			}
		}
	}()
	r := s.runIn("rhea", false, map[string]string{"relisten.c": cRelisten}, "sh", "-c", `gcc -o relisten relisten.c && ./relisten "$0" "$1" "$2"`, slow, hello, port)
	close(done)
	if reached.Load() || strings.Contains(r.Out, "ACCEPTED a connection") {
		t.Errorf("a host process reached a listener the app made of a handed-over socket:\n%s", r.Out)
	}
	for _, want := range []string{
		"CONNECT EINPROGRESS", "STATE before 2", // SYN_SENT
		"SHUTDOWN Transport endpoint is not connected", "STATE after 2",
		"BIND Operation not permitted", "LISTEN Operation not permitted", "ACCEPTED none",
		"HALF-CLOSE OK", "ANSWER read",
		"PAIR-SHUTDOWN OK", "PAIR-EOF 0", "BADFD Bad file descriptor",
		"DEAD-STATE 7", "DEAD-BIND Operation not permitted",
		"UNIX-BIND OK", "UNIX-FILE OK 700", "UNIX-NAME rel.sock", "UNIX-CONNECT OK",
		"ABSTRACT-BIND OK", "UDP-BIND OK", "BIND-BADFD Bad file descriptor",
		"BIND-NOTSOCK Socket operation on non-socket", "BIND-FAULT Bad address",
	} {
		if !strings.Contains(r.Out, want) {
			t.Errorf("the attack's output lacks %q:\n%s", want, r.Out)
		}
	}
}

// cEarlyBind is a vat that binds and listens as it starts, before
// toybox-entry's Go half runs (the launcher answers those calls): its fd 3
// (a unix socket the supervisor made, of the host's network) to an
// abstract name, a unix socket of its own to a relative path, and a TCP
// listener on 127.0.0.1. It prints what it got on stderr, then serves
// $TOYBOX_LISTEN: each request connects to its TCP listener and says how
// that went.
const cEarlyBind = `#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <signal.h>
#include <unistd.h>
static const char *say(int r) { return r == 0 ? "OK" : strerror(errno); }
int main(void) {
	signal(SIGPIPE, SIG_IGN);
	struct sockaddr_un ab = {0};
	ab.sun_family = AF_UNIX;
	const char *name = "toybox-squat-early";
	memcpy(ab.sun_path + 1, name, strlen(name));
	socklen_t al = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name);
	fprintf(stderr, "EARLY-FD3-BIND %s\n", say(bind(3, (struct sockaddr *)&ab, al)));
	if (chdir(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp") != 0) return 1;
	umask(027);
	int u = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un rel = {0};
	rel.sun_family = AF_UNIX;
	strcpy(rel.sun_path, "early.sock");
	const char *r = say(bind(u, (struct sockaddr *)&rel, sizeof rel));
	struct stat st;
	const char *sr = say(stat("early.sock", &st));
	fprintf(stderr, "EARLY-OWN-BIND %s %s %o\n", r, sr, st.st_mode & 0777);
	int t = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in ta = {0};
	ta.sin_family = AF_INET;
	ta.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t tl = sizeof ta;
	const char *tb = say(bind(t, (struct sockaddr *)&ta, sizeof ta));
	const char *tls = say(listen(t, 4));
	getsockname(t, (struct sockaddr *)&ta, &tl);
	fprintf(stderr, "EARLY-TCP-LISTEN %s %s\n", tb, tls);
	int l = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un ls = {0};
	ls.sun_family = AF_UNIX;
	strncpy(ls.sun_path, getenv("TOYBOX_LISTEN"), sizeof ls.sun_path - 1);
	unlink(ls.sun_path);
	if (bind(l, (struct sockaddr *)&ls, sizeof ls) != 0 || listen(l, 16) != 0) {
		fprintf(stderr, "LISTEN %s\n", strerror(errno));
		return 1;
	}
	for (;;) {
		int c = accept(l, NULL, NULL);
		if (c < 0) continue;
		char buf[1024];
		(void)read(c, buf, sizeof buf);
		// A connect to the port it listened on before the entry ran
		// stays in the wall (that port is granted nowhere).
		int s = socket(AF_INET, SOCK_STREAM, 0);
		const char *self = say(connect(s, (struct sockaddr *)&ta, sizeof ta));
		if (strcmp(self, "OK") == 0) {
			close(accept(t, NULL, NULL));
		}
		close(s);
		char body[128], out[256];
		int bl = snprintf(body, sizeof body, "self-connect: %s\n", self);
		int ol = snprintf(out, sizeof out, "HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s", bl, body);
		(void)write(c, out, ol);
		close(c);
	}
}
`

// TestEarlyBind: an app's first binds and listens come before
// toybox-entry's Go half runs, and the launcher answers them as that half
// would, so that the app's start never waits for the entry's runtime: a
// socket of the app's own binds to a relative path in its working folder,
// under its umask; a socket of another network (fd 3, the supervisor's) is
// refused with EPERM (the kernel itself refuses that one, EINVAL: it is
// connected), and the entry's record says so once it runs; a TCP port the
// app listened on then is known to the Go half, so the app's connect to it
// stays in the wall.
func TestEarlyBind(t *testing.T) {
	s := newStack(t, stackOpts{})
	src := filepath.Join(t.TempDir(), "early.c")
	bin := filepath.Join(t.TempDir(), "early")
	if err := os.WriteFile(src, []byte(cEarlyBind), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-static", "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	port := helloServer(t, "granted")
	grant := fmt.Sprintf(`[{"host":"127.0.0.1","port":%s}]`, port)
	if st := s.mustInstall("erin", bin, q("egress", grant)); st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	s.waitEgress("erin", "transparent")
	var logs string
	testenv.WaitFor(t, 10*time.Second, func() error {
		_, logs = s.adminDo("GET", "/erin/logs", nil)
		if !strings.Contains(logs, "EARLY-OWN-BIND") {
			return fmt.Errorf("the vat's log lacks its binds:\n%s", logs)
		}
		return nil
	})
	if b, err := os.ReadFile("/proc/net/unix"); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(b), "@toybox-squat-early") {
		t.Errorf("the host's abstract namespace holds the name the app bound")
	}
	// The entry's record of the refusal comes once its Go half runs.
	testenv.WaitFor(t, 10*time.Second, func() error {
		if _, logs = s.adminDo("GET", "/erin/logs", nil); !strings.Contains(logs, "before the entry served") {
			return fmt.Errorf("the vat's log lacks the entry's record of the refusal:\n%s", logs)
		}
		return nil
	})
	for _, want := range []string{"EARLY-FD3-BIND Operation not permitted", "EARLY-OWN-BIND OK OK 750", "EARLY-TCP-LISTEN OK OK", `"refused":1`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the vat's log lacks %q:\n%s", want, logs)
		}
	}
	if code, body := s.get("/erin/"); code != http.StatusOK || !strings.Contains(body, "self-connect: OK") {
		t.Errorf("GET /erin/ = %d %q; want the app's connect to its own early listener kept inside the wall", code, body)
	}
}

// TestTransparentClosedSocketsEnd: a connection made by an app that knows
// nothing of the switchboard ends when the app closes its socket, as it
// would outside the wall. The switchboard keeps a duplicate of each socket
// it hands over (to revoke it), so close(2) alone sent no FIN: every
// connection an unmodified app made and closed stayed open at the remote
// until the vat stopped, counted against the switchboard's limits. Node
// here makes five connections and destroys each (close, no shutdown), and
// one it keeps open: the server sees the five end while node still runs,
// and the one kept still echoes after several of the entry's looks.
func TestTransparentClosedSocketsEnd(t *testing.T) {
	s := newStack(t, stackOpts{})
	type ending struct {
		first string
		at    time.Time
	}
	ended := make(chan ending, 16)
	port := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		r := bufio.NewReader(c)
		first := ""
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				ended <- ending{first, time.Now()}
				return
			}
			if first == "" {
				first = strings.TrimSpace(line)
			}
			if _, err := io.WriteString(c, "echo "+line); err != nil {
				return
			}
		}
	})
	grant := fmt.Sprintf(`[{"host":"127.0.0.1","port":%s}]`, port)
	if st := s.mustInstall("nora", example(t, "netclient"), q("egress", grant)); st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	s.waitEgress("nora", "transparent")
	js := `const net = require("net");
const port = +process.argv[2];
function once(name, keep) {
  return new Promise((ok, fail) => {
    const c = net.connect({host: "127.0.0.1", port}, () => c.write(name + "\n"));
    c.once("data", d => { if (!keep) c.destroy(); ok(c); });
    c.on("error", fail);
  });
}
(async () => {
  const kept = await once("kept", true);
  for (let i = 0; i < 5; i++) await once("closed" + i, false);
  console.log("CLOSED AT " + Date.now());
  await new Promise(r => setTimeout(r, 6000));
  kept.write("still\n");
  kept.once("data", d => { console.log("KEPT " + String(d).trim() + " AT " + Date.now()); process.exit(0); });
})().catch(e => { console.log("ERR " + e.message); process.exit(3); });
`
	r := s.runIn("nora", false, map[string]string{"conns.js": js}, "/usr/bin/node", "conns.js", port)
	var closedMS, keptMS int64
	i, j := strings.Index(r.Out, "CLOSED AT "), strings.Index(r.Out, "KEPT echo still AT ")
	if i < 0 || j < 0 {
		t.Fatalf("%+v; want five connections closed, then the kept one echoing 6 s later", r)
	}
	_, _ = fmt.Sscanf(r.Out[i:], "CLOSED AT %d", &closedMS)
	_, _ = fmt.Sscanf(r.Out[j:], "KEPT echo still AT %d", &keptMS)
	keptAt := time.UnixMilli(keptMS)
	got := map[string]time.Time{}
	for len(got) < 5 {
		select {
		case e := <-ended:
			if e.first == "kept" {
				t.Fatalf("the connection node kept open was ended (at %v; node closed the others at %v)", e.at, time.UnixMilli(closedMS))
			}
			got[e.first] = e.at
		case <-time.After(5 * time.Second):
			t.Fatalf("the server saw %d of the 5 connections node closed end (%v), 5 s after node's last word: a closed socket stays connected while the switchboard holds it\nnode: %s\nthe vat's log: %s", len(got), got, r.Out, func() string { _, l := s.adminDo("GET", "/nora/logs", nil); return l }())
		}
	}
	for name, at := range got {
		if !at.Before(keptAt) {
			t.Errorf("%s ended at %v, after node's last echo (%v): it ended with node, not when node closed it", name, at, keptAt)
		}
	}
}

// TestAttackReadHostNetwork: the app holds sockets of the host's network:
// its fd 3 (the supervisor's unix socket) always, and the sockets
// transparent egress puts in place. A socket's interface ioctls
// (SIOCGIFCONF, SIOCGIFADDR, SIOCGIFHWADDR, SIOCGARP…) answer about the
// network namespace the socket belongs to, so through either one the app
// could read the host's interfaces, their addresses and hardware
// addresses, which the wall's own network (loopback alone) hides. The
// wall's filter refuses them on every socket; the ioctls that answer about
// the socket itself still work.
func TestAttackReadHostNetwork(t *testing.T) {
	var hostIf, hostAddrs []string // an interface with an IPv4 address first
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		v4 := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				hostAddrs = append(hostAddrs, ipn.IP.String())
				v4 = true
			}
		}
		if v4 {
			hostIf = append([]string{i.Name}, hostIf...)
		} else {
			hostIf = append(hostIf, i.Name)
		}
	}
	if len(hostIf) == 0 {
		t.Fatal("the host has no interface but loopback: nothing to hide")
	}
	s := newStack(t, stackOpts{})
	hello := helloServer(t, "hello")
	if st := s.mustInstall("iris", example(t, "netclient"), q("egress", fmt.Sprintf(`[{"host":"127.0.0.1","port":%s}]`, hello))); st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	s.waitEgress("iris", "transparent")
	r := s.runIn("iris", false, map[string]string{"ifread.c": cReadHostNetwork}, "sh", "-c", `gcc -o ifread ifread.c && ./ifread "$0" "$1"`, hello, hostIf[0])
	for _, name := range hostIf {
		if strings.Contains(r.Out, "IF "+name) {
			t.Errorf("the app read the host's interface %s:\n%s", name, r.Out)
		}
	}
	for _, a := range hostAddrs {
		if strings.Contains(r.Out, a) {
			t.Errorf("the app read the host's address %s:\n%s", a, r.Out)
		}
	}
	for _, want := range []string{
		"FD3-IFCONF Operation not permitted",
		"FD3-IFINDEX Operation not permitted",
		"FD3-IFADDR Operation not permitted",
		"FD3-IFHWADDR Operation not permitted",
		"FD3-ARP Operation not permitted",
		"FD3-IWNAME Operation not permitted",
		"CONNECT OK",
		"PLACED-IFCONF Operation not permitted",
		"PLACED-IFADDR Operation not permitted",
		"PLACED-BINDTODEVICE Operation not permitted",
		"FD3-BINDTODEVICE-NONE Operation not permitted",
		"FD3-BINDTOIFINDEX Operation not permitted",
		"OWN-IFCONF Operation not permitted",
		"PLACED-ATMARK OK", "PLACED-FIONREAD OK",
	} {
		if !strings.Contains(r.Out, want) {
			t.Errorf("the attack's output lacks %q:\n%s", want, r.Out)
		}
	}
}

// cReadHostNetwork reads the network of each socket it holds with the
// interface ioctls: its fd 3, a socket connected to 127.0.0.1:argv[1]
// through transparent egress, and one of its own; argv[2] is one of the
// host's interfaces (not loopback).
const cReadHostNetwork = `#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
static void ifconf(const char *who, int fd) {
	char buf[4096];
	struct ifconf ic = {.ifc_len = sizeof buf, .ifc_buf = buf};
	if (ioctl(fd, SIOCGIFCONF, &ic) != 0) {
		printf("%s-IFCONF %s\n", who, strerror(errno));
		return;
	}
	printf("%s-IFCONF OK\n", who);
	for (int i = 0; i < ic.ifc_len / (int)sizeof(struct ifreq); i++) {
		struct ifreq *r = &ic.ifc_req[i];
		printf("%s: IF %s %s\n", who, r->ifr_name, inet_ntoa(((struct sockaddr_in *)&r->ifr_addr)->sin_addr));
	}
}
static void byname(const char *who, const char *what, int fd, unsigned long req, const char *name) {
	struct ifreq r;
	memset(&r, 0, sizeof r);
	strncpy(r.ifr_name, name, IFNAMSIZ - 1);
	if (ioctl(fd, req, &r) != 0) {
		printf("%s-%s %s\n", who, what, strerror(errno));
		return;
	}
	printf("%s-%s OK: IF %s %s\n", who, what, name, req == SIOCGIFADDR ? inet_ntoa(((struct sockaddr_in *)&r.ifr_addr)->sin_addr) : "");
}
int main(int argc, char **argv) {
	if (argc < 3) return 2;
	ifconf("FD3", 3);
	byname("FD3", "IFINDEX", 3, SIOCGIFINDEX, argv[2]);
	byname("FD3", "IFADDR", 3, SIOCGIFADDR, argv[2]);
	byname("FD3", "IFHWADDR", 3, SIOCGIFHWADDR, argv[2]);
	byname("FD3", "IWNAME", 3, 0x8B01 /* SIOCGIWNAME */, argv[2]);
	struct arpreq ar;
	memset(&ar, 0, sizeof ar);
	((struct sockaddr_in *)&ar.arp_pa)->sin_family = AF_INET;
	inet_pton(AF_INET, "127.0.0.1", &((struct sockaddr_in *)&ar.arp_pa)->sin_addr);
	strncpy(ar.arp_dev, argv[2], sizeof ar.arp_dev - 1);
	printf("FD3-ARP %s\n", ioctl(3, SIOCGARP, &ar) == 0 ? "OK" : strerror(errno));
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons(atoi(argv[1]));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	printf("CONNECT %s\n", connect(s, (struct sockaddr *)&sa, sizeof sa) == 0 ? "OK" : strerror(errno));
	ifconf("PLACED", s);
	byname("PLACED", "IFADDR", s, SIOCGIFADDR, argv[2]);
	printf("PLACED-BINDTODEVICE %s\n", setsockopt(s, SOL_SOCKET, SO_BINDTODEVICE, argv[2], strlen(argv[2])) == 0 ? "OK" : strerror(errno));
	printf("FD3-BINDTODEVICE-NONE %s\n", setsockopt(3, SOL_SOCKET, SO_BINDTODEVICE, "toyboxnone0", 11) == 0 ? "OK" : strerror(errno));
	int idx = 1;
	printf("FD3-BINDTOIFINDEX %s\n", setsockopt(3, SOL_SOCKET, SO_BINDTOIFINDEX, &idx, sizeof idx) == 0 ? "OK" : strerror(errno));
	int at = 0, q = 0;
	printf("PLACED-ATMARK %s\n", ioctl(s, SIOCATMARK, &at) == 0 ? "OK" : strerror(errno));
	printf("PLACED-FIONREAD %s\n", ioctl(s, FIONREAD, &q) == 0 ? "OK" : strerror(errno));
	int own = socket(AF_INET, SOCK_DGRAM, 0);
	ifconf("OWN", own);
	return 0;
}
`

// TestConnectStormKeepsTheLog: the vat's log is a ring (64 KiB by
// default), and the entry writes a record for each decision. A storm of
// allowed connects once pushed out of it, within a few hundred connects,
// the refusal an operator opens the log to find. Past allowedPerWindow in
// a window the allowed decisions are counted instead, and the next record
// says how many.
func TestConnectStormKeepsTheLog(t *testing.T) {
	s := newStack(t, stackOpts{})
	hello := helloServer(t, "hello")
	refused := freePort(t)
	if st := s.mustInstall("stormy", example(t, "netclient"), q("egress", fmt.Sprintf(`[{"host":"127.0.0.1","port":%s}]`, hello))); st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	s.waitEgress("stormy", "transparent")
	r := s.runIn("stormy", false, map[string]string{"storm.c": cStorm}, "sh", "-c", `gcc -o storm storm.c && ./storm "$0" "$1" 600`, hello, refused)
	if !strings.Contains(r.Out, "FIRST refused") || !strings.Contains(r.Out, "STORM 600 of 600") || !strings.Contains(r.Out, "LAST refused") {
		t.Fatalf("the storm did not run as planned:\n%s", r.Out)
	}
	target := "tcp://127.0.0.1:" + refused
	testenv.WaitFor(t, 5*time.Second, func() error {
		_, logs := s.adminDo("GET", "/stormy/logs", nil)
		refusals, allowed, counted := 0, 0, 0.0
		for line := range strings.Lines(logs) {
			i := strings.Index(line, "{")
			if i < 0 {
				continue
			}
			var rec map[string]any
			if json.Unmarshal([]byte(line[i:]), &rec) != nil || rec["msg"] != "egress decision" || rec["path"] != "transparent" {
				continue
			}
			switch {
			case rec["allow"] == true:
				allowed++
			case rec["target"] == target:
				refusals++
				n, _ := rec["unlogged_allowed"].(float64)
				counted += n
			}
		}
		// Both refusals kept; at most a window's allowed records (the
		// storm is well inside one window); the rest counted in the
		// record of the last refusal.
		if refusals != 2 || allowed > 100 || allowed+int(counted) != 600 {
			return fmt.Errorf("%d refusals of %s (want 2), %d allowed records (want at most 100) and %v counted (want 600 together) in the vat's log:\n%s", refusals, target, allowed, counted, logs)
		}
		return nil
	})
}

// cStorm connects once to 127.0.0.1:argv[2] (refused), then argv[3] times
// to 127.0.0.1:argv[1] (granted), closing each, then once more to argv[2].
const cStorm = `#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
static int dial(const char *port) {
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons(atoi(port));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
	int e = errno;
	close(fd);
	return r == 0 ? 0 : e;
}
int main(int argc, char **argv) {
	if (argc < 4) return 2;
	printf("FIRST %s\n", dial(argv[2]) == ECONNREFUSED ? "refused" : "not refused");
	int n = atoi(argv[3]), ok = 0;
	for (int i = 0; i < n; i++) {
		if (dial(argv[1]) == 0) ok++;
	}
	printf("STORM %d of %d\n", ok, n);
	printf("LAST %s\n", dial(argv[2]) == ECONNREFUSED ? "refused" : "not refused");
	return 0;
}
`
