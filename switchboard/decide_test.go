package switchboard

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"toybox/labels"
	"toybox/switchboard/dnstest"
)

// TestAddressClassesOverTheWire asks both sockets about every address class
// and SSRF spelling, through a real connection.
func TestAddressClassesOverTheWire(t *testing.T) {
	f := newFixture(t, nil)
	pub, loc := dial(t, f.public), dial(t, f.local)
	tests := []struct {
		name     string
		host     string
		public   bool   // admitted on the public socket
		local    bool   // admitted on the local socket
		reason   string // part of the public refusal
		localWhy string // part of the local refusal, when refused
	}{
		{"loopback", "127.0.0.1", false, true, "127.0.0.1 is a loopback address; this handle reaches public addresses only", ""},
		{"loopback v6", "::1", false, true, "loopback", ""},
		{"bracketed v6", "[::1]", false, true, "loopback", ""},
		{"private", "10.0.0.7", false, true, "10.0.0.7 is a private address", ""},
		{"cgnat", "100.64.1.1", false, true, "CGNAT", ""},
		{"link local", "169.254.3.4", false, true, "link-local", ""},
		{"unique local", "fd12::1", false, true, "unique-local", ""},
		{"metadata", "169.254.169.254", false, false, "169.254.169.254 is a cloud metadata address", "cloud metadata"},
		{"metadata v6", "fd00:ec2::254", false, false, "metadata", "metadata"},
		{"alibaba metadata", "100.100.100.200", false, false, "metadata", "metadata"},
		{"azure wire server", "168.63.129.16", false, false, "metadata", "metadata"},
		{"equinix metal metadata", "192.80.8.124", false, false, "192.80.8.124 is a cloud metadata address", "metadata"},
		{"scaleway metadata", "169.254.42.42", false, false, "metadata", "metadata"},
		{"scaleway metadata v6", "fd00:42::42", false, false, "metadata", "metadata"},
		{"gcp metadata v6", "fd20:ce::254", false, false, "metadata", "metadata"},
		{"oracle metadata v6", "fd00:c1::a9fe:a9fe", false, false, "metadata", "metadata"},
		{"linode metadata v6", "fd00:a9fe:a9fe::1", false, false, "metadata", "metadata"},
		{"alibaba metadata v6", "fd00:100::100:200", false, false, "metadata", "metadata"},
		{"unspecified", "0.0.0.0", false, false, "unspecified", "unspecified"},
		{"unspecified v6", "::", false, false, "unspecified", "unspecified"},
		{"broadcast", "255.255.255.255", false, false, "broadcast", "broadcast"},
		{"multicast", "224.0.0.251", false, false, "multicast", "multicast"},
		{"documentation", "192.0.2.10", false, false, "documentation", "documentation"},
		{"benchmarking", "198.18.0.5", false, false, "benchmarking", "benchmarking"},
		{"reserved", "240.1.2.3", false, false, "reserved", "reserved"},
		{"mapped loopback", "::ffff:127.0.0.1", false, true, "loopback", ""},
		{"mapped metadata", "::ffff:169.254.169.254", false, false, "metadata", "metadata"},
		{"compatible loopback", "::127.0.0.1", false, false, "IPv4-compatible", "IPv4-compatible"},
		{"nat64 loopback", "64:ff9b::7f00:1", false, false, "loopback", "NAT64 address embedding 127.0.0.1, a loopback address"},
		{"nat64 metadata", "64:ff9b::a9fe:a9fe", false, false, "metadata", "metadata"},
		{"local-use nat64", "64:ff9b:1::808:808", false, false, "local-use NAT64", "local-use NAT64"},
		{"6to4 private", "2002:a00:1::1", false, true, "6to4", ""},
		{"6to4 metadata", "2002:a9fe:a9fe::1", false, false, "metadata", "metadata"},
		{"teredo loopback client", "2001:0:4136:e378:8000:63bf:80ff:fffe", false, false, "loopback", "Teredo address embedding a loopback address"},
		{"decimal ipv4", "2130706433", false, false, "", ""},
		{"octal ipv4", "0177.0.0.1", false, false, "", ""},
		{"hex ipv4", "0x7f.0.0.1", false, false, "", ""},
		{"short ipv4", "127.1", false, false, "", ""},
		{"bracketed ipv4", "[127.0.0.1]", false, false, "brackets", "brackets"},
		{"zone", "fe80::1%eth0", false, false, "", ""},
		{"public", "8.8.8.8", true, true, "", ""},
		{"public v6", "2606:4700:4700::1111", true, true, "", ""},
		{"nat64 public", "64:ff9b::808:808", true, true, "", ""},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, side := range []struct {
				c     *client
				want  bool
				why   string
				label string
			}{{pub, tt.public, tt.reason, "public"}, {loc, tt.local, tt.localWhy, "local"}} {
				got, err := check(ctx, side.c.root, "tcp", tt.host, 443)
				if err != nil {
					t.Fatalf("%s check(%s): %v", side.label, tt.host, err)
				}
				if got.allow != side.want {
					t.Errorf("%s check(%s).allow = %v (%s); want %v", side.label, tt.host, got.allow, got.reason, side.want)
				}
				if !side.want && side.why != "" {
					mustContain(t, side.label+" reason", got.reason, side.why)
				}
			}
		})
	}
}

