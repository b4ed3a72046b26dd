package edge

import (
	"net/url"
	"strings"
	"testing"
)

func mustHosts(t testing.TB, names ...string) Hosts {
	t.Helper()
	h, err := ParseHosts(names)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

var routeTests = []struct {
	name, host, target string
	origin             Origin
	vat, prefix, path  string
	raw                string
	status             int
}{
	{"shared localhost", "localhost:8787", "/alice/x?y=1", Shared, "alice", "/alice", "/x", "", 0},
	{"shared bare vat", "localhost", "/alice", Shared, "alice", "/alice", "/", "", 0},
	{"shared loopback v4", "127.0.0.1:8787", "/alice/", Shared, "alice", "/alice", "/", "", 0},
	{"shared loopback v4 other", "127.9.9.9", "/alice/", Shared, "alice", "/alice", "/", "", 0},
	{"shared loopback v6", "[::1]:8787", "/alice/a", Shared, "alice", "/alice", "/a", "", 0},
	{"shared mapped v6", "[::ffff:127.0.0.1]:8787", "/alice/a", Shared, "alice", "/alice", "/a", "", 0},
	{"shared public name", "toybox.example.com", "/bob/a", Shared, "bob", "/bob", "/a", "", 0},
	{"shared public name upper", "ToyBox.Example.COM:443", "/bob/a", Shared, "bob", "/bob", "/a", "", 0},
	{"shared public name trailing dot", "toybox.example.com.", "/bob/a", Shared, "bob", "/bob", "/a", "", 0},
	{"shared public address", "192.0.2.7:8787", "/bob/a", Shared, "bob", "/bob", "/a", "", 0},
	{"shared escaped rest", "localhost", "/alice/a%2Fb", Shared, "alice", "/alice", "/a/b", "/a%2Fb", 0},
	{"own localhost", "alice.localhost:8787", "/x/y", Own, "alice", "", "/x/y", "", 0},
	{"own localhost root", "alice.localhost", "/", Own, "alice", "", "/", "", 0},
	{"own keeps other vat's path", "alice.localhost", "/bob/x", Own, "alice", "", "/bob/x", "", 0},
	{"own public name", "bob.toybox.example.com", "/a%2Fb", Own, "bob", "", "/a/b", "/a%2Fb", 0},
	{"own upper case", "BOB.Toybox.example.com:80", "/", Own, "bob", "", "/", "", 0},

	{"no vat named", "localhost", "/", Refused, "", "", "", "", 404},
	{"not a vat id", "localhost", "/Alice/", Refused, "", "", "", "", 404},
	{"escaped first segment", "localhost", "/alice%2Fsw.js", Refused, "", "", "", "", 404},
	{"asterisk", "alice.localhost", "*", Refused, "", "", "", "", 404},
	{"rebinding name", "evil.example", "/alice/", Refused, "", "", "", "", 403},
	{"rebinding name with port", "evil.example:8787", "/alice/", Refused, "", "", "", "", 403},
	{"below a vat host", "x.alice.localhost", "/", Refused, "", "", "", "", 403},
	{"not a vat id below", "a_b.localhost", "/", Refused, "", "", "", "", 403},
	{"suffix without dot", "evillocalhost", "/alice/", Refused, "", "", "", "", 403},
	{"lookalike public name", "toybox.example.com.evil.example", "/alice/", Refused, "", "", "", "", 403},
	{"below a public address", "alice.192.0.2.7", "/", Refused, "", "", "", "", 403},
	{"below loopback address", "alice.127.0.0.1", "/", Refused, "", "", "", "", 403},
	{"private address", "10.0.0.1", "/alice/", Refused, "", "", "", "", 403},
	{"empty host", "", "/alice/", Refused, "", "", "", "", 403},
	{"unbracketed v6", "::1", "/alice/", Refused, "", "", "", "", 403},
	{"bad port", "localhost:http", "/alice/", Refused, "", "", "", "", 403},
	{"empty port", "localhost:", "/alice/", Refused, "", "", "", "", 403},
	{"unicode", "tøybox.example.com", "/alice/", Refused, "", "", "", "", 403},
	{"punycode of another", "xn--tybox-fua.example.com", "/alice/", Refused, "", "", "", "", 403},
	{"numeric loopback spelling", "2130706433", "/alice/", Refused, "", "", "", "", 403},
}

func TestRoute(t *testing.T) {
	h := mustHosts(t, "toybox.example.com", "192.0.2.7")
	for _, tt := range routeTests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.ParseRequestURI(tt.target)
			if err != nil {
				u = &url.URL{Path: tt.target}
			}
			got := h.Route(tt.host, u)
			if got.Origin != tt.origin || got.Vat != tt.vat || got.Prefix != tt.prefix || got.Path != tt.path || got.RawPath != tt.raw || got.Status != tt.status {
				t.Errorf("Route(%q, %q) = %+v; want origin %v vat %q prefix %q path %q raw %q status %d",
					tt.host, tt.target, got, tt.origin, tt.vat, tt.prefix, tt.path, tt.raw, tt.status)
			}
			if (got.Origin == Refused) != (got.Reason != "") {
				t.Errorf("Route(%q, %q): origin %v with reason %q; a refusal, and only one, says why", tt.host, tt.target, got.Origin, got.Reason)
			}
		})
	}
}

