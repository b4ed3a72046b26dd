package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/labels"
	"toybox/tests/testenv"
	"toybox/vat/edge"
	"toybox/vat/words"
)

// appOnUnix serves h on a unix socket in a temp dir, as a vat's app would.
func appOnUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "app.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return sock
}

func unixTransport(sock string) *http.Transport {
	return &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
}

func TestProxyRewrite(t *testing.T) {
	sock := appOnUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path=%s raw=%s query=%s prefix=%s xff=%s host=%s",
			r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Header.Get("X-Forwarded-Prefix"), r.Header.Get("X-Forwarded-For"), r.Host)
		for k := range r.Header {
			if k != "X-Forwarded-For" && k != "X-Forwarded-Prefix" && k != "X-Forwarded-Host" && k != "X-Forwarded-Proto" && k != "Accept-Encoding" && k != "User-Agent" {
				fmt.Fprintf(w, " extra=%s", k)
			}
		}
	}))
	p := newProxy("alice", unixTransport(sock), nil)
	tests := []struct {
		name, target, want string
	}{
		{"bare", "/alice", "path=/ raw= query= prefix=/alice xff=192.0.2.1 host=example.test"},
		{"slash", "/alice/", "path=/ raw= query= prefix=/alice xff=192.0.2.1 host=example.test"},
		{"deep with query", "/alice/a/b?x=1&y=2", "path=/a/b raw= query=x=1&y=2 prefix=/alice xff=192.0.2.1 host=example.test"},
		{"escaped", "/alice/a%2Fb", "path=/a/b raw=/a%2Fb query= prefix=/alice xff=192.0.2.1 host=example.test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "http://example.test"+tt.target, nil)
			req.RemoteAddr = "192.0.2.1:1234"
			// A client's claims about who it is are dropped.
			req.Header.Set("X-Forwarded-For", "10.9.9.9")
			for _, k := range []string{"X-Real-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "X-Auth-Request-User", "Remote-User"} {
				req.Header.Set(k, "10.9.9.9")
			}
			req.Header["X_forwarded_for"] = []string{"10.9.9.9"}
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, req)
			if got := rec.Body.String(); got != tt.want {
				t.Errorf("GET %s upstream saw %q; want %q", tt.target, got, tt.want)
			}
		})
	}
}

// TestProxyWebSocketUpgrade: an Upgrade passes through both ways.
func TestProxyWebSocketUpgrade(t *testing.T) {
	sock := appOnUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n')
		fmt.Fprint(brw, "echo: "+line)
		_ = brw.Flush()
	}))
	front := httptest.NewServer(newProxy("alice", unixTransport(sock), nil))
	defer front.Close()
	c, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /alice/ws HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade = %d %s; want 101", resp.StatusCode, b)
	}
	fmt.Fprint(c, "hello\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo: hello\n" {
		t.Errorf("after upgrade read %q, %v; want echo: hello", line, err)
	}
}

// TestProxyStreams: bytes reach the client as the app writes them, in both
// directions, without waiting for the end of the body.
func TestProxyStreams(t *testing.T) {
	gotFirst := make(chan struct{})
	sock := appOnUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		br := bufio.NewReader(r.Body)
		line, _ := br.ReadString('\n') // the request body arrives before it ends
		fmt.Fprintf(w, "first: %s", line)
		w.(http.Flusher).Flush()
		<-gotFirst // the client has read it: it was not buffered
		fmt.Fprint(w, "second\n")
	}))
	front := httptest.NewServer(duplex(newProxy("alice", unixTransport(sock), nil)))
	defer front.Close()
	pr, pw := io.Pipe()
	req, err := http.NewRequest("POST", front.URL+"/alice/stream", pr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { fmt.Fprint(pw, "hello\n") }() // and the body stays open
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first: hello\n" {
		t.Fatalf("first line %q, %v; want first: hello", line, err)
	}
	close(gotFirst)
	pw.Close()
	line, err = br.ReadString('\n')
	if err != nil || line != "second\n" {
		t.Errorf("second line %q, %v", line, err)
	}
}

