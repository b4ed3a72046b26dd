package supervisor

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

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
	get := func(p string) (int, string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			resp, err := http.Get(front.URL + p)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond) // still starting
				continue
			}
			return resp.StatusCode, string(b)
		}
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