// TestRouteZeroHosts: with no public name, the loopback forms are served
// and nothing else.
func TestRouteZeroHosts(t *testing.T) {
	var h Hosts
	for host, want := range map[string]Origin{
		"localhost:8787": Shared, "alice.localhost:8787": Own, "127.0.0.1": Shared, "[::1]": Shared,
		"toybox.example.com": Refused, "alice.toybox.example.com": Refused,
	} {
		if got := h.Route(host, &url.URL{Path: "/alice/"}); got.Origin != want {
			t.Errorf("Route(%q) = %v; want %v", host, got.Origin, want)
		}
	}
}

func TestParseHosts(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
		err  string
	}{
		{"names", []string{"Toybox.Example.com", "toybox.example.com", "[::1]", "192.0.2.1"}, []string{"toybox.example.com", "::1", "192.0.2.1"}, ""},
		{"trailing dot", []string{"example.com."}, []string{"example.com"}, ""},
		{"port", []string{"example.com:8787"}, nil, "without a scheme, port"},
		{"scheme", []string{"http://example.com"}, nil, "without a scheme"},
		{"wildcard", []string{"*.example.com"}, nil, "wildcard"},
		{"path", []string{"example.com/x"}, nil, "path"},
		{"empty", []string{""}, nil, "empty host"},
		{"space", []string{"exa mple.com"}, nil, "bad public host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHosts(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseHosts(%q) = %v, %v; want an error containing %q", tt.in, h.Names(), err, tt.err)
				}
				return
			}
			if err != nil || strings.Join(h.Names(), ",") != strings.Join(tt.want, ",") {
				t.Errorf("ParseHosts(%q) = %q, %v; want %q", tt.in, h.Names(), err, tt.want)
			}
		})
	}
}

// FuzzRoute: whatever the host and path, a route either names a valid vat
// with a path starting with "/" (and a Shared one the prefix it strips), or
// refuses with a reason; an Own origin's vat is the host's first label.
func FuzzRoute(f *testing.F) {
	for _, tt := range routeTests {
		f.Add(tt.host, tt.target)
	}
	h := mustHosts(f, "toybox.example.com", "192.0.2.7")
	f.Fuzz(func(t *testing.T, host, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		r := h.Route(host, u)
		switch r.Origin {
		case Refused:
			if r.Reason == "" || (r.Status != 403 && r.Status != 404) {
				t.Fatalf("Route(%q, %q) refused with %d %q", host, target, r.Status, r.Reason)
			}
		case Shared:
			if r.Prefix != "/"+r.Vat || !strings.HasPrefix(u.Path, r.Prefix) || !strings.HasPrefix(r.Path, "/") {
				t.Fatalf("Route(%q, %q) = %+v", host, target, r)
			}
		case Own:
			if r.Prefix != "" || !strings.HasPrefix(r.Host, r.Vat+".") || r.Path != u.Path {
				t.Fatalf("Route(%q, %q) = %+v", host, target, r)
			}
		}
		if r.Origin != Refused && (r.Status != 0 || !validVat(r.Vat)) {
			t.Fatalf("Route(%q, %q) = %+v: not a vat id", host, target, r)
		}
	})
}

func validVat(id string) bool {
	if id == "" || len(id) > 63 || id[0] == '-' {
		return false
	}
	return strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}
