package switchboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/net/websocket"

	"toybox/schema"
)

// TestLogURLKeepsNoSecrets: a request's or a WebSocket's URL is logged as
// scheme://host:port/path: the userinfo, the query and the fragment the
// caller sent (an API key in ?key=, a password in user:pass@) never reach
// the journal, allowed or refused, in the target or in the reason.
func TestLogURLKeepsNoSecrets(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer hs.Close()
	ws := httptest.NewServer(websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil },
		Handler:   func(c *websocket.Conn) { _, _ = io.Copy(c, c) },
	})
	defer ws.Close()
	hport := hs.Listener.Addr().(*net.TCPAddr).Port
	wport := ws.Listener.Addr().(*net.TCPAddr).Port
	f := newFixture(t, nil)
	f.dns.Set("web.test", mustAddr("127.0.0.1"))
	c := dial(t, f.local)

	rc, err := doRequest(t, c.root, "GET", fmt.Sprintf("http://web.test:%d/maps?key=SECRET#frag", hport), nil, "")
	if err != nil || rc.status != 200 {
		t.Fatalf("request with a query = %v, %v", rc, err)
	}
	mustContain(t, "log", f.log.String(), fmt.Sprintf(`"op":"request","target":"http://web.test:%d/maps","addresses":["127.0.0.1"],"vetted":"127.0.0.1:%d","allow":true`, hport, hport))
	for _, u := range []string{
		fmt.Sprintf("http://user:pass@web.test:%d/userinfo?key=SECRET#frag", hport),
		fmt.Sprintf("ws://web.test:%d/wsscheme?key=SECRET#frag", hport),
		"web.test/noscheme?key=SECRET#frag",
		"http://web.test:%zz/badport?key=SECRET#frag",
	} {
		if _, err := doRequest(t, c.root, "GET", u, nil, ""); err == nil {
			t.Errorf("request(%s) succeeded", u)
		}
	}
	mustContain(t, "log", f.log.String(), fmt.Sprintf(`"op":"request","target":"http://web.test:%d/userinfo","addresses":[],"vetted":"","allow":false,"reason":"userinfo not allowed in URL"`, hport))
	mustContain(t, "log", f.log.String(), fmt.Sprintf(`"op":"request","target":"ws://web.test:%d/wsscheme","addresses":[],"vetted":"","allow":false,"reason":"request takes http or https URLs; use webSocket for ws://web.test:%d/wsscheme"`, hport, hport))
	mustContain(t, "log", f.log.String(), `"op":"request","target":"(unparsable URL, 33 bytes)","addresses":[],"vetted":"","allow":false,"reason":"URL has no scheme (http, https, ws or wss)"`)
	mustContain(t, "log", f.log.String(), `"op":"request","target":"(unparsable URL, 43 bytes)","addresses":[],"vetted":"","allow":false,"reason":"bad URL: invalid port"`)

	webSocket := func(u string) error {
		fut, release := c.root.WebSocket(context.Background(), func(p schema.Handle_webSocket_Params) error {
			if err := p.SetUrl(u); err != nil {
				return err
			}
			return p.SetDownstream(schema.MessageStream_ServerToClient(&msgCollector{got: make(chan struct{}, 16), closed: make(chan struct{})}))
		})
		defer release()
		_, err := fut.Struct()
		return err
	}
	if err := webSocket(fmt.Sprintf("ws://web.test:%d/chat?key=SECRET#frag", wport)); err != nil {
		t.Fatalf("webSocket with a query: %v", err)
	}
	mustContain(t, "log", f.log.String(), fmt.Sprintf(`"op":"webSocket","target":"ws://web.test:%d/chat","addresses":["127.0.0.1"],"vetted":"127.0.0.1:%d","allow":true`, wport, wport))
	for _, u := range []string{
		fmt.Sprintf("ws://user:pass@web.test:%d/userinfo?key=SECRET#frag", wport),
		fmt.Sprintf("http://web.test:%d/httpscheme?key=SECRET#frag", wport),
	} {
		if err := webSocket(u); err == nil {
			t.Errorf("webSocket(%s) succeeded", u)
		}
	}
	mustContain(t, "log", f.log.String(), fmt.Sprintf(`"op":"webSocket","target":"ws://web.test:%d/userinfo","addresses":[],"vetted":"","allow":false,"reason":"userinfo not allowed in URL"`, wport))
	mustContain(t, "log", f.log.String(), fmt.Sprintf(`"op":"webSocket","target":"http://web.test:%d/httpscheme","addresses":[],"vetted":"","allow":false,"reason":"webSocket takes ws or wss URLs, not http://web.test:%d/httpscheme"`, wport, wport))

	for _, secret := range []string{"SECRET", "pass", "user:", "frag"} {
		if strings.Contains(f.log.String(), secret) {
			t.Errorf("the log holds %q:\n%s", secret, f.log.String())
		}
	}
}

