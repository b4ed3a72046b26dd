//go:build linux

package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"testing"

	"toybox/tests/testenv"
)

// TestPublicEdge runs two walled vats (tests/pagevat), alice and bob,
// behind a real supervisor, and attacks the public edge as a hostile vat's
// page in a visitor's browser, a page on a rebinding name, a proxy that
// frames requests differently and a vat that orders the proxy in front
// would.
func TestPublicEdge(t *testing.T) {
	s := newStack(t, stackOpts{})
	for _, id := range []string{"alice", "bob"} {
		s.mustInstall(id, example(t, "pagevat"), "")
	}
	_, port, _ := net.SplitHostPort(s.http)
	secret := func(id string) string {
		code, body := s.get("/" + id + "/secret")
		if code != http.StatusOK || !strings.HasPrefix(body, "secret-of-"+id+"-") {
			t.Fatalf("GET /%s/secret = %d %q", id, code, body)
		}
		return body
	}
	bobSecret := secret("bob")
	seen := func(id string) string {
		code, body := s.get("/" + id + "/seen")
		if code != http.StatusOK {
			t.Fatalf("GET /%s/seen = %d %q", id, code, body)
		}
		return body
	}

	t.Run("browser", func(t *testing.T) {
		own := func(id string) string { return "http://" + id + ".localhost:" + port }
		shared := "http://localhost:" + port
		// The edge as it was: every vat on one origin, routed by path,
		// with no sandbox. Its cookies were confined to /<vat>/ as the
		// supervisor confined them.
		unfixed := httptest.NewServer(&httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				id, rest, _ := strings.Cut(strings.TrimPrefix(pr.In.URL.Path, "/"), "/")
				pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.URL.Path = "http", s.http, "/"+rest
				pr.Out.Host = id + ".localhost:" + port
				pr.Out.Header.Set("X-Vat", id)
			},
			ModifyResponse: func(r *http.Response) error {
				id := r.Request.Header.Get("X-Vat")
				for i, c := range r.Header["Set-Cookie"] {
					r.Header["Set-Cookie"][i] = c + "; Path=/" + id + "/"
				}
				return nil
			},
		})
		defer unfixed.Close()
		for _, tt := range []struct {
			name, victim, attacker, secretURL string
			fixed                             bool
		}{
			{"own origins", own("bob") + "/", own("alice") + "/attack", own("bob") + "/secret", true},
			{"shared origin", shared + "/bob/", shared + "/alice/attack", shared + "/bob/secret", true},
			{"shared origin without the sandbox", unfixed.URL + "/bob/", unfixed.URL + "/alice/attack", unfixed.URL + "/bob/secret", false},
		} {
			t.Run(tt.name, func(t *testing.T) {
				b := startBrowser(t)
				// The visitor opens bob's page first: its cookie and its
				// storage are set, in bob's origin.
				b.open(tt.victim)
				if got := b.eval(`document.getElementById("s").textContent`); got != bobSecret {
					t.Fatalf("bob's page shows %q; want its secret", got)
				}
				b.open(tt.attacker + "?" + url.Values{"victim": {tt.victim}, "secret": {tt.secretURL}}.Encode())
				raw := b.eval("window.attack")
				var got map[string]string
				if err := json.Unmarshal([]byte(raw), &got); err != nil {
					t.Fatalf("the attack page answered %q: %v", raw, err)
				}
				t.Logf("alice's script in the browser got: %s", raw)
				var read []string
				for _, k := range []string{"page", "frameCookie", "frameStorage", "cookie", "storage", "fetch"} {
					if strings.Contains(got[k], bobSecret) {
						read = append(read, k)
					}
				}
				if tt.fixed && len(read) > 0 {
					t.Errorf("alice's page read bob's secret through %q: %s", read, raw)
				}
				if !tt.fixed && len(read) < 4 {
					t.Errorf("without the sandbox alice's page read bob's secret only through %q (%s); the attack should succeed there (page, cookies, storage, fetch)", read, raw)
				}
				if tt.name == "shared origin" && got["origin"] != "null" {
					t.Errorf("a page on the shared origin runs in origin %q; want an opaque one (null)", got["origin"])
				}
			})
		}
	})

	t.Run("foreign host", func(t *testing.T) {
		// A page on evil.example, a name its owner points at this host
		// (DNS rebinding), sends its own name as the Host.
		for _, host := range []string{"evil.example", "evil.example:" + port, "alice.evil.example"} {
			resp := rawRequest(t, s.http, "GET /alice/rebound HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
			if resp.code != http.StatusForbidden || !strings.Contains(resp.body, "not one of this server's public names") {
				t.Errorf("Host %s: %d %q; want 403", host, resp.code, resp.body)
			}
		}
		if l := seen("alice"); strings.Contains(l, "rebound") {
			t.Errorf("alice's app saw a request for a foreign host:\n%s", l)
		}
		own := rawRequest(t, s.http, "GET /own HTTP/1.1\r\nHost: alice.localhost:"+port+"\r\nConnection: close\r\n\r\n")
		if own.code != http.StatusNotFound || !strings.Contains(seen("alice"), "GET /own") {
			t.Errorf("Host alice.localhost: %d %q; want the app's own answer (its 404) and the app to see GET /own", own.code, own.body)
		}
	})

	t.Run("smuggling", func(t *testing.T) {
		resp, closed := testenv.Smuggle(t, s.http, "/bob/upload", "/bob/smuggled")
		if !resp.Close || !closed {
			t.Errorf("the answer to a request with both Content-Length and Transfer-Encoding: Connection %q, closed %v; want the connection closed after it", resp.Header.Get("Connection"), closed)
		}
		if l := seen("bob"); !strings.Contains(l, "POST /upload") || strings.Contains(l, "smuggled") {
			t.Errorf("bob's app saw:\n%s\nwant the POST and not the smuggled GET", l)
		}
	})

	t.Run("front directives", func(t *testing.T) {
		var early []textproto.MIMEHeader
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
				early = append(early, h)
				return nil
			},
		})
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.http+"/alice/directives", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(early) != 1 || early[0].Get("X-Kept") != "early" || resp.Header.Get("X-Kept") != "final" || resp.Trailer.Get("X-Kept-Late") != "late" {
			t.Fatalf("103 %v, answer %v, trailer %v; want X-Kept in each (the vat sent them)", early, resp.Header, resp.Trailer)
		}
		for _, k := range []string{"X-Accel-Redirect", "X-Accel-Buffering", "X-Sendfile", "X-Lighttpd-Send-File", "X-Lighttpd-Send-Tempfile", "Set-Login"} {
			for where, h := range map[string]http.Header{"the 103": http.Header(early[0]), "the answer": resp.Header, "the trailer": resp.Trailer} {
				if v := h.Get(k); v != "" {
					t.Errorf("%s carried %s: %q", where, k, v)
				}
			}
		}
	})
}

type rawAnswer struct {
	code int
	body string
}

// rawRequest sends req as it is on a new connection to addr.
func rawRequest(t *testing.T, addr, req string) rawAnswer {
	t.Helper()
	c := testenv.Dial(t, addr)
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return rawAnswer{resp.StatusCode, string(b)}
}
