package labels

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// hostCases is shared by TestCanonicalHost and the fuzz seeds. want is the
// canonical host, or "" with errSub naming the problem.
var hostCases = []struct {
	name, in, want, errSub string
}{
	{"plain", "example.com", "example.com", ""},
	{"upper case", "Example.COM", "example.com", ""},
	{"trailing dot", "example.com.", "example.com", ""},
	{"single label", "localhost", "localhost", ""},
	{"hyphen inside", "a--b.example", "a--b.example", ""},
	{"u-label", "münchen.de", "xn--mnchen-3ya.de", ""},
	{"sharp s non-transitional", "faß.de", "xn--fa-hia.de", ""},
	{"a-label upper case", "XN--FA-HIA.de", "xn--fa-hia.de", ""},
	{"fullwidth maps", "Ｅｘａｍｐｌｅ.com", "example.com", ""},
	{"ideographic full stop", "example.com。", "example.com", ""},
	{"soft hyphen ignored", "exa\u00admple.com", "example.com", ""},
	{"ligature maps", "a.ﬀ", "a.ff", ""},
	{"kelvin sign maps", "\u212a.com", "k.com", ""},
	{"ipv4", "1.2.3.4", "1.2.3.4", ""},
	{"ipv4 trailing dot", "1.2.3.4.", "1.2.3.4", ""},
	{"fullwidth digits map to ipv4", "１２７.0.0.1", "127.0.0.1", ""},
	{"ipv6", "2001:DB8::1", "2001:db8::1", ""},
	{"ipv6 bracketed", "[::1]", "::1", ""},
	{"ipv6 long form", "2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1", ""},
	{"ipv4-mapped ipv6", "::FFFF:1.2.3.4", "::ffff:1.2.3.4", ""},
	{"name of 253 bytes", strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 126) + "a", ""},
	{"label of 63 bytes", strings.Repeat("a", 63) + ".com", strings.Repeat("a", 63) + ".com", ""},

	{"empty", "", "", "empty host"},
	{"root only", ".", "", "empty host"},
	{"empty label", "a..b", "", "empty label"},
	{"two trailing dots", "example.com..", "", "empty label"},
	{"leading dot", ".example.com", "", "empty label"},
	{"wildcard", "*.a.com", "", `wildcard host "*.a.com" not allowed`},
	{"userinfo", "user@a.com", "", "userinfo"},
	{"path", "a.com/x", "", "path"},
	{"backslash", `a.com\x`, "", "path"},
	{"query", "a.com?x", "", "query"},
	{"fragment", "a.com#x", "", "fragment"},
	{"percent escape", "%65xample.com", "", "percent"},
	{"ipv6 zone", "fe80::1%eth0", "", "percent"},
	{"control character", "a.com\n", "", "control character"},
	{"nul", "a\x00.com", "", "control character"},
	{"del", "a\x7f.com", "", "control character"},
	{"space", "a .com", "", "space"},
	{"nbsp", "a\u00a0.com", "", "space"},
	{"underscore", "a_b.com", "", "not a valid name"},
	{"invalid utf-8", "a\xff.com", "", "not valid UTF-8"},
	{"name over 253", strings.Repeat("a.", 127) + "a", "", "over 253 bytes"},
	{"huge input", strings.Repeat("a", 5000), "", "over 253 bytes"},
	{"label over 63", strings.Repeat("a", 64) + ".com", "", "over 63 bytes"},
	{"leading hyphen", "-a.com", "", "not a valid name"},
	{"trailing hyphen", "a-.com", "", "not a valid name"},
	{"hyphens in 3-4", "ab--c.com", "", "not a valid name"},
	{"bad punycode", "xn--a.com", "", "not a valid name"},
	{"zero width joiner", "ex\u200dample.com", "", "not a valid name"},
	{"fullwidth colon", "a.com：80", "", "not a valid name"},
	{"ipv4 short form", "127.1", "", "canonical dotted-decimal"},
	{"ipv4 octal", "0177.0.0.1", "", "canonical dotted-decimal"},
	{"ipv4 leading zero", "1.2.3.04", "", "canonical dotted-decimal"},
	{"ipv4 hex", "0x7f.0.0.1", "", "canonical dotted-decimal"},
	{"ipv4 hex last", "127.0.0.0x1", "", "canonical dotted-decimal"},
	{"ipv4 integer", "2130706433", "", "canonical dotted-decimal"},
	{"ipv4 five parts", "1.2.3.4.5", "", "canonical dotted-decimal"},
	{"ipv4 octet over 255", "1.2.3.256", "", "canonical dotted-decimal"},
	{"numeric tld", "example.123", "", "canonical dotted-decimal"},
	{"ipv4 in brackets", "[1.2.3.4]", "", "brackets are only for IPv6"},
	{"unbalanced bracket", "[::1", "", "unbalanced brackets"},
	{"host with port", "example.com:80", "", "not a valid IPv6 address"},
	{"bad ipv6", "1:2:3:4:5:6:7:8:9", "", "not a valid IPv6 address"},
	{"ipv6 with port unbracketed", "::1:80:x", "", "not a valid IPv6 address"},
}

func TestCanonicalHost(t *testing.T) {
	for _, tt := range hostCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalHost(tt.in)
			checkResult(t, "CanonicalHost", tt.in, got, tt.want, err, tt.errSub)
			if err == nil {
				again, err := CanonicalHost(got)
				if err != nil || again != got {
					t.Errorf("CanonicalHost(%q) = %q, %v; want it to be a fixed point", got, again, err)
				}
			}
		})
	}
}

