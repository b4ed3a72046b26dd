package labels

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// checkCanonicalHostOut checks what every accepted host must be: a fixed
// point of CanonicalHost, printable ASCII, free of the characters that
// would let it smuggle a port, path, userinfo or wildcard.
func checkCanonicalHostOut(t *testing.T, in, h string) {
	t.Helper()
	if h == "" {
		t.Fatalf("CanonicalHost(%q) accepted an empty host", in)
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; c <= ' ' || c >= 0x7f || strings.IndexByte("*@/\\?#%[] ", c) >= 0 {
			t.Fatalf("CanonicalHost(%q) = %q holds byte %q", in, h, c)
		}
	}
	if strings.ToLower(h) != h || strings.HasSuffix(h, ".") {
		t.Fatalf("CanonicalHost(%q) = %q is not lower case without a trailing dot", in, h)
	}
	again, err := CanonicalHost(h)
	if err != nil || again != h {
		t.Fatalf("CanonicalHost(%q) = %q, but CanonicalHost(%q) = %q, %v", in, h, h, again, err)
	}
}

func checkBad(t *testing.T, fn string, in any, err error) {
	t.Helper()
	if !errors.Is(err, ErrBadLabel) {
		t.Fatalf("%s(%q) error %q does not wrap ErrBadLabel", fn, in, err)
	}
	if strings.TrimPrefix(err.Error(), ErrBadLabel.Error()+": ") == "" {
		t.Fatalf("%s(%q) error %q does not name the problem", fn, in, err)
	}
}

// FuzzParse: whatever ParseSet, ParseGrant or CanonicalHost accept prints
// and re-parses to the same thing.
func FuzzParse(f *testing.F) {
	for _, tt := range setCases {
		f.Add(tt.in)
	}
	for _, tt := range grantCases {
		f.Add(tt.in)
	}
	for _, tt := range hostCases {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseSet([]byte(in))
		if err != nil {
			checkBad(t, "ParseSet", in, err)
		} else {
			checkSetStable(t, in, s)
		}

		sets, err := ParseGrant(in)
		if err != nil {
			checkBad(t, "ParseGrant", in, err)
		} else {
			if len(sets) == 0 {
				t.Fatalf("ParseGrant(%q) accepted no sets", in)
			}
			for _, s := range sets {
				if s.Vat != "" || s.IsZero() {
					t.Fatalf("ParseGrant(%q) accepted %v", in, s)
				}
				checkSetStable(t, in, s)
			}
		}

		h, err := CanonicalHost(in)
		if err != nil {
			checkBad(t, "CanonicalHost", in, err)
		} else {
			checkCanonicalHostOut(t, in, h)
		}
	})
}

func checkSetStable(t *testing.T, in string, s Set) {
	t.Helper()
	if c, err := Canonical(s); err != nil || c != s {
		t.Fatalf("parsing %q gave %#v, not canonical: Canonical = %#v, %v", in, s, c, err)
	}
	if s.Host != "" {
		checkCanonicalHostOut(t, in, s.Host)
	}
	out := s.String()
	s2, err := ParseSet([]byte(out))
	if err != nil {
		t.Fatalf("parsing %q gave %#v printing as %s, which does not parse: %v", in, s, out, err)
	}
	if s2 != s || s2.String() != out {
		t.Fatalf("parsing %q gave %#v printing as %s, which parses to %#v printing as %s", in, s, out, s2, s2.String())
	}
	if b, err := s.MarshalJSON(); err != nil || string(b) != out {
		t.Fatalf("%#v.MarshalJSON() = %s, %v; want %s", s, b, err, out)
	}
}

// FuzzParseHostPort: an accepted target has a canonical host and a port,
// agrees with net.SplitHostPort, and re-joins to itself.
func FuzzParseHostPort(f *testing.F) {
	for _, tt := range hostPortCases {
		f.Add(tt.in)
	}
	for _, tt := range hostCases {
		f.Add(tt.in + ":443")
	}
	f.Fuzz(func(t *testing.T, in string) {
		h, p, err := ParseHostPort(in)
		if err != nil {
			checkBad(t, "ParseHostPort", in, err)
			return
		}
		checkCanonicalHostOut(t, in, h)
		if p == 0 {
			t.Fatalf("ParseHostPort(%q) accepted port 0", in)
		}
		sh, sp, err := net.SplitHostPort(in)
		if err != nil {
			t.Fatalf("ParseHostPort(%q) = %q, %d but net.SplitHostPort refuses it: %v", in, h, p, err)
		}
		if sp != strconv.Itoa(int(p)) {
			t.Fatalf("ParseHostPort(%q) port = %d; net.SplitHostPort port = %q", in, p, sp)
		}
		if ch, err := CanonicalHost(sh); err != nil || ch != h {
			t.Fatalf("ParseHostPort(%q) host = %q; net.SplitHostPort host %q canonicalises to %q, %v", in, h, sh, ch, err)
		}
		joined := net.JoinHostPort(h, sp)
		h2, p2, err := ParseHostPort(joined)
		if err != nil || h2 != h || p2 != p {
			t.Fatalf("ParseHostPort(%q) = %q, %d; re-joined %q parses to %q, %d, %v", in, h, p, joined, h2, p2, err)
		}
	})
}