// TestRefusalTextReachesTheCaller checks that err.Error() on the calling
// side still carries the "egress refused: " text.
func TestRefusalTextReachesTheCaller(t *testing.T) {
	f := newFixture(t, nil)
	c := dial(t, f.public)
	ctx := context.Background()
	_, err := c.connectFD(ctx, c.root, "tcp", "169.254.169.254", 80, nil)
	if err == nil {
		t.Fatal("connect to metadata succeeded")
	}
	mustContain(t, "error", err.Error(), "egress refused: 169.254.169.254 is a cloud metadata address")
	f.dns.Set("example.net", netip.MustParseAddr("10.0.0.7"))
	_, err = c.connectFD(ctx, c.root, "tcp", "example.net", 80, nil)
	if err == nil {
		t.Fatal("connect to a private name succeeded on the public socket")
	}
	mustContain(t, "error", err.Error(), "egress refused: example.net resolves to 10.0.0.7, a private address")
}

func TestNames(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.DenyNames = []string{"blocked.test"}
		c.PublicNames = []string{"me.test"}
		c.Deny = []netip.Prefix{netip.MustParsePrefix("127.0.0.99/32")}
	})
	A := netip.MustParseAddr
	f.dns.Set("loop.test", A("127.0.0.1"))
	f.dns.Set("mixed.test", A("8.8.8.8"), A("10.1.2.3"))
	f.dns.Set("mixed6.test", A("8.8.8.8"), A("::1"))
	f.dns.Set("meta.test", A("169.254.169.254"))
	f.dns.Set("meta6.test", A("fd00:ec2::254"))
	f.dns.Set("gcp-meta6.test", A("fd20:ce::254"))
	f.dns.Set("equinix-meta.test", A("192.80.8.124"))
	f.dns.Set("mapped.test", A("::ffff:10.0.0.1"))
	f.dns.Set("empty.test")
	f.dns.Set("pub.test", A("8.8.4.4"), A("2001:4860:4860::8888"))
	f.dns.Set("denied-addr.test", A("127.0.0.99"))
	f.dns.Set("blocked.test", A("8.8.8.8"))
	f.dns.Set("x.blocked.test", A("8.8.8.8"))
	f.dns.Set("metadata.google.internal", A("8.8.8.8"))
	f.dns.Set("me.test", A("81.2.69.77"))
	pub, loc := dial(t, f.public), dial(t, f.local)
	ctx := context.Background()
	tests := []struct {
		name          string
		host          string
		public, local bool
		reason        string
		queried       bool
	}{
		{"loopback name", "loop.test", false, true, "loop.test resolves to 127.0.0.1, a loopback address", true},
		{"trailing dot", "loop.test.", false, true, "loop.test resolves to 127.0.0.1", true},
		{"upper case", "LOOP.Test", false, true, "loop.test resolves", true},
		{"mixed answers", "mixed.test", false, true, "mixed.test resolves to 10.1.2.3, a private address", true},
		{"mixed v6 answers", "mixed6.test", false, true, "resolves to ::1", true},
		{"metadata answer", "meta.test", false, false, "meta.test resolves to 169.254.169.254, a cloud metadata address", true},
		{"metadata v6 answer", "meta6.test", false, false, "cloud metadata", true},
		{"gcp metadata v6 answer", "gcp-meta6.test", false, false, "gcp-meta6.test resolves to fd20:ce::254, a cloud metadata address", true},
		{"equinix metadata answer", "equinix-meta.test", false, false, "equinix-meta.test resolves to 192.80.8.124, a cloud metadata address", true},
		{"mapped answer", "mapped.test", false, true, "embedding 10.0.0.1", true},
		{"public answers", "pub.test", true, true, "", true},
		{"deny list address", "denied-addr.test", false, false, "deny list", true},
		{"deny list name", "blocked.test", false, false, "blocked.test is a name on the operator's deny list", false},
		{"deny list subname", "x.blocked.test", false, false, "deny list", false},
		{"deny list trailing dot", "blocked.test.", false, false, "deny list", false},
		{"deny list upper case", "BLOCKED.Test", false, false, "deny list", false},
		{"metadata name trailing dot", "metadata.google.internal.", false, false, "cloud metadata name", false},
		{"metadata name", "metadata.google.internal", false, false, "metadata.google.internal is a cloud metadata name", false},
		{"own public name", "me.test", false, false, "public name of this host", false}, // resolved by the own-address refresher, never by a check
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := strings.ToLower(strings.TrimSuffix(tt.host, "."))
			before := f.dns.Queries(name, "")
			for _, side := range []struct {
				c     *client
				want  bool
				label string
			}{{pub, tt.public, "public"}, {loc, tt.local, "local"}} {
				got, err := check(ctx, side.c.root, "tcp", tt.host, 443)
				if err != nil {
					t.Fatalf("%s check(%s): %v", side.label, tt.host, err)
				}
				if got.allow != side.want {
					t.Errorf("%s check(%s) = %v (%s); want %v", side.label, tt.host, got.allow, got.reason, side.want)
				}
				if !got.allow && tt.reason != "" && (side.label == "public" || !tt.local) {
					mustContain(t, side.label+" reason", got.reason, tt.reason)
				}
			}
			if q := f.dns.Queries(name, "") - before; (q > 0) != tt.queried {
				t.Errorf("%s: %d DNS queries by the check; want queried=%v", tt.host, q, tt.queried)
			}
		})
	}
	t.Run("empty answer", func(t *testing.T) {
		_, err := check(ctx, loc.root, "tcp", "empty.test", 443)
		if err == nil || !strings.Contains(err.Error(), "empty.test") {
			t.Errorf("check(empty.test) = %v; want a resolution error naming it", err)
		}
		if err != nil && strings.Contains(err.Error(), "egress refused") {
			t.Errorf("check(empty.test) = %v; a failed lookup is not a policy refusal", err)
		}
	})
	t.Run("no such name", func(t *testing.T) {
		_, err := check(ctx, loc.root, "tcp", "nonexistent.test", 443)
		if err == nil || !strings.Contains(err.Error(), "no such host") {
			t.Errorf("check(nonexistent.test) = %v; want no such host", err)
		}
	})
}