// checkResult compares a (value, error) result with the wanted value, or
// with an error wrapping ErrBadLabel whose text contains errSub.
func checkResult[T comparable](t *testing.T, fn string, in any, got, want T, err error, errSub string) {
	t.Helper()
	if errSub != "" {
		if err == nil {
			t.Fatalf("%s(%q) = %v, nil; want error containing %q", fn, in, got, errSub)
		}
		if !errors.Is(err, ErrBadLabel) {
			t.Errorf("%s(%q) error %q does not wrap ErrBadLabel", fn, in, err)
		}
		if !strings.Contains(err.Error(), errSub) {
			t.Errorf("%s(%q) error = %q; want it to contain %q", fn, in, err, errSub)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s(%q) error = %v; want %v", fn, in, err, want)
	}
	if got != want {
		t.Errorf("%s(%q) = %v; want %v", fn, in, got, want)
	}
}

var hostPortCases = []struct {
	name, in, host string
	port           uint16
	errSub         string
}{
	{"name", "example.com:443", "example.com", 443, ""},
	{"name upper case", "EXAMPLE.com:8443", "example.com", 8443, ""},
	{"ipv4", "1.2.3.4:80", "1.2.3.4", 80, ""},
	{"ipv6", "[::1]:80", "::1", 80, ""},
	{"ipv6 canonicalised", "[2001:DB8:0::1]:65535", "2001:db8::1", 65535, ""},
	{"port 1", "a.com:1", "a.com", 1, ""},
	{"u-label", "bücher.example:443", "xn--bcher-kva.example", 443, ""},

	{"empty", "", "", 0, "empty host"},
	{"empty host", ":443", "", 0, "empty host"},
	{"no port", "example.com", "", 0, "missing port"},
	{"ipv6 no port", "[::1]", "", 0, "missing port"},
	{"empty port", "example.com:", "", 0, "empty port"},
	{"port 0", "example.com:0", "", 0, "port 0 out of range"},
	{"port 65536", "example.com:65536", "", 0, "port 65536 out of range"},
	{"port huge", "example.com:99999999999999999999", "", 0, "out of range"},
	{"port plus", "example.com:+443", "", 0, "not a decimal number"},
	{"port minus", "example.com:-1", "", 0, "not a decimal number"},
	{"port leading zero", "example.com:0443", "", 0, "leading zero"},
	{"port service name", "example.com:https", "", 0, "service names"},
	{"port hex", "example.com:0x1bb", "", 0, "service names"},
	{"port space", "example.com: 443", "", 0, "space"},
	{"unbracketed ipv6", "::1:80", "", 0, "must be in brackets"},
	{"brackets around ipv4", "[1.2.3.4]:80", "", 0, "brackets are only for IPv6"},
	{"brackets around name", "[example.com]:80", "", 0, "brackets are only for IPv6"},
	{"stray bracket", "a]b.com:80", "", 0, "brackets are only for IPv6"},
	{"missing close bracket", "[::1:80", "", 0, "missing ]"},
	{"junk after bracket", "[::1]x:80", "", 0, "after ]"},
	{"zone", "[fe80::1%25eth0]:80", "", 0, "percent"},
	{"userinfo", "u@a.com:80", "", 0, "userinfo"},
	{"path", "a.com:80/x", "", 0, "path"},
	{"wildcard", "*.a.com:443", "", 0, "wildcard"},
	{"short ipv4", "127.1:80", "", 0, "canonical dotted-decimal"},
	{"two ports", "a.com:80:80", "", 0, "must be in brackets"},
}

func TestParseHostPort(t *testing.T) {
	for _, tt := range hostPortCases {
		t.Run(tt.name, func(t *testing.T) {
			h, p, err := ParseHostPort(tt.in)
			type hp struct {
				host string
				port uint16
			}
			checkResult(t, "ParseHostPort", tt.in, hp{h, p}, hp{tt.host, tt.port}, err, tt.errSub)
		})
	}
}

var setCases = []struct {
	name, in string
	want     Set
	errSub   string
}{
	{"host and port", `{"host":"example.com","port":443}`, Set{Host: "example.com", Port: 443}, ""},
	{
		"all keys", `{"scheme":"HTTPS","host":"Example.COM.","port":"8443","network":"public","vat":"my-vat-1"}`,
		Set{Scheme: "https", Host: "example.com", Port: 8443, Network: "public", Vat: "my-vat-1"},
		"",
	},
	{"empty object", `{}`, Set{}, ""},
	{"white space", " \n{ \"network\" : \"local\" }\t", Set{Network: "local"}, ""},
	{"port string", `{"port":"80"}`, Set{Port: 80}, ""},
	{"tcp", `{"scheme":"tcp","port":22}`, Set{Scheme: "tcp", Port: 22}, ""},
	{"https alone is 443", `{"host":"a.com","scheme":"https"}`, Set{Scheme: "https", Host: "a.com", Port: 443}, ""},
	{"http alone is 80", `{"scheme":"HTTP"}`, Set{Scheme: "http", Port: 80}, ""},
	{"tcp alone has no port", `{"scheme":"tcp"}`, Set{Scheme: "tcp"}, ""},
	{"ipv6 host", `{"host":"[::1]"}`, Set{Host: "::1"}, ""},
	{"escaped key", `{"ho\u0073t":"a.com"}`, Set{Host: "a.com"}, ""},
	{"origin manifest", `{"host":"a.com","origin":"manifest"}`, Set{Host: "a.com", Origin: OriginManifest}, ""},
	{"origin other", `{"origin":"owner"}`, Set{}, `origin "owner" not allowed`},

	{"unknown key", `{"x":"y"}`, Set{}, `unknown key "x"`},
	{"key case", `{"Host":"a.com"}`, Set{}, `unknown key "Host"`},
	{"duplicate key", `{"host":"a.com","host":"b.com"}`, Set{}, `duplicate key "host"`},
	{"duplicate via escape", `{"host":"a.com","hos\u0074":"b.com"}`, Set{}, `duplicate key "host"`},
	{"empty host", `{"host":""}`, Set{}, "empty host"},
	{"empty scheme", `{"scheme":""}`, Set{}, "empty scheme"},
	{"empty network", `{"network":""}`, Set{}, "empty network"},
	{"empty vat", `{"vat":""}`, Set{}, "empty vat"},
	{"null host", `{"host":null}`, Set{}, "host must be a string, not null"},
	{"number host", `{"host":1}`, Set{}, "host must be a string, not a number"},
	{"object host", `{"host":{}}`, Set{}, "host must be a string, not an object"},
	{"list host", `{"host":["a.com"]}`, Set{}, "host must be a string, not a list"},
	{"bool port", `{"port":true}`, Set{}, "port must be a number or a decimal string, not a boolean"},
	{"null port", `{"port":null}`, Set{}, "port must be a number or a decimal string, not null"},
	{"port 0", `{"port":0}`, Set{}, "port 0 out of range"},
	{"port 65536", `{"port":65536}`, Set{}, "port 65536 out of range"},
	{"port negative", `{"port":-443}`, Set{}, "not a decimal number"},
	{"port fraction", `{"port":443.0}`, Set{}, "not a decimal number"},
	{"port exponent", `{"port":4.43e2}`, Set{}, "not a decimal number"},
	{"port string plus", `{"port":"+443"}`, Set{}, "not a decimal number"},
	{"port string leading zero", `{"port":"0443"}`, Set{}, "leading zero"},
	{"port string service", `{"port":"https"}`, Set{}, "service names"},
	{"port string space", `{"port":" 443"}`, Set{}, "not a decimal number"},
	{"port empty string", `{"port":""}`, Set{}, "empty port"},
	{"bad scheme", `{"scheme":"ftp"}`, Set{}, `scheme "ftp" not allowed`},
	{"ws scheme", `{"scheme":"ws"}`, Set{}, `scheme "ws" not allowed`},
	{"bad network", `{"network":"lan"}`, Set{}, `network "lan" not allowed`},
	{"network case", `{"network":"Public"}`, Set{}, `network "Public" not allowed`},
	{"bad vat", `{"vat":"-x"}`, Set{}, `bad label: "-x" is not a vat id ([a-z0-9][a-z0-9-]{0,62})`},
	{"vat upper case", `{"vat":"X"}`, Set{}, `"X" is not a vat id`},
	{"wildcard host", `{"host":"*.a.com"}`, Set{}, `wildcard host "*.a.com" not allowed`},
	{"host with port", `{"host":"a.com:80"}`, Set{}, "not a valid IPv6 address"},
	{"trailing garbage", `{"host":"a.com"}x`, Set{}, "malformed JSON"},
	{"second object", `{"host":"a.com"}{}`, Set{}, "trailing data"},
	{"trailing comma", `{"host":"a.com",}`, Set{}, "malformed JSON"},
	{"truncated", `{"host":"a.com"`, Set{}, "unexpected end"},
	{"empty input", ``, Set{}, "unexpected end"},
	{"list", `[{"host":"a.com"}]`, Set{}, "must be a JSON object, not a list"},
	{"string", `"a.com"`, Set{}, "must be a JSON object, not a string"},
	{"null", `null`, Set{}, "must be a JSON object, not null"},
	{"invalid utf-8", "{\"host\":\"a\xff.com\"}", Set{}, "not valid UTF-8"},
}

func TestParseSet(t *testing.T) {
	for _, tt := range setCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSet([]byte(tt.in))
			checkResult(t, "ParseSet", tt.in, got, tt.want, err, tt.errSub)

			var u Set
			uerr := json.Unmarshal([]byte(tt.in), &u)
			if (uerr == nil) != (err == nil) && json.Valid([]byte(tt.in)) {
				t.Errorf("json.Unmarshal(%q) error = %v; ParseSet error = %v; want them to agree", tt.in, uerr, err)
			}
			if err == nil && u != got {
				t.Errorf("json.Unmarshal(%q) = %v; want %v", tt.in, u, got)
			}
		})
	}
}