// FuzzParseURL: an accepted URL agrees with net/url about scheme, host and
// port, and its canonical request prints as a URL that parses the same.
func FuzzParseURL(f *testing.F) {
	for _, tt := range urlCases {
		f.Add(tt.in)
	}
	for _, tt := range hostPortCases {
		f.Add("https://" + tt.in + "/x")
	}
	f.Fuzz(func(t *testing.T, in string) {
		r, err := ParseURL(in)
		if err != nil {
			checkBad(t, "ParseURL", in, err)
			return
		}
		if r.Scheme != "http" && r.Scheme != "https" {
			t.Fatalf("ParseURL(%q) scheme = %q", in, r.Scheme)
		}
		if r.Port == 0 || r.Class != "" {
			t.Fatalf("ParseURL(%q) = %+v; want a port and no class", in, r)
		}
		checkCanonicalHostOut(t, in, r.Host)
		u, err := url.Parse(in)
		if err != nil {
			t.Fatalf("ParseURL(%q) = %+v but url.Parse refuses it: %v", in, r, err)
		}
		if u.User != nil {
			t.Fatalf("ParseURL(%q) accepted userinfo %q", in, u.User)
		}
		if ch, err := CanonicalHost(u.Hostname()); err != nil || ch != r.Host {
			t.Fatalf("ParseURL(%q) host = %q; url.Parse host %q canonicalises to %q, %v", in, r.Host, u.Hostname(), ch, err)
		}
		wantPort := u.Port()
		if wantPort == "" {
			wantPort = strconv.Itoa(int(DefaultPort(r.Scheme)))
		}
		if strconv.Itoa(int(r.Port)) != wantPort {
			t.Fatalf("ParseURL(%q) port = %d; url.Parse says %q", in, r.Port, wantPort)
		}
		again := r.Scheme + "://" + net.JoinHostPort(r.Host, strconv.Itoa(int(r.Port))) + "/"
		r2, err := ParseURL(again)
		if err != nil || r2 != r {
			t.Fatalf("ParseURL(%q) = %+v; printed as %q it parses to %+v, %v", in, r, again, r2, err)
		}
	})
}

// pools of field values the constrain fuzzer picks from, so that random
// sets often share values (and so conflict, or match).
var (
	schemePool  = []string{"", "http", "https", "tcp", "HTTPS"}
	hostPool    = []string{"", "a.com", "b.com", "A.COM.", "1.2.3.4", "::1", "[::1]", "xn--bcher-kva.example", "bücher.example"}
	portPool    = []uint16{0, 80, 443, 8443, 22}
	networkPool = []string{"", NetworkPublic, NetworkLocal}
	vatPool     = []string{"", "v1", "v2"}
	classPool   = []string{"", NetworkPublic, NetworkLocal}
)

func pick[T any](pool []T, i uint8) T { return pool[int(i)%len(pool)] }

// setFrom builds a set from pool indexes; a non-empty free string replaces
// the host, so the fuzzer can also try hosts of its own.
func setFrom(sc, h, p, n, v uint8, free string) Set {
	s := Set{Scheme: pick(schemePool, sc), Host: pick(hostPool, h), Port: pick(portPool, p), Network: pick(networkPool, n), Vat: pick(vatPool, v)}
	if free != "" && utf8.ValidString(free) {
		s.Host = free
	}
	return s
}