// TestProxyConfinesOriginWideAnswers: every vat shares the public origin,
// so an answer may not act on the others: no Clear-Site-Data, no widened
// service-worker scope, and each cookie stays below the vat's own path.
func TestProxyConfinesOriginWideAnswers(t *testing.T) {
	sock := appOnUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Clear-Site-Data", `"*"`)
		w.Header().Set("Service-Worker-Allowed", "/")
		w.Header().Set("NEL", `{"report_to":"g","max_age":31536000,"include_subdomains":true,"success_fraction":1.0}`)
		w.Header().Set("Report-To", `{"group":"g","max_age":31536000,"endpoints":[{"url":"https://evil.example/r"}]}`)
		w.Header().Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains; preload")
		w.Header().Set("Alt-Svc", `h2="evil.example:443"; ma=2592000`)
		w.Header().Set("Accept-CH", "Sec-CH-UA-Full-Version-List, Sec-CH-UA-Model")
		w.Header().Set("Critical-CH", "Sec-CH-UA-Model")
		w.Header().Add("Set-Cookie", "session=evil; Path=/")
		w.Header().Add("Set-Cookie", "other=x; Path=/bob/")
		w.Header().Add("Set-Cookie", "near=x; Path=/alice-2")
		w.Header().Add("Set-Cookie", "own=x; Path=/alice/app; HttpOnly")
		w.Header().Add("Set-Cookie", "bare=x")
		// A browser trims the name: its last Path is /bob/, Go's /alice/.
		w.Header().Add("Set-Cookie", "spaced=x; HttpOnly; Path=/alice/; Path =/bob/")
		w.Header().Add("Set-Cookie", "=broken")
		fmt.Fprint(w, "ok")
	}))
	front := httptest.NewServer(newProxy("alice", unixTransport(sock), nil))
	defer front.Close()
	resp, err := http.Get(front.URL + "/alice/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, k := range []string{"Clear-Site-Data", "Service-Worker-Allowed", "NEL", "Report-To", "Strict-Transport-Security", "Alt-Svc", "Accept-CH", "Critical-CH"} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("%s: %q passed through", k, v)
		}
	}
	got := resp.Header.Values("Set-Cookie")
	want := []string{"session=evil; Path=/; Path=/alice/", "other=x; Path=/bob/; Path=/alice/", "near=x; Path=/alice-2; Path=/alice/", "own=x; Path=/alice/app; HttpOnly; Path=/alice/app", "bare=x; Path=/alice/", "spaced=x; HttpOnly; Path=/alice/; Path =/bob/; Path=/alice/"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Set-Cookie = %q; want %q", got, want)
	}
	// As a browser reads them: every path below /alice/ (the last Path
	// attribute wins).
	for _, line := range got {
		c, err := http.ParseSetCookie(line)
		if err != nil || c.Path != "/alice/" && !strings.HasPrefix(c.Path, "/alice/") {
			t.Errorf("%q reads as path %q (%v); want below /alice/", line, c.Path, err)
		}
	}
}

// TestProxyConfinesEarlyAndLateHeaders: an informational answer (103
// Early Hints) and a trailer are answers too; neither may carry a cookie
// or an origin-wide header past the supervisor.
func TestProxyConfinesEarlyAndLateHeaders(t *testing.T) {
	sock := appOnUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</alice/style.css>; rel=preload")
		w.Header().Set("Set-Cookie", "early=evil; Path=/")
		w.Header().Set("Clear-Site-Data", `"*"`)
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Del("Set-Cookie")
		w.Header().Del("Clear-Site-Data")
		w.Header().Set("Trailer", "Set-Cookie, Clear-Site-Data, X-Checksum")
		fmt.Fprint(w, "ok")
		w.Header().Set("Set-Cookie", "late=evil; Path=/")
		w.Header().Set("Clear-Site-Data", `"*"`)
		w.Header().Set("X-Checksum", "abc")
	}))
	early, resp, body := getThroughProxy(t, sock)
	if string(body) != "ok" {
		t.Fatalf("body %q", body)
	}
	if len(early) != 1 || early[0].Get("Link") == "" {
		t.Fatalf("1xx answers seen: %v; want the 103 with its Link", early)
	}
	for _, k := range []string{"Set-Cookie", "Clear-Site-Data"} {
		if v := early[0].Get(k); v != "" {
			t.Errorf("the 103 carried %s: %q", k, v)
		}
		if v := resp.Trailer.Get(k); v != "" {
			t.Errorf("the trailer carried %s: %q", k, v)
		}
	}
	if resp.Trailer.Get("X-Checksum") != "abc" {
		t.Errorf("trailer %v; want X-Checksum kept", resp.Trailer)
	}
}