func TestSetString(t *testing.T) {
	tests := []struct {
		name string
		in   Set
		want string
	}{
		{"zero", Set{}, `{}`},
		{"host and port", Set{Host: "example.com", Port: 443}, `{"host":"example.com","port":443}`},
		{
			"all sorted",
			Set{Scheme: "https", Host: "a.com", Port: 1, Network: "local", Vat: "v"},
			`{"host":"a.com","network":"local","port":1,"scheme":"https","vat":"v"}`,
		},
		{"escapes", Set{Host: "a\"b<"}, `{"host":"a\"b\u003c"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.String(); got != tt.want {
				t.Errorf("%#v.String() = %s; want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestMarshalJSON(t *testing.T) {
	tests := []struct {
		name   string
		in     Set
		want   string
		errSub string
	}{
		{"canonicalises", Set{Host: "Example.COM.", Scheme: "HTTP"}, `{"host":"example.com","port":80,"scheme":"http"}`, ""},
		{"embedded", Set{Port: 22}, `{"port":22}`, ""},
		{"refuses bad host", Set{Host: "*.a.com"}, "", "wildcard"},
		{"refuses bad network", Set{Network: "lan"}, "", "network"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(struct{ L Set }{tt.in})
			if tt.errSub != "" {
				if err == nil || !errors.Is(err, ErrBadLabel) || !strings.Contains(err.Error(), tt.errSub) {
					t.Fatalf("json.Marshal(%#v) = %s, %v; want error wrapping ErrBadLabel containing %q", tt.in, b, err, tt.errSub)
				}
				return
			}
			if err != nil {
				t.Fatalf("json.Marshal(%#v) error = %v", tt.in, err)
			}
			if got, want := string(b), `{"L":`+tt.want+`}`; got != want {
				t.Errorf("json.Marshal(%#v) = %s; want %s", tt.in, got, want)
			}
		})
	}
}

var grantCases = []struct {
	name, in string
	want     []Set
	errSub   string
}{
	{"object", `{"host":"example.com","port":443}`, []Set{{Host: "example.com", Port: 443}}, ""},
	{"list", `[{"host":"a.com"},{"host":"b.com","scheme":"https"}]`, []Set{{Host: "a.com"}, {Host: "b.com", Scheme: "https", Port: 443}}, ""},
	{"list with spaces", " [ {\"network\":\"public\"} ] ", []Set{{Network: "public"}}, ""},
	{"legacy name", "example.com", []Set{{Host: "example.com"}}, ""},
	{"legacy name and port", "Example.com:8443", []Set{{Host: "example.com", Port: 8443}}, ""},
	{"legacy ipv4 and port", "1.2.3.4:80", []Set{{Host: "1.2.3.4", Port: 80}}, ""},
	{"legacy ipv6 and port", "[::1]:80", []Set{{Host: "::1", Port: 80}}, ""},
	{"legacy ipv6", "[2001:db8::1]", []Set{{Host: "2001:db8::1"}}, ""},
	{"legacy ipv6 starting with hex letter", "[fe80::1]:443", []Set{{Host: "fe80::1", Port: 443}}, ""},
	{"legacy u-label", "bücher.example", []Set{{Host: "xn--bcher-kva.example"}}, ""},

	{"empty", "", nil, "empty grant"},
	{"blank", "  ", nil, "empty grant"},
	{"empty list", "[]", nil, "empty grant list"},
	{"empty object", "{}", nil, "{} would grant everything"},
	{"empty object in list", `[{"host":"a.com"},{}]`, nil, "(entry 1) is empty"},
	{"vat", `{"host":"a.com","vat":"me"}`, nil, `names vat "me": vat is set only by the supervisor`},
	{"vat in list", `[{"host":"a.com"},{"vat":"me"}]`, nil, "vat is set only by the supervisor"},
	{"origin", `{"host":"a.com","origin":"manifest"}`, nil, `names origin "manifest": origin is set only by the supervisor`},
	{"unknown key in list", `[{"host":"a.com","x":1}]`, nil, `entry 0: bad label: unknown key "x"`},
	{"string in list", `["a.com"]`, nil, "must be a JSON object, not a string"},
	{"malformed list", `[{"host":"a.com"},]`, nil, "malformed JSON"},
	{"trailing garbage after list", `[{"host":"a.com"}] x`, nil, "malformed JSON"},
	{"legacy unbracketed ipv6", "::1", nil, "must be in brackets"},
	{"legacy bad port", "a.com:0", nil, "port 0 out of range"},
	{"legacy empty port", "a.com:", nil, "empty port"},
	{"legacy empty host", ":80", nil, "empty host"},
	{"legacy wildcard", "*.example.com", nil, "wildcard"},
	{"legacy userinfo", "me@example.com", nil, "userinfo"},
	{"legacy path", "example.com/x", nil, "path"},
	{"legacy url", "https://example.com", nil, "path"},
	{"legacy ipv4 in brackets", "[1.2.3.4]:80", nil, "brackets are only for IPv6"},
	{"legacy ipv6 junk", "[::1]80", nil, "after ]"},
}

func TestParseGrant(t *testing.T) {
	for _, tt := range grantCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseGrant(tt.in)
			checkResult(t, "ParseGrant", tt.in, setsString(got), setsString(tt.want), err, tt.errSub)
		})
	}
}

func setsString(ss []Set) string {
	var b strings.Builder
	for _, s := range ss {
		b.WriteString(s.String())
	}
	return b.String()
}

var urlCases = []struct {
	name, in string
	want     Request
	errSub   string
}{
	{"http", "http://example.com/x?y#z", Request{Scheme: "http", Host: "example.com", Port: 80}, ""},
	{"https", "https://example.com", Request{Scheme: "https", Host: "example.com", Port: 443}, ""},
	{"space in the query", "http://example.com/p?a b HTTP/1.0", Request{}, "percent-encode"},
	{"tab in the query", "http://example.com/p?a\tb", Request{}, "control character"},
	{"encoded space in the query", "http://example.com/p?a%20b", Request{Scheme: "http", Host: "example.com", Port: 80}, ""},
	{"ws", "ws://example.com/socket", Request{Scheme: "http", Host: "example.com", Port: 80}, ""},
	{"wss", "wss://example.com:8443/", Request{Scheme: "https", Host: "example.com", Port: 8443}, ""},
	{"upper case", "HTTPS://EXAMPLE.COM:443/", Request{Scheme: "https", Host: "example.com", Port: 443}, ""},
	{"ipv6", "http://[::1]:8080/", Request{Scheme: "http", Host: "::1", Port: 8080}, ""},
	{"ipv4", "https://1.2.3.4/", Request{Scheme: "https", Host: "1.2.3.4", Port: 443}, ""},
	{"trailing dot", "https://example.com./", Request{Scheme: "https", Host: "example.com", Port: 443}, ""},
	{"at in query", "http://a.com?x@b.com", Request{Scheme: "http", Host: "a.com", Port: 80}, ""},
	{"at in fragment", "http://a.com#@b.com", Request{Scheme: "http", Host: "a.com", Port: 80}, ""},

	{"ftp", "ftp://example.com/", Request{}, `URL scheme "ftp" not allowed`},
	{"no scheme", "//example.com/", Request{}, "has no scheme"},
	{"relative", "/x", Request{}, "has no scheme"},
	{"opaque", "http:example.com", Request{}, "has no //host"},
	{"empty host", "http:///x", Request{}, "empty host"},
	{"empty host with port", "http://:80/", Request{}, "empty host"},
	{"userinfo", "http://user@example.com/", Request{}, "userinfo not allowed"},
	{"userinfo with password", "https://u:p@example.com/", Request{}, "userinfo not allowed"},
	{"empty port", "http://example.com:/", Request{}, "empty port"},
	{"port 0", "http://example.com:0/", Request{}, "port 0 out of range"},
	{"port 65536", "http://example.com:65536/", Request{}, "out of range"},
	{"port leading zero", "http://example.com:080/", Request{}, "leading zero"},
	{"percent host", "http://%65xample.com/", Request{}, "bad URL"},
	{"ipv6 zone", "http://[fe80::1%25eth0]/", Request{}, "percent"},
	{"backslash trick", `http://a.com\@b.com/`, Request{}, "bad URL"},
	{"wildcard", "http://*.a.com/", Request{}, "wildcard"},
	{"short ipv4", "http://127.1/", Request{}, "canonical dotted-decimal"},
	{"integer ipv4", "http://2130706433/", Request{}, "canonical dotted-decimal"},
	{"control character", "http://a.com\x00/", Request{}, "bad URL"},
	{"unbracketed ipv6", "http://::1/", Request{}, "bad URL"},
}

func TestParseURL(t *testing.T) {
	for _, tt := range urlCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseURL(tt.in)
			checkResult(t, "ParseURL", tt.in, got, tt.want, err, tt.errSub)
		})
	}
}

