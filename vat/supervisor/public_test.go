package supervisor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