// TestProxyBoundsInformationalAnswers: a vat may send informational
// answers (103 Early Hints) before its answer, and the proxy passes each
// on. Go's transport counts none of them once a trace reads them (the
// proxy's does), so a vat could send them without end, each one passed
// to the visitor, for as long as its request was allowed. Past max1xx the
// answer is the proxy's 502.
func TestProxyBoundsInformationalAnswers(t *testing.T) {
	sock := appOnUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 1000; i++ {
			w.Header().Set("Link", fmt.Sprintf("</alice/%d.css>; rel=preload", i))
			w.WriteHeader(http.StatusEarlyHints)
		}
		fmt.Fprint(w, "ok")
	}))
	early, resp, body := getThroughProxy(t, sock)
	if len(early) > max1xx || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("%d informational answers passed on, then %d %q; want at most %d, then 502", len(early), resp.StatusCode, body, max1xx)
	}
	if !strings.Contains(string(body), "informational") {
		t.Errorf("502 body %q; want it to say why", body)
	}
}

// TestProxyScrubsUnannouncedTrailer: a trailer the answer never announced
// (no Trailer header) is read all the same; it is scrubbed too.
func TestProxyScrubsUnannouncedTrailer(t *testing.T) {
	sock := appOnUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
		w.(http.Flusher).Flush()
		w.Header().Set(http.TrailerPrefix+"Set-Cookie", "late=evil; Path=/")
		w.Header().Set(http.TrailerPrefix+"Clear-Site-Data", `"*"`)
		w.Header().Set(http.TrailerPrefix+"X-Checksum", "abc")
	}))
	front := httptest.NewServer(newProxy("alice", unixTransport(sock), nil))
	defer front.Close()
	resp, err := http.Get(front.URL + "/alice/")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, k := range []string{"Set-Cookie", "Clear-Site-Data"} {
		if v := resp.Trailer.Get(k); v != "" {
			t.Errorf("the trailer carried %s: %q", k, v)
		}
	}
	if resp.Trailer.Get("X-Checksum") != "abc" {
		t.Errorf("trailer %v; want X-Checksum kept", resp.Trailer)
	}
}

// servingVat adds vat id to s as serving, its app h on a unix socket.
func servingVat(t *testing.T, s *Supervisor, id string, h http.Handler) *instance {
	t.Helper()
	in := &instance{requests: make(chan struct{}, MaxVatRequests)}
	tr := unixTransport(appOnUnix(t, h))
	t.Cleanup(tr.CloseIdleConnections)
	in.proxy = newProxy(id, tr, s.log)
	s.mu.Lock()
	s.vats[labels.VatID(id)] = &vat{id: labels.VatID(id), logs: newRing(1), word: words.Walled, run: in}
	s.mu.Unlock()
	return in
}

// TestOneClientCannotMakeAVatBusy: a client that opens MaxVatRequests
// requests to a vat whose app reads their bodies, and never sends them,
// held every slot of the vat for as long as it liked (no body timeout):
// everyone else got 503 "busy". One client holds at most
// MaxClientVatRequests of them.
func TestOneClientCannotMakeAVatBusy(t *testing.T) {
	s := &Supervisor{cfg: Config{Hosts: testHosts(t)}, log: slog.New(slog.DiscardHandler), vats: map[labels.VatID]*vat{}}
	in := servingVat(t, s, "bob", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // as an MCP server reads a POST
		_, _ = io.WriteString(w, "got "+string(b))
	}))
	h := s.PublicHandler()

	var pipes []*io.PipeWriter
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for range MaxVatRequests {
		pr, pw := io.Pipe()
		pipes = append(pipes, pw)
		req := httptest.NewRequest("POST", "http://x/bob/", pr)
		req.ContentLength = 100
		req.RemoteAddr = "192.0.2.7:4000"
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code == http.StatusServiceUnavailable {
				mu.Lock()
				refused++
				mu.Unlock()
			}
		}()
	}
	defer func() {
		for _, pw := range pipes {
			_ = pw.CloseWithError(io.ErrUnexpectedEOF)
		}
		wg.Wait()
	}()
	// Wait until every one of them is either refused or in flight.
	testenv.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		n := refused
		mu.Unlock()
		if n+len(in.requests) == MaxVatRequests {
			return nil
		}
		return fmt.Errorf("refused %d, in flight %d: not settled", n, len(in.requests))
	})
	if got := len(in.requests); got > MaxClientVatRequests {
		t.Errorf("one client holds %d of the vat's requests; want at most %d", got, MaxClientVatRequests)
	}

	req := httptest.NewRequest("POST", "http://x/bob/", strings.NewReader("hi"))
	req.RemoteAddr = "198.51.100.9:5000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "got hi" {
		t.Errorf("another client, while the first holds its requests open: %d %q; want 200 \"got hi\"", rec.Code, rec.Body.String())
	}
}