// TestParseURLErrorsNameNoSecret: a refusal names the problem, not the
// URL's text, so a logged refusal keeps no query, fragment or userinfo.
func TestParseURLErrorsNameNoSecret(t *testing.T) {
	for _, in := range []string{
		"example.com/?key=SECRET#SECRET",
		"//example.com/?key=SECRET#SECRET",
		"http:example.com?key=SECRET#SECRET",
		"http:///x?key=SECRET#SECRET",
		"http://:80/?key=SECRET#SECRET",
		"http://SECRET:SECRET@example.com/?key=SECRET#SECRET",
		"http://example.com:%zz/?key=SECRET#SECRET",
		"http://example.com/\x00?key=SECRET#SECRET",
		"http://exa mple.com/?key=SECRET#SECRET",
		"http://example.com/?key=SECRET#%zzSECRET",
		"http://example.com/?key=SECRET+x y#SECRET",
		// A password not percent-encoded reads as a bad port.
		"http://user:SECRET/x@example.com/",
		"http://user:SECRET?x@example.com/",
	} {
		_, err := ParseURL(in)
		if err == nil {
			t.Errorf("ParseURL(%q) accepted", in)
			continue
		}
		checkBad(t, "ParseURL", in, err)
		if strings.Contains(err.Error(), "SECRET") {
			t.Errorf("ParseURL(%q) error %q quotes the URL", in, err)
		}
	}
}

