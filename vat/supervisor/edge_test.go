package supervisor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/tests/testenv"
	"toybox/vat/edge"
	"toybox/vat/words"
)

// edgeSupervisor is a supervisor with testHosts and no store, for vats
// added with servingVat.
func edgeSupervisor(t *testing.T) *Supervisor {
	return &Supervisor{cfg: Config{Hosts: testHosts(t)}, log: slog.New(slog.DiscardHandler), vats: map[string]*vat{}}
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