// TestPublicRoutesOnlyAPlainFirstSegment: /alice%2Fsw.js reached vat alice
// (the id was cut from the decoded path), yet to a browser that URL has one
// segment, so a service worker script served there may claim the whole
// origin ("/"), every vat's pages, as its scope. Only a first segment that
// is the vat's name spelled plainly routes to it.
func TestPublicRoutesOnlyAPlainFirstSegment(t *testing.T) {
	s, st, _ := unwalledSupervisor(t, time.Second)
	if _, _, err := s.Install(InstallRequest{ID: "alice", Code: storeFile(t, st, shellScriptApp(t))}); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	get := func(p string) (code int, body string) {
		t.Helper()
		testenv.WaitFor(t, 30*time.Second, func() error {
			resp, err := http.Get(front.URL + p)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			code, body = resp.StatusCode, string(b)
			if code == http.StatusServiceUnavailable {
				return fmt.Errorf("GET %s: still starting: %d %s", p, code, body)
			}
			return nil
		})
		return code, body
	}
	if code, body := get("/alice/sw.js"); code != 200 || !strings.Contains(body, "GET /sw.js") {
		t.Fatalf("GET /alice/sw.js = %d %q; want the app's answer", code, body)
	}
	for _, p := range []string{"/alice%2Fsw.js", "/alice%2f", "/alice%2F..%2Fbob%2Fx", "/%61lice/sw.js"} {
		code, body := get(p)
		if code != http.StatusNotFound || !strings.Contains(body, "without percent-encoding") {
			t.Errorf("GET %s = %d %q; want 404 saying the name must be spelled plainly", p, code, body)
		}
	}
	// Sent raw, as a client that does not normalise sends them: a '|' or
	// '^' makes Go's EscapedPath drop the raw path and escape the decoded
	// one anew, whose first segment is alice.
	for _, p := range []string{"/alice%2Fsw.js|", "/alice%2Fsw.js^", "/%61lice/sw.js|", "/al%69ce/x^"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", p)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			_ = c.Close()
			t.Fatalf("GET %s raw: %v", p, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = c.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "without percent-encoding") {
			t.Errorf("GET %s (raw) = %d %q; want 404 saying the name must be spelled plainly", p, resp.StatusCode, body)
		}
	}
	// Percent-encoding after the first segment is the app's business.
	if code, body := get("/alice/a%2Fb"); code != 200 || !strings.Contains(body, "a%2Fb") {
		t.Errorf("GET /alice/a%%2Fb = %d %q; want the app's answer, the path as sent", code, body)
	}
}

// edgeSupervisor is a supervisor with testHosts and no store, for vats
// added with servingVat.
func edgeSupervisor(t *testing.T) *Supervisor {
	return &Supervisor{cfg: Config{Hosts: testHosts(t)}, log: slog.New(slog.DiscardHandler), vats: map[labels.VatID]*vat{}}
}

// seen records the requests an app got.
type seen struct {
	mu   sync.Mutex
	reqs []string
}

func (s *seen) add(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r.Method+" "+r.Host+" "+r.URL.RequestURI()+" prefix="+r.Header.Get("X-Forwarded-Prefix"))
}

func (s *seen) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