func TestDefaultPort(t *testing.T) {
	for _, tt := range []struct {
		scheme string
		want   uint16
	}{{"http", 80}, {"https", 443}, {"tcp", 0}, {"ws", 0}, {"", 0}, {"HTTP", 0}} {
		t.Run(tt.scheme, func(t *testing.T) {
			if got := DefaultPort(tt.scheme); got != tt.want {
				t.Errorf("DefaultPort(%q) = %d; want %d", tt.scheme, got, tt.want)
			}
		})
	}
}

func TestValidVatID(t *testing.T) {
	for _, tt := range []struct {
		id   string
		want bool
	}{
		{"a", true},
		{"0", true},
		{"my-vat-2", true},
		{"a-", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{"-a", false},
		{"A", false},
		{"a_b", false},
		{"a.b", false},
		{"a b", false},
		{strings.Repeat("a", 64), false},
		{"ä", false},
		{"a/b", false},
		{"..", false},
	} {
		t.Run(tt.id, func(t *testing.T) {
			if got := ValidVatID(tt.id); got != tt.want {
				t.Errorf("ValidVatID(%q) = %v; want %v", tt.id, got, tt.want)
			}
		})
	}
}

var constrainCases = []struct {
	name         string
	base, narrow Set
	want         Set
	wantErr      error
	errSub       string
}{
	{name: "origin accumulates", base: Set{Host: "a.com", Vat: "v"}, narrow: Set{Origin: OriginManifest}, want: Set{Host: "a.com", Vat: "v", Origin: OriginManifest}},
	{name: "origin is never dropped", base: Set{Origin: OriginManifest}, narrow: Set{Port: 5432}, want: Set{Origin: OriginManifest, Port: 5432}},
	{name: "origin bad value", base: Set{}, narrow: Set{Origin: "owner"}, wantErr: ErrBadLabel, errSub: `origin "owner" not allowed`},
	{"zero and zero", Set{}, Set{}, Set{}, nil, ""},
	{"accumulate", Set{Network: "public"}, Set{Host: "a.com", Port: 443}, Set{Network: "public", Host: "a.com", Port: 443}, nil, ""},
	{"narrow empty keeps base", Set{Host: "a.com", Scheme: "https", Port: 443}, Set{}, Set{Host: "a.com", Scheme: "https", Port: 443}, nil, ""},
	{"same host", Set{Host: "a.com"}, Set{Host: "a.com"}, Set{Host: "a.com"}, nil, ""},
	{"canonicalises narrow", Set{Host: "a.com"}, Set{Host: "A.COM."}, Set{Host: "a.com"}, nil, ""},
	{"add vat", Set{Network: "public", Host: "a.com"}, Set{Vat: "v1"}, Set{Network: "public", Host: "a.com", Vat: "v1"}, nil, ""},
	{"local to public", Set{Network: "local"}, Set{Network: "public"}, Set{Network: "public"}, nil, ""},
	{"public stays public", Set{Network: "public"}, Set{Network: "public"}, Set{Network: "public"}, nil, ""},
	{"scheme alone and its default port", Set{Scheme: "https"}, Set{Port: 443}, Set{Scheme: "https", Port: 443}, nil, ""},
	{"tcp alone takes a port", Set{Scheme: "tcp"}, Set{Port: 22}, Set{Scheme: "tcp", Port: 22}, nil, ""},
	{"scheme and port in one set", Set{Host: "a.com"}, Set{Scheme: "https", Port: 8443}, Set{Host: "a.com", Scheme: "https", Port: 8443}, nil, ""},

	{"host conflict", Set{Host: "a.com"}, Set{Host: "b.com"}, Set{}, ErrConflict, `host "a.com" (handle) vs "b.com" (requested)`},
	{"port conflict", Set{Port: 443}, Set{Port: 80}, Set{}, ErrConflict, "port 443 (handle) vs 80 (requested)"},
	{"scheme conflict", Set{Scheme: "https"}, Set{Scheme: "http"}, Set{}, ErrConflict, `scheme "https" (handle) vs "http" (requested)`},
	{"scheme alone is its default port", Set{Scheme: "https"}, Set{Port: 8443}, Set{}, ErrConflict, "port 443 (handle) vs 8443 (requested)"},
	{"port, then scheme alone", Set{Port: 8443}, Set{Scheme: "https"}, Set{}, ErrConflict, "port 8443 (handle) vs 443 (requested)"},
	{"vat conflict", Set{Vat: "a"}, Set{Vat: "b"}, Set{}, ErrConflict, `vat "a" (handle) vs "b" (requested)`},
	{"public to local", Set{Network: "public"}, Set{Network: "local"}, Set{}, ErrWiden, `network "public" cannot become "local"`},
	{"bad narrow", Set{}, Set{Host: "*.a.com"}, Set{}, ErrBadLabel, "wildcard"},
	{"bad base", Set{Network: "lan"}, Set{}, Set{}, ErrBadLabel, "handle labels"},
}

func TestConstrain(t *testing.T) {
	for _, tt := range constrainCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Constrain(tt.base, tt.narrow)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.errSub) {
					t.Fatalf("Constrain(%v, %v) = %v, %v; want error wrapping %v containing %q", tt.base, tt.narrow, got, err, tt.wantErr, tt.errSub)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Constrain(%v, %v) = %v, %v; want %v", tt.base, tt.narrow, got, err, tt.want)
			}
		})
	}
}