// TestDenyMappedPrefixRefuses: a deny CIDR written in IPv4-mapped form,
// from the file or in Config, refuses the IPv4 address, its mapped form
// and a name answering either.
func TestDenyMappedPrefixRefuses(t *testing.T) {
	file, err := ParseFile([]byte(`{"deny":["::ffff:10.20.0.0/112"]}`))
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := file.Config(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	A := netip.MustParseAddr
	for _, src := range []struct {
		name string
		deny []netip.Prefix
	}{
		{"file", fromFile.Deny},
		{"config", []netip.Prefix{netip.MustParsePrefix("::ffff:10.20.0.0/112")}},
	} {
		t.Run(src.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.Deny = src.deny })
			f.dns.Set("mapped.test", A("::ffff:10.20.1.1"))
			f.dns.Set("v4.test", A("10.20.1.1"))
			f.dns.Set("next.test", A("10.21.0.1"))
			loc := dial(t, f.local)
			ctx := context.Background()
			for _, h := range []string{"10.20.1.1", "::ffff:10.20.1.1", "mapped.test", "v4.test"} {
				got, err := check(ctx, loc.root, "tcp", h, 80)
				if err != nil {
					t.Fatalf("check(%s): %v", h, err)
				}
				if got.allow {
					t.Errorf("check(%s) admitted %v on the local socket; 10.20.0.0/16 is denied", h, got.addrs)
				} else {
					mustContain(t, h+" reason", got.reason, "deny list (10.20.0.0/16)")
				}
			}
			for _, h := range []string{"10.21.0.1", "next.test"} {
				if got, err := check(ctx, loc.root, "tcp", h, 80); err != nil || !got.allow {
					t.Errorf("check(%s) = %+v, %v; want admitted (outside the denied prefix)", h, got, err)
				}
			}
		})
	}
	s, err := New(Config{Deny: []netip.Prefix{netip.MustParsePrefix("::ffff:10.20.0.0/80")}, OwnAddrs: []netip.Addr{}})
	if err == nil {
		_ = s.Close()
	}
	if !errors.Is(err, ErrConfig) {
		t.Errorf("New with a mapped prefix shorter than /96 = %v; want ErrConfig", err)
	}
}