func serve(h http.Handler, method, host, target string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	req.Host = host
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestPublicRefusesForeignHost: a request whose Host is an attacker's name
// (a page on evil.example, which the attacker points at this host: DNS
// rebinding) reached the app, which answered it as its own. Only the
// public names, <vat>.<public name> and the loopback forms are served; any
// other Host is 403 before any vat sees it.
func TestPublicRefusesForeignHost(t *testing.T) {
	s := edgeSupervisor(t)
	var got seen
	servingVat(t, s, "alice", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.add(r)
		fmt.Fprint(w, "alice's page")
	}))
	h := s.PublicHandler()
	for _, host := range []string{"evil.example", "evil.example:8787", "alice.evil.example", "x.alice.x", "10.0.0.1", ""} {
		rec := serve(h, "GET", host, "/alice/")
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "not one of this server's public names") {
			t.Errorf("Host %q: %d %q; want 403 naming the rule", host, rec.Code, rec.Body)
		}
	}
	if l := got.list(); len(l) != 0 {
		t.Fatalf("the app saw %q; want nothing", l)
	}
	for _, tt := range []struct{ host, target, want string }{
		{"127.0.0.1:8787", "/alice/a?b=1", "GET 127.0.0.1:8787 /a?b=1 prefix=/alice"},
		{"[::1]:8787", "/alice/", "GET [::1]:8787 / prefix=/alice"},
		{"localhost", "/alice/a", "GET localhost /a prefix=/alice"},
		{"x:8787", "/alice/a", "GET x:8787 /a prefix=/alice"},
		{"alice.x:8787", "/bob/a", "GET alice.x:8787 /bob/a prefix="},
		{"alice.localhost:8787", "/", "GET alice.localhost:8787 / prefix="},
	} {
		before := len(got.list())
		rec := serve(h, "GET", tt.host, tt.target)
		l := got.list()
		if rec.Code != http.StatusOK || len(l) != before+1 || l[before] != tt.want {
			t.Errorf("Host %q %s: %d %q, the app saw %q; want 200 and %q", tt.host, tt.target, rec.Code, rec.Body, l[before:], tt.want)
		}
	}
	// Another vat's host reaches that vat, not alice.
	if rec := serve(h, "GET", "bob.x", "/"); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `no vat "bob"`) {
		t.Errorf("bob.x: %d %q; want 404 no vat bob", rec.Code, rec.Body)
	}
}

// TestPublicSandboxesSharedOrigin: on a shared origin every answer carries
// the sandbox policy, an opaque origin: the vat's (beside its own policy,
// which cannot loosen it), one after an informational answer (the proxy
// clears the headers set before a 1xx), the supervisor's own refusals. On
// a vat's own origin nothing is added.
func TestPublicSandboxesSharedOrigin(t *testing.T) {
	s := edgeSupervisor(t)
	servingVat(t, s, "alice", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/early":
			w.Header().Set("Link", "</s.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		case "/policy":
			w.Header().Set("Content-Security-Policy", "sandbox allow-scripts allow-same-origin")
		case "/write":
			_, _ = w.Write([]byte("no WriteHeader"))
			return
		}
		fmt.Fprint(w, "ok")
	}))
	s.vats["off"] = &vat{id: "off", logs: newRing(1), word: words.OffStopped}
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	get := func(host, target string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", front.URL+target, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, tt := range []struct {
		host, target string
		code         int
		vatPolicy    string
	}{
		{"localhost", "/alice/", 200, ""},
		{"127.0.0.1", "/alice/early", 200, ""},
		{"x", "/alice/write", 200, ""},
		{"localhost", "/alice/policy", 200, "sandbox allow-scripts allow-same-origin"},
		{"localhost", "/", 404, ""},
		{"localhost", "/nobody/", 404, ""},
		{"localhost", "/off/", 503, ""},
		{"evil.example", "/alice/", 403, ""},
	} {
		resp := get(tt.host, tt.target)
		csp := resp.Header.Values("Content-Security-Policy")
		want := []string{edge.SandboxCSP}
		if tt.vatPolicy != "" {
			want = []string{tt.vatPolicy, edge.SandboxCSP}
		}
		if resp.StatusCode != tt.code || !slices.Equal(csp, want) {
			t.Errorf("%s %s: %d, Content-Security-Policy %q; want %d and %q", tt.host, tt.target, resp.StatusCode, csp, tt.code, want)
		}
		if strings.Contains(strings.Join(csp, ","), "allow-same-origin") && tt.vatPolicy == "" {
			t.Errorf("%s %s: the sandbox allows the same origin: %q", tt.host, tt.target, csp)
		}
	}
	for _, target := range []string{"/", "/early", "/policy"} {
		resp := get("alice.x", target)
		csp := resp.Header.Values("Content-Security-Policy")
		if resp.StatusCode != 200 || slices.Contains(csp, edge.SandboxCSP) {
			t.Errorf("alice.x %s: %d, Content-Security-Policy %q; want 200 and no sandbox (its own origin)", target, resp.StatusCode, csp)
		}
	}
}

