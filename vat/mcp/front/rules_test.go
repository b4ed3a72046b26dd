package front

import (
	"net/http"
	"testing"
)

var hostTests = []struct {
	name, host, port string
	allow            bool
}{
	{"localhost with the port", "localhost:8787", "8787", true},
	{"127.0.0.1 with the port", "127.0.0.1:8787", "8787", true},
	{"[::1] with the port", "[::1]:8787", "8787", true},
	{"upper case", "LOCALHOST:8787", "8787", true},
	{"a vat's origin below localhost", "alice.localhost:8787", "8787", true},
	{"public name", "toybox.example.com", "8787", true},
	{"public name with a port", "toybox.example.com:443", "8787", true},
	{"a vat's origin below the public name", "alice.toybox.example.com", "8787", true},
	{"localhost on port 80 without one", "localhost", "80", true},
	{"a unix socket: any loopback form", "localhost:1234", "", true},
	{"rebinding", "evil.example.com", "8787", false},
	{"rebinding with our port", "evil.example.com:8787", "8787", false},
	{"localhost, another port", "localhost:3000", "8787", false},
	{"localhost without a port, not on 80", "localhost", "8787", false},
	{"a name ending like ours", "eviltoybox.example.com", "8787", false},
	{"two labels below ours", "a.b.toybox.example.com", "8787", false},
	{"our name as a label of another", "toybox.example.com.evil.test", "8787", false},
	{"trailing dot", "localhost.:8787", "8787", false},
	{"empty", "", "8787", false},
	{"userinfo", "user@localhost:8787", "8787", false},
	{"empty port", "localhost:", "8787", false},
	{"bare IPv6", "::1", "8787", false},
	{"other loopback address", "127.0.0.2:8787", "8787", false},
	{"unix socket, foreign name", "evil.example.com", "", false},
}

func TestCheckHost(t *testing.T) {
	ru := Rules{PublicHosts: []string{"toybox.example.com"}}
	for _, tt := range hostTests {
		t.Run(tt.name, func(t *testing.T) {
			d := ru.CheckHost(Ask{Host: tt.host, LocalPort: tt.port})
			if d.Allow != tt.allow {
				t.Errorf("CheckHost(%q on port %q) = %+v; want allow %v", tt.host, tt.port, d, tt.allow)
			}
			if !d.Allow && (d.Status != http.StatusForbidden || d.Reason == "") {
				t.Errorf("a refusal %+v has no 403 or no reason", d)
			}
		})
	}
}

func TestCheckOrigin(t *testing.T) {
	ru := Rules{Origins: []string{"http://localhost:6274"}}
	tests := []struct {
		name    string
		origins []string
		site    string
		allow   bool
	}{
		{"no Origin (curl, an SDK)", nil, "", true},
		{"same origin", []string{"http://localhost:8787"}, "same-origin", true},
		{"same origin, https in front", []string{"https://localhost:8787"}, "", true},
		{"same origin, letter case", []string{"http://LocalHost:8787"}, "", true},
		{"listed origin", []string{"http://localhost:6274"}, "cross-site", true},
		{"no Origin, typed in the address bar", nil, "none", true},
		{"another site", []string{"http://evil.example.com"}, "cross-site", false},
		{"another local port", []string{"http://localhost:3000"}, "same-site", false},
		{"listed origin with a slash", []string{"http://localhost:6274/"}, "", false},
		{"null", []string{"null"}, "", false},
		{"empty", []string{""}, "", false},
		{"two", []string{"http://localhost:8787", "http://localhost:8787"}, "", false},
		{"file", []string{"file://"}, "", false},
		{"a path", []string{"http://localhost:8787/x"}, "", false},
		{"userinfo", []string{"http://a@localhost:8787"}, "", false},
		{"no Origin, from another site", nil, "cross-site", false},
		{"no Origin, from a sibling site", nil, "same-site", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := ru.CheckOrigin(Ask{Host: "localhost:8787", LocalPort: "8787", Origins: tt.origins, SecFetchSite: tt.site})
			if d.Allow != tt.allow {
				t.Errorf("CheckOrigin(%q, Sec-Fetch-Site %q) = %+v; want allow %v", tt.origins, tt.site, d, tt.allow)
			}
		})
	}
}

// TestCheckHostFirst: a rebinding request with its own (matching) Origin
// is refused for its Host.
func TestCheckHostFirst(t *testing.T) {
	d := Rules{}.Check(Ask{Host: "evil.example.com", LocalPort: "8787", Origins: []string{"http://evil.example.com"}})
	if d.Allow || d.Status != http.StatusForbidden {
		t.Errorf("Check(rebinding) = %+v; want 403", d)
	}
}

func FuzzCheckHost(f *testing.F) {
	for _, tt := range hostTests {
		f.Add(tt.host, tt.port)
	}
	ru := Rules{PublicHosts: []string{"toybox.example.com"}}
	f.Fuzz(func(t *testing.T, host, port string) {
		d := ru.CheckHost(Ask{Host: host, LocalPort: port})
		if !d.Allow {
			return
		}
		h, _, ok := splitHost(host)
		if !ok || !(loopbackName(h) || h == "toybox.example.com" || len(h) > len(".toybox.example.com") && h[len(h)-len(".toybox.example.com"):] == ".toybox.example.com") {
			t.Fatalf("CheckHost allowed %q", host)
		}
	})
}

func TestParseOrigin(t *testing.T) {
	for _, ok := range []string{"http://localhost:6274", "https://inspector.example.com", "http://[::1]:80"} {
		if _, err := ParseOrigin(ok); err != nil {
			t.Errorf("ParseOrigin(%q) = %v; want ok", ok, err)
		}
	}
	for _, bad := range []string{"", "localhost:6274", "http://localhost:6274/", "ftp://x", "http://X.example", "http://a@b", "null", "http://x?y"} {
		if _, err := ParseOrigin(bad); err == nil {
			t.Errorf("ParseOrigin(%q) accepted it", bad)
		}
	}
}