func TestLogURL(t *testing.T) {
	for _, tt := range []struct{ raw, want string }{
		{"http://example.com/a/b?key=s#f", "http://example.com:80/a/b"},
		{"https://u:p@Example.com:8443/x%2Fy?q", "https://Example.com:8443/x%2Fy"},
		{"ws://example.com", "ws://example.com:80"},
		{"wss://[2001:db8::1]/s?t=1", "wss://[2001:db8::1]:443/s"},
		{"ftp://[2001:db8::1]/f?x", "ftp://[2001:db8::1]/f"},
		{"http://example.com/a b?key=s", "http://example.com:80/a%20b"},
		{"example.com/?key=s", "(unparsable URL, 18 bytes)"},
		{"http:example.com?key=s", "(unparsable URL, 22 bytes)"},
		{"http://exa mple.com/?key=s", "(unparsable URL, 26 bytes)"},
		{"http://example.com/\x00?key=s", "(unparsable URL, 26 bytes)"},
		{"", "(unparsable URL, 0 bytes)"},
	} {
		if got := logURL(tt.raw); got != tt.want {
			t.Errorf("logURL(%q) = %q; want %q", tt.raw, got, tt.want)
		}
	}
}

// TestRefusalLogBounded: one peer looping on refused checks gets at most
// refusalsPerWindow records per window; the rest are counted, and its next
// record (here an allowed one) says how many. Every refusal is accounted
// for.
func TestRefusalLogBounded(t *testing.T) {
	f := newFixture(t, nil)
	c := dial(t, f.public)
	ctx := context.Background()
	const n = 3 * refusalsPerWindow
	for range n {
		if d, err := check(ctx, c.root, "tcp", "127.0.0.1", 22); err != nil || d.allow {
			t.Fatalf("check = %+v, %v; want refused", d, err)
		}
	}
	f.dns.Set("ok.test", mustAddr("93.184.216.34"))
	if d, err := check(ctx, c.root, "tcp", "ok.test", 443); err != nil || !d.allow {
		t.Fatalf("check(ok.test) = %+v, %v; want allowed", d, err)
	}
	logged, unlogged := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(f.log.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "egress decision" {
			continue
		}
		if rec["allow"] == false {
			logged++
		}
		if u, ok := rec["unlogged"].(float64); ok {
			unlogged += int(u)
		}
	}
	if logged > refusalsPerWindow {
		t.Errorf("%d refusals in one burst made %d records; at most %d", n, logged, refusalsPerWindow)
	}
	if logged+unlogged != n {
		t.Errorf("records (%d) and unlogged counts (%d) account for %d refusals; made %d", logged, unlogged, logged+unlogged, n)
	}
}

// TestAllowedLogBounded: a storm of allowed decisions (a vat connecting in
// a loop) made one record each, 0.5 MiB of log a second. At most
// allowedPerWindow records per window; the rest are counted and the next
// record says how many (unlogged_allowed). Refusals keep their own count:
// every refusal after the storm still gets its record.
func TestAllowedLogBounded(t *testing.T) {
	f := newFixture(t, nil)
	c := dial(t, f.public)
	ctx := context.Background()
	f.dns.Set("ok.test", mustAddr("93.184.216.34"))
	const n = 3 * allowedPerWindow
	for range n {
		if d, err := check(ctx, c.root, "tcp", "ok.test", 443); err != nil || !d.allow {
			t.Fatalf("check(ok.test) = %+v, %v; want allowed", d, err)
		}
	}
	const refused = 10
	for range refused {
		if d, err := check(ctx, c.root, "tcp", "127.0.0.1", 22); err != nil || d.allow {
			t.Fatalf("check = %+v, %v; want refused", d, err)
		}
	}
	allowed, refusals, unlogged := 0, 0, 0
	for _, line := range strings.Split(strings.TrimSpace(f.log.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "egress decision" {
			continue
		}
		if rec["allow"] == true {
			allowed++
		} else {
			refusals++
		}
		if u, ok := rec["unlogged_allowed"].(float64); ok {
			unlogged += int(u)
		}
	}
	if allowed > allowedPerWindow {
		t.Errorf("%d allowed checks in one burst made %d records; at most %d", n, allowed, allowedPerWindow)
	}
	if allowed+unlogged != n {
		t.Errorf("records (%d) and unlogged_allowed counts (%d) account for %d allowed checks; made %d", allowed, unlogged, allowed+unlogged, n)
	}
	if refusals != refused {
		t.Errorf("%d refusals after the storm made %d records; want every one", refused, refusals)
	}
}