// TestCookiesStayHostOnly: a cookie with a Domain attribute reaches every
// host below that domain: Domain=localhost set by alice.localhost was sent
// to bob.localhost, and Domain=x set on the shared origin x to every
// <vat>.x. Every Domain attribute goes, however it is spelled; on a vat's
// own origin the Path stays the vat's.
func TestCookiesStayHostOnly(t *testing.T) {
	s := edgeSupervisor(t)
	servingVat(t, s, "alice", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "a=1; Domain=localhost; Path=/")
		w.Header().Add("Set-Cookie", "b=2; Path=/; domain =.x ; HttpOnly")
		w.Header().Add("Set-Cookie", "c=3; DOMAIN=alice.localhost;Domain=localhost")
		w.Header().Add("Set-Cookie", "d=4; Secure")
	}))
	h := s.PublicHandler()
	for _, tt := range []struct {
		host, target string
		want         []string
	}{
		{"alice.localhost", "/", []string{"a=1; Path=/", "b=2; Path=/; HttpOnly", "c=3", "d=4; Secure"}},
		{"localhost", "/alice/", []string{"a=1; Path=/; Path=/alice/", "b=2; Path=/; HttpOnly; Path=/alice/", "c=3; Path=/alice/", "d=4; Secure; Path=/alice/"}},
	} {
		rec := serve(h, "GET", tt.host, tt.target)
		if got := rec.Result().Header.Values("Set-Cookie"); !slices.Equal(got, tt.want) {
			t.Errorf("%s: Set-Cookie = %q; want %q", tt.host, got, tt.want)
		}
		for _, line := range rec.Result().Header.Values("Set-Cookie") {
			if c, err := http.ParseSetCookie(line); err != nil || c.Domain != "" {
				t.Errorf("%s: %q reads with domain %q (%v)", tt.host, line, c.Domain, err)
			}
		}
	}
}

// frontHeaders are what a vat sends hoping a proxy in front obeys them.
var frontHeaders = map[string]string{
	"X-Accel-Redirect":         "/internal/etc/shadow",
	"X-Accel-Buffering":        "no",
	"X-Accel-Limit-Rate":       "1",
	"x-accel-expires":          "0",
	"X-Sendfile":               "/etc/shadow",
	"X-Sendfile2":              "/etc/shadow 0-",
	"X-Lighttpd-Send-File":     "/etc/shadow",
	"X-Lighttpd-Send-Tempfile": "/etc/shadow",
	"Set-Login":                "logged-in",
}

// TestProxyDropsFrontDirectives: a vat's answer may not order the server
// in front of toybox (nginx's X-Accel-Redirect serves any file it can
// read; X-Sendfile, lighttpd's) nor set the origin's login status
// (Set-Login): on the final answer, a 1xx answer and the trailer alike.
// Other headers pass.
func TestProxyDropsFrontDirectives(t *testing.T) {
	sock := appOnUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range frontHeaders {
			w.Header()[k] = []string{v}
		}
		w.Header().Set("X-Kept", "early")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("X-Kept", "final")
		w.Header().Set("Trailer", "X-Accel-Redirect, X-Sendfile, Set-Login, X-Kept-Late")
		fmt.Fprint(w, "ok")
		for k, v := range frontHeaders {
			w.Header()[http.TrailerPrefix+k] = []string{v}
		}
		w.Header().Set("X-Kept-Late", "late")
	}))
	early, resp, _ := getThroughProxy(t, sock)
	if len(early) != 1 || early[0].Get("X-Kept") != "early" || resp.Header.Get("X-Kept") != "final" || resp.Trailer.Get("X-Kept-Late") != "late" {
		t.Fatalf("103 %v, answer %v, trailer %v; want X-Kept in each", early, resp.Header, resp.Trailer)
	}
	for k := range frontHeaders {
		for where, h := range map[string]http.Header{"103": http.Header(early[0]), "answer": resp.Header, "trailer": resp.Trailer} {
			if v := h.Get(k); v != "" {
				t.Errorf("%s carried %s: %q", where, k, v)
			}
		}
	}
}

// framedServer serves h as toybox serve does: each connection's framing
// followed (edge.Listener, edge.ConnContext).
func framedServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = edge.Listener(srv.Listener)
	srv.Config.ConnContext = edge.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// TestPublicClosesAmbiguousFraming: a request with both Content-Length and