var admitCases = []struct {
	name   string
	set    Set
	req    Request
	allow  bool
	reason string
}{
	{"zero set admits", Set{}, Request{Scheme: "https", Host: "example.com"}, true, "granted by {}"},
	{"host match", Set{Host: "example.com"}, Request{Scheme: "https", Host: "example.com", Port: 443}, true, `granted by {"host":"example.com"}`},
	{"host match non-canonical request", Set{Host: "example.com"}, Request{Scheme: "https", Host: "EXAMPLE.com."}, true, `granted by {"host":"example.com"}`},
	{"port defaulted https", Set{Host: "example.com", Port: 443}, Request{Scheme: "https", Host: "example.com"}, true, "granted by"},
	{"port defaulted http", Set{Port: 80}, Request{Scheme: "http", Host: "example.com"}, true, "granted by"},
	{"scheme with its port", Set{Scheme: "https", Port: 8443}, Request{Scheme: "https", Host: "a.com", Port: 8443}, true, "granted by"},
	{"tcp without port admits any port", Set{Scheme: "tcp"}, Request{Scheme: "tcp", Host: "a.com", Port: 6379}, true, "granted by"},
	{"tcp with port", Set{Scheme: "tcp", Host: "db.example", Port: 5432}, Request{Scheme: "tcp", Host: "db.example", Port: 5432}, true, "granted by"},
	{"public admits public", Set{Network: "public"}, Request{Scheme: "https", Host: "a.com", Class: "public"}, true, `granted by {"network":"public"}`},
	{"public, class unknown", Set{Network: "public"}, Request{Scheme: "https", Host: "a.com"}, true, "address class not yet checked"},
	{"local admits local", Set{Network: "local"}, Request{Scheme: "http", Host: "10.0.0.1", Class: "local"}, true, "granted by"},
	{"local admits public", Set{Network: "local"}, Request{Scheme: "http", Host: "a.com", Class: "public"}, true, "granted by"},
	{"vat not judged", Set{Vat: "v"}, Request{Scheme: "http", Host: "a.com"}, true, `granted by {"vat":"v"}`},

	{"other host", Set{Host: "example.com"}, Request{Scheme: "https", Host: "example.org"}, false, "egress to example.org not granted"},
	{"subdomain", Set{Host: "example.com"}, Request{Scheme: "https", Host: "www.example.com"}, false, "egress to www.example.com not granted"},
	{"parent domain", Set{Host: "www.example.com"}, Request{Scheme: "https", Host: "example.com"}, false, "egress to example.com not granted"},
	{"ip for name", Set{Host: "example.com"}, Request{Scheme: "https", Host: "93.184.216.34"}, false, "egress to 93.184.216.34 not granted"},
	{"other port", Set{Host: "example.com", Port: 443}, Request{Scheme: "tcp", Host: "example.com", Port: 22}, false, "port 22 not granted"},
	{"default port differs", Set{Port: 443}, Request{Scheme: "http", Host: "a.com"}, false, "port 80 not granted"},
	{"other scheme", Set{Scheme: "https", Port: 443}, Request{Scheme: "http", Host: "a.com"}, false, "scheme http not granted"},
	{"tcp is not https", Set{Scheme: "https", Port: 443}, Request{Scheme: "tcp", Host: "a.com", Port: 443}, false, "scheme tcp not granted"},
	{"https is on its default port", Set{Scheme: "https", Port: 443}, Request{Scheme: "https", Host: "a.com", Port: 6379}, false, "port 6379 not granted"},
	{"scheme alone is not canonical", Set{Scheme: "https"}, Request{Scheme: "https", Host: "a.com"}, false, "not canonical"},
	{
		"public refuses local",
		Set{Network: "public"},
		Request{Scheme: "http", Host: "example.org", Class: "local"},
		false,
		"example.org is a local address; this handle reaches public addresses only",
	},
	{"tcp without port", Set{}, Request{Scheme: "tcp", Host: "a.com"}, false, "a tcp request needs a port"},
	{"unknown scheme", Set{}, Request{Scheme: "ftp", Host: "a.com"}, false, `scheme "ftp" not supported`},
	{"no scheme", Set{}, Request{Host: "a.com"}, false, "request has no scheme"},
	{"no host", Set{}, Request{Scheme: "https"}, false, "request has no host"},
	{"bad host", Set{}, Request{Scheme: "https", Host: "*.a.com"}, false, "wildcard"},
	{"short ipv4 host", Set{Host: "127.0.0.1"}, Request{Scheme: "https", Host: "127.1"}, false, "canonical dotted-decimal"},
	{"unknown class", Set{}, Request{Scheme: "https", Host: "a.com", Class: "never"}, false, `unknown address class "never"`},
	{"invalid set", Set{Network: "lan"}, Request{Scheme: "https", Host: "a.com"}, false, "the handle's labels are invalid"},
	{"non-canonical set", Set{Host: "Example.com"}, Request{Scheme: "https", Host: "example.com"}, false, "not canonical"},
}