// TestDenyNameIsTheAskedName pins what a denied name is: a filter on the
// name asked for (and the names below it), judged before any lookup. A
// name whose answer is a CNAME to a denied name is judged by its addresses,
// like any name that answers the same addresses; denying the addresses is
// what keeps a service out.
func TestDenyNameIsTheAskedName(t *testing.T) {
	A := netip.MustParseAddr
	for _, tt := range []struct {
		name  string
		deny  []netip.Prefix
		allow bool
		why   string
	}{
		{"name denied", nil, true, ""},
		{"name and address denied", []netip.Prefix{netip.MustParsePrefix("8.8.8.8/32")}, false, "alias.test resolves to 8.8.8.8, an address on the operator's deny list"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) {
				c.DenyNames = []string{"tracker.test"}
				c.Deny = tt.deny
			})
			f.dns.Set("tracker.test", A("8.8.8.8"))
			f.dns.SetCNAME("alias.test", "tracker.test")
			pub := dial(t, f.public)
			ctx := context.Background()
			got, err := check(ctx, pub.root, "tcp", "tracker.test", 443)
			if err != nil || got.allow {
				t.Fatalf("check(tracker.test) = %+v, %v; want refused", got, err)
			}
			mustContain(t, "reason", got.reason, "tracker.test is a name on the operator's deny list")
			got, err = check(ctx, pub.root, "tcp", "alias.test", 443)
			if err != nil {
				t.Fatalf("check(alias.test): %v", err)
			}
			if len(got.addrs) != 1 || got.addrs[0] != "8.8.8.8" {
				t.Fatalf("alias.test resolved to %v; want the CNAME target's 8.8.8.8", got.addrs)
			}
			if got.allow != tt.allow {
				t.Errorf("check(alias.test).allow = %v (%s); want %v", got.allow, got.reason, tt.allow)
			}
			if !tt.allow {
				mustContain(t, "reason", got.reason, tt.why)
			}
		})
	}
}