// Transfer-Encoding is read by Go as chunked; a proxy in front that reads
// the Content-Length sees one request where Go sees two, the second
// smuggled past the proxy's rules (RFC 9112 section 6.1). Go kept the
// connection open and handed the smuggled request to the vat. Now the
// connection closes after the first answer, and the second never runs.
// A request framed one way only keeps its connection.
func TestPublicClosesAmbiguousFraming(t *testing.T) {
	s := edgeSupervisor(t)
	var got seen
	servingVat(t, s, "alice", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.add(r)
		fmt.Fprint(w, "ok")
	}))
	addr := framedServer(t, s.PublicHandler())
	resp, closed := testenv.Smuggle(t, addr, "/alice/upload", "/alice/smuggled")
	if resp.StatusCode != 200 || !resp.Close || !closed {
		t.Errorf("the ambiguous request: %d, Connection %q, closed %v; want 200 and the connection closed", resp.StatusCode, resp.Header.Get("Connection"), closed)
	}
	if l := got.list(); !slices.Equal(l, []string{"POST localhost /upload prefix=/alice"}) {
		t.Errorf("the app saw %q; want the POST alone, not the smuggled GET", l)
	}

	// Framed by Transfer-Encoding alone: the connection stays.
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c2, "POST /alice/a HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nGET /alice/b HTTP/1.1\r\nHost: localhost\r\n\r\n")
	br2 := bufio.NewReader(c2)
	for _, want := range []string{"a", "b"} {
		resp, err := http.ReadResponse(br2, nil)
		if err != nil {
			t.Fatalf("request %s on a kept connection: %v", want, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 || resp.Close {
			t.Errorf("request %s: %d, close %v; want 200 and the connection kept", want, resp.StatusCode, resp.Close)
		}
	}
}

// getThroughProxy GETs /alice/ through a vat proxy to the app on sock, and
// returns the 1xx answers' headers, the answer and its body (read, so its
// trailer is in).
func getThroughProxy(t *testing.T, sock string) ([]textproto.MIMEHeader, *http.Response, []byte) {
	t.Helper()
	front := httptest.NewServer(newProxy("alice", unixTransport(sock), nil))
	defer front.Close()
	var early []textproto.MIMEHeader
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			early = append(early, h)
			return nil
		},
	})
	req, _ := http.NewRequestWithContext(ctx, "GET", front.URL+"/alice/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return early, resp, body
}

// TestProxyFailuresAreRateLimited: every answer a vat broke off (or could
// not give) was one record of the supervisor's, and a broken-off body one
// more line on the standard logger, without the vat's name: a vat and its
// visitors made thousands a second, past journald's rate limit for the
// unit, which then drops the supervisor's other records. They are counted
// past a rate, per vat, and the next record says how many.
func TestProxyFailuresAreRateLimited(t *testing.T) {
	sock := appOnUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		if r.URL.Path == "/short" { // promises 100 bytes, sends 3
			fmt.Fprint(brw, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
			_ = brw.Flush()
		} // else: no answer at all
	}))
	var out testenv.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	var std testenv.Buffer
	stdlog.SetOutput(&std)
	defer stdlog.SetOutput(io.Discard) // as the test binary had it: nothing reads stderr
	tr := unixTransport(sock)
	defer tr.CloseIdleConnections()
	front := httptest.NewServer(newProxy("alice", tr, log))
	defer front.Close()

	const n = 400
	began := time.Now()
	for i := range n {
		p := "/alice/short"
		if i%2 == 1 {
			p = "/alice/none"
		}
		resp, err := http.Get(front.URL + p)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}
	if s := std.String(); s != "" {
		t.Errorf("the standard logger got lines: %.200q", s)
	}
	elapsed := time.Since(began)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if limit := proxyLogBurst + int(elapsed.Seconds()*proxyLogRate) + 1; len(lines) > limit || len(lines) >= n {
		t.Errorf("%d failed answers in %v made %d records; want at most the burst and the rate's (%d)", n, elapsed, len(lines), limit)
	}
	sawBody := false
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("record %q: %v", l, err)
		}
		if rec["vat"] != "alice" {
			t.Errorf("record without the vat: %s", l)
		}
		if strings.Contains(fmt.Sprint(rec["error"]), "body copy") {
			sawBody = true
		}
	}
	if !sawBody {
		t.Errorf("no record of a broken-off body among %d", len(lines))
	}
	// Past the rate, the next record that gets through says how many went
	// unlogged.
	pl := newProxyLog(log, "bob")
	for range proxyLogBurst + 50 {
		pl.warn("proxy to vat failed", "x")
	}
	time.Sleep(2 * time.Second / proxyLogRate) // a token back
	pl.warn("proxy to vat failed", "x")
	last := strings.TrimSpace(out.String())
	last = last[strings.LastIndex(last, "\n")+1:]
	if !strings.Contains(last, `"unlogged":50`) {
		t.Errorf("the record after 50 unlogged ones: %s; want \"unlogged\":50", last)
	}
	// When the instance ends, a count not yet written is.
	before := strings.Count(out.String(), "\n")
	for range 7 {
		pl.warn("proxy to vat failed", "x") // mostly past the rate
	}
	written := strings.Count(out.String(), "\n") - before
	pl.flush()
	last = strings.TrimSpace(out.String())
	last = last[strings.LastIndex(last, "\n")+1:]
	if want := fmt.Sprintf(`"unlogged":%d`, 7-written); written >= 7 || !strings.Contains(last, want) {
		t.Errorf("the record at the end, after 7 failures of which %d were written: %s; want %s", written, last, want)
	}
}