func TestAdmit(t *testing.T) {
	for _, tt := range admitCases {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.set.Admit(tt.req)
			if got.Allow != tt.allow || !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("%v.Admit(%+v) = %+v; want Allow=%v, reason containing %q", tt.set, tt.req, got, tt.allow, tt.reason)
			}
			if got.Reason == "" {
				t.Errorf("%v.Admit(%+v) gave no reason", tt.set, tt.req)
			}
			if strings.HasPrefix(got.Reason, "egress refused") {
				t.Errorf("%v.Admit(%+v) reason %q carries the caller's prefix", tt.set, tt.req, got.Reason)
			}
		})
	}
}

// TestConstrainAdmitTogether walks a handle the way the supervisor does:
// a local root, narrowed to a grant, then to a vat, and checks what each
// step admits.
func TestConstrainAdmitTogether(t *testing.T) {
	root := Set{Network: NetworkLocal}
	grants, err := ParseGrant(`[{"host":"api.example.com","scheme":"https","network":"public"},"x"]`)
	if err == nil {
		t.Fatalf("ParseGrant accepted a string list entry: %v", grants)
	}
	grants, err = ParseGrant(`{"host":"api.example.com","scheme":"https","network":"public"}`)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Constrain(root, grants[0])
	if err != nil {
		t.Fatal(err)
	}
	h, err = Constrain(h, Set{Vat: "weather"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Set{Network: "public", Host: "api.example.com", Scheme: "https", Port: 443, Vat: "weather"}); h != want {
		t.Fatalf("constrained handle = %v; want %v", h, want)
	}
	if _, err := Constrain(h, Set{Vat: "other"}); !errors.Is(err, ErrConflict) {
		t.Errorf("changing the vat: err = %v; want ErrConflict", err)
	}
	if _, err := Constrain(h, Set{Network: "local"}); !errors.Is(err, ErrWiden) {
		t.Errorf("widening to local: err = %v; want ErrWiden", err)
	}
	r, err := ParseURL("wss://API.example.com/stream")
	if err != nil {
		t.Fatal(err)
	}
	r.Class = NetworkPublic
	if d := h.Admit(r); !d.Allow {
		t.Errorf("Admit(%+v) = %+v; want allowed", r, d)
	}
	r.Class = NetworkLocal
	if d := h.Admit(r); d.Allow {
		t.Errorf("Admit(%+v) = %+v; want refused", r, d)
	}
}

// TestSchemeAloneIsItsDefaultPort: a grant of scheme https (or http) with
// no port reaches that scheme on its default port only, as a URL without a
// port does. On any port, a connect(https) reached any TCP service of the
// host that reads past a ClientHello (found by review); tcp, which has no
// default, still admits every port.
func TestSchemeAloneIsItsDefaultPort(t *testing.T) {
	for _, tt := range []struct {
		grant string
		req   Request
		allow bool
	}{
		{`{"host":"kv.test","scheme":"https"}`, Request{Scheme: "https", Host: "kv.test"}, true},
		{`{"host":"kv.test","scheme":"https"}`, Request{Scheme: "https", Host: "kv.test", Port: 443}, true},
		{`{"host":"kv.test","scheme":"https"}`, Request{Scheme: "https", Host: "kv.test", Port: 6379}, false},
		{`{"host":"kv.test","scheme":"https","port":8443}`, Request{Scheme: "https", Host: "kv.test", Port: 8443}, true},
		{`{"host":"kv.test","scheme":"http"}`, Request{Scheme: "http", Host: "kv.test", Port: 80}, true},
		{`{"host":"kv.test","scheme":"http"}`, Request{Scheme: "http", Host: "kv.test", Port: 8080}, false},
		{`{"host":"kv.test","scheme":"tcp"}`, Request{Scheme: "tcp", Host: "kv.test", Port: 6379}, true},
		{`{"host":"kv.test"}`, Request{Scheme: "https", Host: "kv.test", Port: 6379}, true},
	} {
		g, err := ParseGrant(tt.grant)
		if err != nil {
			t.Fatal(err)
		}
		h, err := Constrain(Set{Network: NetworkLocal}, g[0])
		if err != nil {
			t.Fatal(err)
		}
		if d := h.Admit(tt.req); d.Allow != tt.allow {
			t.Errorf("%s (handle %s).Admit(%+v) = %+v; want allow %v", tt.grant, h, tt.req, d, tt.allow)
		}
	}
}

func TestLoopbackHost(t *testing.T) {
	for h, want := range map[string]bool{
		"localhost": true, "LocalHost.": true, "db.localhost": true, "127.0.0.1": true, "127.8.9.10": true,
		"::1": true, "[::1]": true, "::ffff:127.0.0.1": true,
		"example.com": false, "localhost.example.com": false, "notlocalhost": false, "10.0.0.1": false, "": false,
	} {
		if got := LoopbackHost(h); got != want {
			t.Errorf("LoopbackHost(%q) = %v; want %v", h, got, want)
		}
	}
}

// TestAdmitAllocs bounds the allocations of an admitted request. Both the
// switchboard and toybox-entry judge every connect with Admit; its reason
// (the set as JSON) once went through encoding/json for each value, a
// tenth of the switchboard's own CPU per transparent connect.
func TestAdmitAllocs(t *testing.T) {
	s := Set{Host: "127.0.0.1", Port: 39001, Network: NetworkLocal, Vat: "bench-path"}
	r := Request{Scheme: "tcp", Host: "127.0.0.1", Port: 39001}
	if d := s.Admit(r); !d.Allow {
		t.Fatalf("%v.Admit(%+v) = %+v; want allowed", s, r, d)
	}
	const most = 2 // the reason's set text and the reason itself
	if got := testing.AllocsPerRun(100, func() { _ = s.Admit(r) }); got > most {
		t.Errorf("%v.Admit(%+v) allocates %v times; want at most %d", s, r, got, most)
	}
}

// FuzzSetString checks String against each value quoted by
// encoding/json, the form it promises.
func FuzzSetString(f *testing.F) {
	f.Add("example.com", "https", "local", "v", "manifest", uint16(443))
	f.Add("a\"b<", "", "", "", "", uint16(0))
	f.Add("é&>\u2028\\\x7f\x01", "tcp", "x", "y\x00", "z", uint16(1))
	f.Fuzz(func(t *testing.T, host, scheme, network, vat, origin string, port uint16) {
		s := Set{Host: host, Scheme: scheme, Network: network, Vat: vat, Origin: origin, Port: port}
		var parts []string
		q := func(k, v string) {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, `"`+k+`":`+string(b))
		}
		if host != "" {
			q("host", host)
		}
		if network != "" {
			q("network", network)
		}
		if origin != "" {
			q("origin", origin)
		}
		if port != 0 {
			parts = append(parts, `"port":`+strconv.Itoa(int(port)))
		}
		if scheme != "" {
			q("scheme", scheme)
		}
		if vat != "" {
			q("vat", vat)
		}
		if got, want := s.String(), "{"+strings.Join(parts, ",")+"}"; got != want {
			t.Errorf("%#v.String() = %s; want %s", s, got, want)
		}
	})
}

// TestCanonicalHostIPv4Allocs bounds the work of an IPv4 literal already
// in canonical form: it is returned as it is, without the IDNA mapping.
func TestCanonicalHostIPv4Allocs(t *testing.T) {
	for _, h := range []string{"127.0.0.1", "93.184.216.34"} {
		got, err := CanonicalHost(h)
		if err != nil || got != h {
			t.Fatalf("CanonicalHost(%q) = %q, %v; want %q", h, got, err, h)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = CanonicalHost(h) }); n > 0 {
			t.Errorf("CanonicalHost(%q) allocates %v times; want none", h, n)
		}
	}
}