// TestNotGrantedNameIsNeverResolved: labels are decided before DNS, so a
// name the handle was not granted never leaves through a lookup.
func TestNotGrantedNameIsNeverResolved(t *testing.T) {
	f := newFixture(t, nil)
	f.dns.Set("secret.test", netip.MustParseAddr("127.0.0.1"))
	c := dial(t, f.local)
	h, err := constrain(t, c.root, labels.Set{Host: "granted.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	got, err := check(context.Background(), h, "tcp", "secret.test", 443)
	if err != nil {
		t.Fatal(err)
	}
	if got.allow {
		t.Fatal("check(secret.test) allowed on a handle granted granted.test")
	}
	mustContain(t, "reason", got.reason, "egress to secret.test not granted")
	if q := f.dns.Queries("secret.test", ""); q != 0 {
		t.Errorf("secret.test was queried %d times; want 0", q)
	}
}

// TestRebinding: the name is resolved once per operation and the dialled
// address is the one judged. The resolver alternates a loopback answer
// (allowed on local) with a metadata one.
func TestRebinding(t *testing.T) {
	f := newFixture(t, nil)
	port := echoServer(t, "")
	f.dns.SetFunc("rebind.test", func(n int, qtype string) []netip.Addr {
		if qtype != "A" {
			return nil
		}
		if n%2 == 1 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		}
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	})
	c := dial(t, f.local)
	ctx := context.Background()
	var allowed, refused int
	for i := 0; i < 6; i++ {
		before := f.dns.Queries("rebind.test", "A")
		conn, err := c.connectFD(ctx, c.root, "tcp", "rebind.test", port, nil)
		after := f.dns.Queries("rebind.test", "A")
		if after-before != 1 {
			t.Fatalf("connect %d made %d A queries; want exactly 1", i, after-before)
		}
		if err != nil {
			mustContain(t, "refusal", err.Error(), "egress refused: rebind.test resolves to 169.254.169.254, a cloud metadata address")
			refused++
			continue
		}
		allowed++
		if got := conn.RemoteAddr().String(); got != "127.0.0.1:"+itoa(port) {
			t.Errorf("connected to %s; want the vetted 127.0.0.1:%d", got, port)
		}
		_ = conn.Close()
	}
	if allowed != 3 || refused != 3 {
		t.Errorf("allowed %d, refused %d; want 3 and 3", allowed, refused)
	}
}

// TestConstrainNeverWidens tries every widening and conflicting constraint.
func TestConstrainNeverWidens(t *testing.T) {
	f := newFixture(t, nil)
	pub, loc := dial(t, f.public), dial(t, f.local)
	if _, err := constrain(t, pub.root, labels.Set{Network: "local"}); err == nil || !errors.Is(err, err) || !strings.Contains(err.Error(), "widen") {
		t.Errorf("public constrain(network local) = %v; want a widening error", err)
	}
	narrowed, err := constrain(t, loc.root, labels.Set{Network: "public"})
	if err != nil {
		t.Fatalf("local constrain(network public): %v", err)
	}
	defer narrowed.Release()
	got, err := check(context.Background(), narrowed, "tcp", "127.0.0.1", 80)
	if err != nil || got.allow {
		t.Errorf("check(127.0.0.1) on local narrowed to public = %+v, %v; want refused", got, err)
	}
	h, err := constrain(t, loc.root, labels.Set{Host: "a.test", Port: 443})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	for _, s := range []labels.Set{{Host: "b.test"}, {Port: 80}, {Network: "local", Host: "b.test"}} {
		if h2, err := constrain(t, h, s); err == nil {
			h2.Release()
			t.Errorf("constrain(%s) on {a.test:443} succeeded; want a conflict", s)
		}
	}
	vat, err := constrain(t, h, labels.Set{Vat: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	defer vat.Release()
	if h2, err := constrain(t, vat, labels.Set{Vat: "v2"}); err == nil {
		h2.Release()
		t.Error("constrain(vat v2) on vat v1 succeeded")
	}
	f.dns.Set("a.test", netip.MustParseAddr("127.0.0.1"))
	for _, tc := range []struct {
		host string
		port uint16
		want bool
	}{{"a.test", 443, true}, {"a.test", 80, false}, {"b.test", 443, false}} {
		got, err := check(context.Background(), vat, "tcp", tc.host, tc.port)
		if err != nil || got.allow != tc.want {
			t.Errorf("check(%s:%d) on vat handle = %+v, %v; want allow %v", tc.host, tc.port, got, err, tc.want)
		}
	}
	d, release := vat.Describe(context.Background(), nil)
	defer release()
	r, err := d.Struct()
	if err != nil {
		t.Fatal(err)
	}
	l, _ := r.Labels()
	s, _ := fromSchema(l)
	if want := (labels.Set{Host: "a.test", Port: 443, Network: "local", Vat: "v1"}); s != want {
		t.Errorf("describe = %s; want %s", s, want)
	}
}

// FuzzDecideLiteral: whatever host text arrives, a public handle never
// admits an address that is not public, and never panics.
func FuzzDecideLiteral(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "::ffff:127.0.0.1", "[::1]", "0x7f.1", "2130706433", "8.8.8.8", "64:ff9b::7f00:1", "2002:7f00:1::", "fe80::1%lo", "ｅxample.com", "1.1.1.1.", "[2001:db8::1]"} {
		f.Add(s)
	}
	srv, err := New(Config{OwnAddrs: []netip.Addr{}, Resolver: "127.0.0.1:1", ResolveTimeout: 10 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	f.Fuzz(func(t *testing.T, host string) {
		if _, isIP := parseLiteral(strings.Trim(host, "[]")); !isIP {
			host = "[" + host + "]" // keep it off the resolver
		}
		d, err := srv.decide(context.Background(), labels.Set{Network: "public"}, labels.Request{Scheme: "tcp", Host: host, Port: 1})
		if err != nil || !d.allow {
			return
		}
		for _, a := range d.vetted {
			if v := srv.classify().Addr(a); v.Class.String() != "public" {
				t.Fatalf("decide(%q) admitted %s, %s", host, a, v.What)
			}
		}
	})
}

// FuzzDecideURL: any URL that parses is decided without panics, and a
// public handle never admits a non-public address. Names go to a resolver
// that refuses at once, so only literals can be admitted.
func FuzzDecideURL(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1/", "https://[::ffff:a9fe:a9fe]:443/x", "ws://8.8.8.8:80", "http://0177.1/", "http://[64:ff9b::7f00:1]/", "https://example.com./", "http://%31%32%37.0.0.1/", "http://127.0.0.1\\@8.8.8.8/"} {
		f.Add(s)
	}
	srv, err := New(Config{OwnAddrs: []netip.Addr{}, Resolver: "127.0.0.1:1", ResolveTimeout: 10 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	f.Fuzz(func(t *testing.T, raw string) {
		req, err := labels.ParseURL(raw)
		if err != nil {
			return
		}
		d, err := srv.decide(context.Background(), labels.Set{Network: "public"}, req)
		if err != nil || !d.allow {
			return
		}
		for _, a := range d.vetted {
			if v := srv.classify().Addr(a); v.Class.String() != "public" {
				t.Fatalf("decide(%q) admitted %s, %s", raw, a, v.What)
			}
		}
	})
}

// TestLoopbackCheckHook: every address of this host a local handle would
// dial goes through Config.LoopbackCheck first, with the handle's labels;
// its refusal is an egress refusal; public addresses never reach it.
func TestLoopbackCheckHook(t *testing.T) {
	type call struct {
		addr netip.AddrPort
		vat  string
	}
	calls := make(chan call, 16)
	okPort := echoServer(t, "")
	f := newFixture(t, func(c *Config) {
		c.OwnAddrs = []netip.Addr{netip.MustParseAddr("81.2.69.1")}
		c.LoopbackCheck = func(ctx context.Context, addr netip.AddrPort, h labels.Set) (bool, string) {
			calls <- call{addr, h.Vat}
			if addr.Port() == okPort {
				return true, ""
			}
			return false, fmt.Sprintf("the listener on %s belongs to another vat", addr)
		}
	})
	c := dial(t, f.local)
	h, err := constrain(t, c.root, labels.Set{Vat: "v7"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	ctx := context.Background()
	conn, err := c.connectFD(ctx, h, "tcp", "localhost", okPort, nil)
	if err != nil {
		t.Fatalf("connect to an allowed loopback listener: %v", err)
	}
	conn.Close()
	if got := <-calls; got.addr.Port() != okPort || got.vat != "v7" || !got.addr.Addr().IsLoopback() {
		t.Errorf("hook called with %+v; want a loopback address, port %d, vat v7", got, okPort)
	}
	_, err = c.connectFD(ctx, h, "tcp", "127.0.0.1", 9, nil)
	if err == nil {
		t.Fatal("connect past a refusing listener-owner check succeeded")
	}
	mustContain(t, "refusal", err.Error(), "egress refused: the listener on 127.0.0.1:9 belongs to another vat")
	<-calls
	got, err := check(ctx, h, "tcp", "81.2.69.1", 9)
	if err != nil || got.allow {
		t.Errorf("check(own public address) = %+v, %v; want refused by the hook", got, err)
	}
	if c := <-calls; c.addr.Addr() != netip.MustParseAddr("81.2.69.1") {
		t.Errorf("hook called with %v; want the host's own address", c.addr)
	}
	if _, err := check(ctx, h, "tcp", "8.8.8.8", 9); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-calls:
		t.Errorf("hook called for a public address: %+v", c)
	default:
	}
	pub := dial(t, f.public)
	if got, _ := check(ctx, pub.root, "tcp", "81.2.69.1", 9); got.allow {
		t.Error("the public socket admitted this host's own address")
	}
}

// TestIDNAOverTheWire: Unicode and fullwidth spellings are decided on
// their canonical A-label form, the name the resolver is asked.
func TestIDNAOverTheWire(t *testing.T) {
	f := newFixture(t, nil)
	f.dns.Set("xn--bcher-kva.test", netip.MustParseAddr("10.0.0.9"))
	f.dns.Set("loop.test", netip.MustParseAddr("127.0.0.1"))
	pub, loc := dial(t, f.public), dial(t, f.local)
	ctx := context.Background()
	for _, host := range []string{"bücher.test", "BÜCHER.test", "ｌｏｏｐ.test"} {
		got, err := check(ctx, pub.root, "tcp", host, 80)
		if err != nil {
			t.Fatalf("check(%s): %v", host, err)
		}
		if got.allow {
			t.Errorf("public check(%s) allowed", host)
		}
		mustContain(t, "reason", got.reason, ".test resolves to")
		if got, err := check(ctx, loc.root, "tcp", host, 80); err != nil || !got.allow {
			t.Errorf("local check(%s) = %+v, %v", host, got, err)
		}
	}
	h, err := constrain(t, loc.root, labels.Set{Host: "xn--bcher-kva.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if got, err := check(ctx, h, "tcp", "bücher.test", 80); err != nil || !got.allow {
		t.Errorf("a grant of the A-label admits the U-label: %+v, %v", got, err)
	}
}

// TestPublicNamesAddresses: the addresses this host's public names resolve
// to are this host's own (behind NAT they reach it): never public, from
// the switchboard's first call.
func TestPublicNamesAddresses(t *testing.T) {
	dns, err := dnstest.New("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dns.Close()
	dns.Set("me.test", netip.MustParseAddr("81.2.69.5"))
	dns.Set("alias.test", netip.MustParseAddr("81.2.69.5"))
	f := newFixture(t, func(c *Config) {
		c.PublicNames = []string{"me.test"}
		c.Resolver = dns.Addr()
	})
	// From the first call on, not after a first refresh.
	if c := f.srv.classify().Addr(netip.MustParseAddr("81.2.69.5")).Class.String(); c == "public" {
		t.Fatal("when New returned, the public name's address was still public")
	}
	pub := dial(t, f.public)
	got, err := check(context.Background(), pub.root, "tcp", "alias.test", 443)
	if err != nil {
		t.Fatal(err)
	}
	if got.allow {
		t.Error("the public socket admitted an address of this host's public name")
	}
	mustContain(t, "reason", got.reason, "an address of this host")
}