// TestPublicBoundsAnUnreadBody: a client sent a request's headers with
// Content-Length: 100 and never its body. To a vat that answered without
// reading the body, or to no vat at all (404), Go's server read the rest of
// the body before or after the answer, with no deadline: the connection
// stayed active, never idle, so neither ReadHeaderTimeout, IdleTimeout nor
// ConnGuard's idle shedding ended it. A few clients held every one of
// MaxPublicConns that way for as long as they liked. The answer now goes
// at once, the connection closes after it, and the rest of the body has
// bodyDrainTimeout to come.
func TestPublicBoundsAnUnreadBody(t *testing.T) {
	s := edgeSupervisor(t)
	servingVat(t, s, "alice", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An app that refuses before it reads (a missing login, say).
		w.Header().Set("Connection", "close")
		http.Error(w, "log in first", http.StatusUnauthorized)
	}))
	addr := framedServer(t, s.PublicHandler())
	tests := []struct {
		name, path string
		want       int
	}{
		{"no vat", "/nosuch/", http.StatusNotFound},
		{"a vat that does not read", "/alice/", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n", tt.path)
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("POST %s without its body: %v; want the answer at once", tt.path, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != tt.want {
				t.Errorf("POST %s = %d; want %d", tt.path, resp.StatusCode, tt.want)
			}
			start := time.Now()
			_ = c.SetReadDeadline(start.Add(bodyDrainTimeout + 5*time.Second))
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				t.Errorf("after the answer, the body never sent: %v after %v; want the connection closed within %v", err, time.Since(start).Round(time.Second), bodyDrainTimeout)
			}
		})
	}
}

// TestPublicBoundsAnUnreadAnswer: a client that pipelined requests on one
// connection and read none of the answers held it for as long as it
// liked: once the socket's buffers filled, the server's write of the
// next answer blocked with no deadline (no WriteTimeout, which would end
// every long stream), the connection stayed active, and neither
// IdleTimeout nor ConnGuard's idle shedding ended it. No vat was needed:
// 404s did it. A write that makes no progress for sendTimeout now ends
// the connection.
func TestPublicBoundsAnUnreadAnswer(t *testing.T) {
	s := edgeSupervisor(t)
	s.sendWait = time.Second
	srv := httptest.NewUnstartedServer(s.PublicHandler())
	srv.Listener = edge.Listener(srv.Listener)
	srv.Config.ConnContext = edge.ConnContext
	closed := make(chan struct{}, 1)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET /nosuch/" + strings.Repeat("x", 1000) + " HTTP/1.1\r\nHost: localhost\r\n\r\n"
	go func() {
		for {
			if _, err := io.WriteString(c, req); err != nil {
				return // the server closed it
			}
		}
	}()
	select {
	case <-closed:
	case <-time.After(s.sendWait + 10*time.Second):
		t.Fatalf("a connection whose answers are never read is still open after %v; want it closed within %v of its writes stalling", s.sendWait+10*time.Second, s.sendWait)
	}
}