// checkConstrain checks the Constrain properties for one pair of sets and
// one request: never widen, conflicts symmetric, agreement when both orders
// succeed, absorption.
func checkConstrain(t *testing.T, a, b Set, r Request) {
	t.Helper()
	ab, errAB := Constrain(a, b)
	ba, errBA := Constrain(b, a)
	for _, e := range []error{ErrConflict, ErrBadLabel} {
		if errors.Is(errAB, e) != errors.Is(errBA, e) {
			t.Fatalf("Constrain(%#v, %#v) error = %v but Constrain(b, a) error = %v; want both or neither %v", a, b, errAB, errBA, e)
		}
	}
	ca, errA := Canonical(a)
	cb, errB := Canonical(b)
	if (errA != nil || errB != nil) != errors.Is(errAB, ErrBadLabel) {
		t.Fatalf("Constrain(%#v, %#v) error = %v; Canonical errors %v, %v", a, b, errAB, errA, errB)
	}
	if errors.Is(errAB, ErrWiden) != (ca.Network == NetworkPublic && cb.Network == NetworkLocal && errA == nil && errB == nil && !errors.Is(errAB, ErrConflict)) {
		t.Fatalf("Constrain(%#v, %#v) error = %v; ErrWiden must mean exactly public -> local", a, b, errAB)
	}
	if errAB == nil && errBA == nil && ab != ba {
		t.Fatalf("Constrain(a, b) = %v but Constrain(b, a) = %v (a=%#v b=%#v)", ab, ba, a, b)
	}
	if errAB != nil {
		if errAB.Error() == "" || !(errors.Is(errAB, ErrConflict) || errors.Is(errAB, ErrWiden) || errors.Is(errAB, ErrBadLabel)) {
			t.Fatalf("Constrain(%#v, %#v) error %v wraps no sentinel", a, b, errAB)
		}
		return
	}
	if c, err := Canonical(ab); err != nil || c != ab {
		t.Fatalf("Constrain(%#v, %#v) = %#v is not canonical", a, b, ab)
	}
	for _, x := range []Set{ca, cb} {
		if x.Network == NetworkLocal && ab.Network == NetworkPublic {
			x.Network = "" // asking a public handle for local is ErrWiden by design
		}
		if again, err := Constrain(ab, x); err != nil || again != ab {
			t.Fatalf("Constrain(%v, %v) = %v, %v; want the constrained set back unchanged", ab, x, again, err)
		}
	}
	// Try the request as given and as aimed at the result's own labels.
	reqs := []Request{r}
	aimed := r
	if ab.Host != "" {
		aimed.Host = ab.Host
	}
	if ab.Scheme != "" {
		aimed.Scheme = ab.Scheme
	}
	if ab.Port != 0 {
		aimed.Port = ab.Port
	}
	reqs = append(reqs, aimed)
	for _, cl := range classPool {
		q := aimed
		q.Class = cl
		reqs = append(reqs, q)
	}
	for _, q := range reqs {
		d := ab.Admit(q)
		if d.Reason == "" {
			t.Fatalf("%v.Admit(%+v) gave no reason", ab, q)
		}
		if !d.Allow {
			continue
		}
		if da := ca.Admit(q); !da.Allow {
			t.Fatalf("Constrain(%v, %v) = %v admits %+v (%s) but %v refuses it: %s", ca, cb, ab, q, d.Reason, ca, da.Reason)
		}
		if db := cb.Admit(q); !db.Allow {
			t.Fatalf("Constrain(%v, %v) = %v admits %+v (%s) but %v refuses it: %s", ca, cb, ab, q, d.Reason, cb, db.Reason)
		}
	}
}

func FuzzConstrain(f *testing.F) {
	for i, tt := range constrainCases {
		f.Add(uint8(i), uint8(i+1), uint8(i+2), uint8(i), uint8(i), tt.base.Host,
			uint8(i+3), uint8(i), uint8(i+1), uint8(i+2), uint8(i), tt.narrow.Host,
			uint8(i), uint8(i+1), uint8(i+2), uint8(i), "")
	}
	for i, tt := range admitCases {
		f.Add(uint8(0), uint8(0), uint8(0), uint8(i), uint8(0), tt.set.Host,
			uint8(i), uint8(0), uint8(i), uint8(0), uint8(i), "",
			uint8(i), uint8(0), uint8(i), uint8(i), tt.req.Host)
	}
	f.Fuzz(func(t *testing.T,
		asc, ah, ap, an, av uint8, afree string,
		bsc, bh, bp, bn, bv uint8, bfree string,
		rsc, rh, rp, rc uint8, rfree string,
	) {
		a := setFrom(asc, ah, ap, an, av, afree)
		b := setFrom(bsc, bh, bp, bn, bv, bfree)
		r := Request{Scheme: pick(schemePool, rsc), Host: pick(hostPool, rh), Port: pick(portPool, rp), Class: pick(classPool, rc)}
		if rfree != "" {
			r.Host = rfree
		}
		checkConstrain(t, a, b, r)
	})
}

// TestConstrainProperties runs the FuzzConstrain properties over every
// pair of sets drawn from the pools (a sample of hosts), so they hold in
// every plain `go test` run, not only under -fuzz.
func TestConstrainProperties(t *testing.T) {
	var sets []Set
	for _, sc := range schemePool[:4] {
		for _, h := range []string{"", "a.com", "b.com", "::1"} {
			for _, p := range portPool[:3] {
				for _, n := range networkPool {
					for _, v := range vatPool[:2] {
						sets = append(sets, Set{Scheme: sc, Host: h, Port: p, Network: n, Vat: v})
					}
				}
			}
		}
	}
	sets = append(sets, Set{Host: "A.COM."}, Set{Scheme: "HTTPS"}, Set{Host: "*.a.com"}, Set{Network: "lan"})
	reqs := []Request{
		{Scheme: "https", Host: "a.com"},
		{Scheme: "http", Host: "b.com", Port: 443, Class: NetworkLocal},
		{Scheme: "tcp", Host: "::1", Port: 22, Class: NetworkPublic},
	}
	n := 0
	for i, a := range sets {
		for j, b := range sets {
			if (i*7+j*13)%5 != 0 && i != j { // a fifth of the pairs keeps this quick
				continue
			}
			checkConstrain(t, a, b, reqs[(i+j)%len(reqs)])
			n++
		}
	}
	if n < 1000 {
		t.Fatalf("checked only %d pairs", n)
	}
}
