package addrclass

import (
	"net/netip"
	"strings"
	"testing"
)

// classTests has one or more addresses for every row of the IANA IPv4 and
// IPv6 special-purpose registries, the metadata list and the embedded forms.
// The expected classes are written by hand, not derived from the table.
var classTests = []struct {
	name string
	addr string
	want Class
	what string // substring of the reason, when it matters
}{
	// IPv4 registry, row by row.
	{"this network", "0.1.2.3", Never, "this network"},
	{"this host", "0.0.0.0", Never, "unspecified"},
	{"private 10", "10.0.0.7", Local, "private"},
	{"private 10 top", "10.255.255.255", Local, "private"},
	{"shared cgnat", "100.64.0.1", Local, "CGNAT"},
	{"shared cgnat top", "100.127.255.254", Local, "CGNAT"},
	{"just above cgnat", "100.128.0.1", Public, "public"},
	{"loopback", "127.0.0.1", Local, "loopback"},
	{"loopback other", "127.255.1.2", Local, "loopback"},
	{"link local", "169.254.1.1", Local, "link-local"},
	{"private 172", "172.16.0.1", Local, "private"},
	{"private 172 top", "172.31.255.255", Local, "private"},
	{"above 172.16/12", "172.32.0.1", Public, "public"},
	{"ietf assignments", "192.0.0.100", Never, "IETF"},
	{"ds-lite", "192.0.0.2", Never, "DS-Lite"},
	{"ipv4 dummy", "192.0.0.8", Never, "dummy"},
	{"pcp anycast", "192.0.0.9", Public, "port control"},
	{"turn anycast", "192.0.0.10", Public, "TURN"},
	{"nat64 discovery 170", "192.0.0.170", Never, "NAT64"},
	{"nat64 discovery 171", "192.0.0.171", Never, "NAT64"},
	{"test-net-1", "192.0.2.1", Never, "documentation"},
	{"as112", "192.31.196.1", Public, "AS112"},
	{"amt", "192.52.193.1", Public, "AMT"},
	{"6to4 relay anycast", "192.88.99.1", Never, "6to4 relay"},
	{"private 192.168", "192.168.1.1", Local, "private"},
	{"as112 direct", "192.175.48.1", Public, "AS112"},
	{"benchmarking", "198.18.0.1", Never, "benchmarking"},
	{"benchmarking top", "198.19.255.255", Never, "benchmarking"},
	{"test-net-2", "198.51.100.1", Never, "documentation"},
	{"test-net-3", "203.0.113.9", Never, "documentation"},
	{"reserved 240", "240.0.0.1", Never, "reserved"},
	{"reserved top", "255.255.255.254", Never, "reserved"},
	{"broadcast", "255.255.255.255", Never, "broadcast"},
	{"multicast", "224.0.0.1", Never, "multicast"},
	{"multicast top", "239.255.255.255", Never, "multicast"},
	{"public", "8.8.8.8", Public, "public"},
	{"public 1.1.1.1", "1.1.1.1", Public, "public"},

	// Cloud metadata, on every handle.
	{"aws metadata", "169.254.169.254", Never, "metadata"},
	{"aws dns", "169.254.169.253", Never, "metadata"},
	{"ecs task metadata", "169.254.170.2", Never, "metadata"},
	{"tencent metadata", "169.254.0.23", Never, "metadata"},
	{"alibaba metadata", "100.100.100.200", Never, "metadata"},
	{"azure wire server", "168.63.129.16", Never, "metadata"},
	{"oracle metadata", "192.0.0.192", Never, "metadata"},
	{"aws ipv6 metadata", "fd00:ec2::254", Never, "metadata"},
	{"equinix metal metadata", "192.80.8.124", Never, "metadata"},
	{"next to equinix metadata", "192.80.8.125", Public, "public"},
	{"scaleway metadata", "169.254.42.42", Never, "metadata"},
	{"scaleway ipv6 metadata", "fd00:42::42", Never, "metadata"},
	{"gcp ipv6 metadata", "fd20:ce::254", Never, "metadata"},
	{"oracle ipv6 metadata", "fd00:c1::a9fe:a9fe", Never, "metadata"},
	{"linode ipv6 metadata", "fd00:a9fe:a9fe::1", Never, "metadata"},
	{"alibaba ipv6 metadata", "fd00:100::100:200", Never, "metadata"},
	{"mapped equinix metadata", "::ffff:192.80.8.124", Never, "metadata"},
	{"nat64 equinix metadata", "64:ff9b::c050:87c", Never, "metadata"},

	// IPv6 registry, row by row.
	{"v6 loopback", "::1", Local, "loopback"},
	{"v6 unspecified", "::", Never, "unspecified"},
	{"mapped private", "::ffff:10.0.0.7", Local, "embedding 10.0.0.7, a private"},
	{"mapped loopback", "::ffff:127.0.0.1", Local, "embedding 127.0.0.1"},
	{"mapped public", "::ffff:8.8.8.8", Public, "embedding 8.8.8.8"},
	{"mapped metadata", "::ffff:169.254.169.254", Never, "metadata"},
	{"siit translated private", "::ffff:0:10.0.0.1", Local, "SIIT"},
	{"compatible loopback", "::127.0.0.1", Never, "IPv4-compatible"},
	{"compatible public", "::8.8.8.8", Never, "IPv4-compatible"},
	{"nat64 public", "64:ff9b::8.8.8.8", Public, "NAT64"},
	{"nat64 private", "64:ff9b::10.0.0.1", Local, "embedding 10.0.0.1"},
	{"nat64 loopback", "64:ff9b::7f00:1", Never, "127.0.0.1, a loopback address"},
	{"nat64 metadata", "64:ff9b::a9fe:a9fe", Never, "metadata"},
	{"nat64 documentation", "64:ff9b::192.0.2.1", Never, "documentation"},
	{"local-use nat64", "64:ff9b:1::808:808", Never, "local-use NAT64"},
	{"discard only", "100::1", Never, "discard"},
	{"dummy prefix", "100:0:0:1::1", Never, "dummy"},
	{"ietf 2001::/23", "2001:100::1", Never, "IETF"},
	{"teredo public", "2001:0:4136:e378:8000:63bf:f7f7:f7f7", Public, "Teredo address embedding 8.8.8.8"},
	{"teredo private client", "2001:0:4136:e378:8000:63bf:f5ff:fff8", Local, "embedding 10.0.0.7"},
	{"teredo loopback client", "2001:0:4136:e378:8000:63bf:80ff:fffe", Never, "client 127.0.0.1"},
	{"teredo metadata client", "2001:0:4136:e378:8000:63bf:5601:5601", Never, "metadata"},
	{"teredo private server", "2001:0:a00:1:8000:63bf:f7f7:f7f7", Local, "server 10.0.0.1"},
	{"pcp anycast v6", "2001:1::1", Public, "port control"},
	{"turn anycast v6", "2001:1::2", Public, "TURN"},
	{"dns-sd anycast v6", "2001:1::3", Public, "DNS-SD"},
	{"other 2001:1::", "2001:1::4", Never, "IETF"},
	{"benchmarking v6", "2001:2::1", Never, "benchmarking"},
	{"amt v6", "2001:3::1", Public, "AMT"},
	{"as112 v6", "2001:4:112::1", Public, "AS112"},
	{"orchid deprecated", "2001:10::1", Never, "ORCHID"},
	{"orchidv2", "2001:20::1", Public, "ORCHIDv2"},
	{"drone remote id", "2001:30::1", Public, "drone"},
	{"documentation v6", "2001:db8::1", Never, "documentation"},
	{"6to4 public", "2002:808:808::1", Public, "6to4 address embedding 8.8.8.8"},
	{"6to4 private", "2002:a00:7::1", Local, "embedding 10.0.0.7"},
	{"6to4 loopback", "2002:7f00:1::1", Never, "127.0.0.1, a loopback address"},
	{"6to4 metadata", "2002:a9fe:a9fe::1", Never, "metadata"},
	{"as112 direct v6", "2620:4f:8000::1", Public, "AS112"},
	{"documentation 3fff", "3fff::1", Never, "documentation"},
	{"srv6 sid", "5f00::1", Never, "segment routing"},
	{"unique local", "fd12:3456::1", Local, "unique-local"},
	{"unique local fc", "fc00::1", Local, "unique-local"},
	{"link local v6", "fe80::1", Local, "link-local"},
	{"link local v6 zone", "fe80::1%lo", Local, "link-local"},
	{"site local", "fec0::1", Never, "site-local"},
	{"multicast v6", "ff02::1", Never, "multicast"},
	{"unassigned 4000::", "4000::1", Never, "outside"},
	{"unassigned 1::", "1::1", Never, "outside"},
	{"global v6", "2606:4700:4700::1111", Public, "global"},
}

func TestClassify(t *testing.T) {
	for _, tt := range classTests {
		t.Run(tt.name, func(t *testing.T) {
			a := netip.MustParseAddr(tt.addr)
			got := Classify(a)
			if got.Class != tt.want {
				t.Errorf("Classify(%s) = %v (%s); want %v", tt.addr, got.Class, got.What, tt.want)
			}
			if !strings.Contains(got.What, tt.what) {
				t.Errorf("Classify(%s).What = %q; want it to contain %q", tt.addr, got.What, tt.what)
			}
		})
	}
}

// TestEveryRowCovered fails when a registry row has no case in classTests,
// so a row added to the table must come with a hand-written expectation.
func TestEveryRowCovered(t *testing.T) {
	all := append(append(append([]row{}, ipv4Rows...), ipv6Rows...), metadataRows...)
	for _, r := range all {
		covered := false
		for _, tt := range classTests {
			a := netip.MustParseAddr(tt.addr).WithZone("")
			if (r.prefix.Addr().Is4() == a.Is4()) && r.prefix.Contains(a) {
				if best, _ := longest(rowsFor(r), a); best.prefix == r.prefix {
					covered = true
					break
				}
			}
		}
		if !covered {
			t.Errorf("row %s (%s) has no test case landing on it", r.prefix, r.what)
		}
	}
}

// metadataNameAddrs is what each cloud metadata name answers, as its
// provider documents it, written by hand.
var metadataNameAddrs = map[string][]string{
	"metadata":                     {"169.254.169.254", "fd20:ce::254"}, // Google Cloud
	"metadata.google.internal":     {"169.254.169.254", "fd20:ce::254"},
	"metadata.goog":                {"169.254.169.254", "fd20:ce::254"},
	"instance-data":                {"169.254.169.254", "fd00:ec2::254"}, // AWS
	"instance-data.ec2.internal":   {"169.254.169.254", "fd00:ec2::254"},
	"metadata.tencentyun.com":      {"169.254.0.23"},
	"metadata.platformequinix.com": {"192.80.8.124"}, // Equinix Metal
	"metadata.packet.net":          {"192.80.8.124"},
	"metadata.azure.internal":      {"169.254.169.254", "168.63.129.16"},
	"100-100-100-200.aliyun":       {"100.100.100.200", "fd00:100::100:200"}, // Alibaba Cloud
}

// TestMetadataNamesHaveRows ties every metadata name to the address rows
// of its service: refusing the name alone leaves the address open to any
// other name that answers it, or to the address written as it is.
func TestMetadataNamesHaveRows(t *testing.T) {
	for _, n := range MetadataNames {
		if _, ok := metadataNameAddrs[n]; !ok {
			t.Errorf("metadata name %q has no addresses in metadataNameAddrs: add what it answers, and a metadata row for each", n)
		}
	}
	for n, addrs := range metadataNameAddrs {
		if !IsMetadataName(n) {
			t.Errorf("%q is in metadataNameAddrs but not in MetadataNames", n)
		}
		for _, s := range addrs {
			a := netip.MustParseAddr(s)
			if _, ok := longest(metadataRows, a); !ok {
				t.Errorf("%s (answered by %s) is on no metadata row", a, n)
			}
			if v := Classify(a); v.Class != Never || !strings.Contains(v.What, "metadata") {
				t.Errorf("Classify(%s) (answered by %s) = %+v; want never, a cloud metadata address", a, n, v)
			}
		}
	}
}

func rowsFor(r row) []row {
	for _, m := range metadataRows {
		if m.prefix == r.prefix {
			return metadataRows
		}
	}
	if r.prefix.Addr().Is4() {
		return ipv4Rows
	}
	return ipv6Rows
}

func TestLoopback(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.1.2.3", true},
		{"::1", true},
		{"::ffff:127.0.0.1", true},
		{"10.0.0.1", false},
		{"64:ff9b::7f00:1", false}, // goes to the translator (and is never: see TestEmbeddedLoopbackIsNever)
		{"8.8.8.8", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := Classify(netip.MustParseAddr(tt.addr)).Loopback; got != tt.want {
				t.Errorf("Classify(%s).Loopback = %v; want %v", tt.addr, got, tt.want)
			}
		})
	}
}

// TestEmbeddedLoopbackIsNever: an IPv6 form that carries a loopback address
// goes to a translator, which would reach its own host's listeners with no
// listener-owner check; only the mapped form is judged as loopback itself.
func TestEmbeddedLoopbackIsNever(t *testing.T) {
	for _, s := range []string{
		"64:ff9b::7f00:1",                      // NAT64
		"::ffff:0:7f00:1",                      // SIIT
		"2002:7f00:1::",                        // 6to4
		"2001:0:4136:e378:8000:63bf:80ff:fffe", // Teredo, client 127.0.0.1
		"2001:0:7f00:1:8000:63bf:a247:27cd",    // Teredo, server 127.0.0.1
	} {
		if v := Classify(netip.MustParseAddr(s)); v.Class != Never || !strings.Contains(v.What, "loopback") {
			t.Errorf("Classify(%s) = %+v; want never, naming loopback", s, v)
		}
	}
	if v := Classify(netip.MustParseAddr("::ffff:127.0.0.1")); v.Class != Local || !v.Loopback {
		t.Errorf("Classify(::ffff:127.0.0.1) = %+v; want local loopback (dialled as 127.0.0.1, owner-checked)", v)
	}
}

func TestGoIsGlobalUnicastDisagrees(t *testing.T) {
	// The reason this package exists: Go calls these global unicast.
	for _, s := range []string{"192.0.2.1", "198.18.0.1", "2001:db8::1", "100.64.0.1", "240.0.0.1", "64:ff9b:1::1", "3fff::1"} {
		a := netip.MustParseAddr(s)
		if !a.IsGlobalUnicast() {
			continue
		}
		if v := Classify(a); v.Class == Public {
			t.Errorf("Classify(%s) = public; want not public", s)
		}
	}
}

func TestClassifier(t *testing.T) {
	c := &Classifier{
		Deny:        []netip.Prefix{netip.MustParsePrefix("93.184.216.0/24"), netip.MustParsePrefix("2606:2800::/32")},
		DenyNames:   []string{"evil.example"},
		Own:         []netip.Addr{netip.MustParseAddr("81.2.69.1"), netip.MustParseAddr("192.168.7.2")},
		PublicNames: []string{"myhost.example.org"},
	}
	tests := []struct {
		name     string
		addr     string
		want     Class
		loopback bool
		what     string
	}{
		{"denied v4", "93.184.216.34", Never, false, "deny list"},
		{"denied mapped", "::ffff:93.184.216.34", Never, false, "deny list"},
		{"denied via 6to4", "2002:5db8:d822::1", Never, false, "deny list"},
		{"denied via nat64", "64:ff9b::5db8:d822", Never, false, "deny list"},
		{"denied v6", "2606:2800:220:1::1", Never, false, "deny list"},
		{"own public", "81.2.69.1", Local, true, "this host"},
		{"own mapped", "::ffff:81.2.69.1", Local, true, "this host"},
		{"own private", "192.168.7.2", Local, true, "private"},
		{"other public", "81.2.69.2", Public, false, "public"},
		// This host's own address in a translated form reaches it through
		// a translator that hairpins, past the owner check.
		{"own via nat64", "64:ff9b::5102:4501", Never, false, "81.2.69.1, an address of this host"},
		{"own via 6to4", "2002:5102:4501::1", Never, false, "an address of this host"},
		{"own via siit", "::ffff:0:5102:4501", Never, false, "an address of this host"},
		{"own private via nat64", "64:ff9b::c0a8:702", Never, false, "an address of this host"},
		{"own as teredo client", "2001:0:4136:e378:8000:63bf:aefd:bafe", Never, false, "an address of this host"},
		{"own as teredo server", "2001:0:5102:4501:8000:63bf:f7f7:f7f7", Never, false, "an address of this host"},
		{"loopback via nat64", "64:ff9b::7f00:1", Never, false, "loopback"},
		{"metadata beats own", "169.254.169.254", Never, false, "metadata"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := c.Addr(netip.MustParseAddr(tt.addr))
			if got.Class != tt.want || got.Loopback != tt.loopback || !strings.Contains(got.What, tt.what) {
				t.Errorf("Addr(%s) = %+v; want class %v, loopback %v, what containing %q", tt.addr, got, tt.want, tt.loopback, tt.what)
			}
		})
	}
	names := []struct {
		host string
		ok   bool
		what string
	}{
		{"metadata.google.internal", true, "metadata"},
		{"x.metadata.google.internal", true, "metadata"},
		{"metadata", true, "metadata"},
		{"instance-data.ec2.internal", true, "metadata"},
		{"evil.example", true, "deny list"},
		{"a.b.evil.example", true, "deny list"},
		{"notevil.example", false, ""},
		{"myhost.example.org", true, "this host"},
		{"example.org", false, ""},
		{"metadata.google.internal.", true, "metadata"},
	}
	for _, tt := range names {
		t.Run("name "+tt.host, func(t *testing.T) {
			v, ok := c.Name(tt.host)
			if ok != tt.ok || (ok && (v.Class != Never || !strings.Contains(v.What, tt.what))) {
				t.Errorf("Name(%q) = %+v, %v; want never (%q), %v", tt.host, v, ok, tt.what, tt.ok)
			}
		})
	}
}

func TestAdmits(t *testing.T) {
	tests := []struct {
		c       Class
		network string
		want    bool
	}{
		{Public, "public", true},
		{Public, "local", true},
		{Public, "", false},
		{Local, "public", false},
		{Local, "local", true},
		{Never, "public", false},
		{Never, "local", false},
	}
	for _, tt := range tests {
		if got := (Verdict{Class: tt.c}).Admits(tt.network); got != tt.want {
			t.Errorf("Verdict{%v}.Admits(%q) = %v; want %v", tt.c, tt.network, got, tt.want)
		}
	}
}

// FuzzClassify checks invariants on any 16 bytes: an address and its
// IPv4-mapped form agree; nothing Go calls loopback, private, multicast,
// link-local or unspecified is public; invalid input never panics.
func FuzzClassify(f *testing.F) {
	for _, tt := range classTests {
		a := netip.MustParseAddr(tt.addr).WithZone("")
		b := a.As16()
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) != 16 && len(raw) != 4 {
			return
		}
		a, _ := netip.AddrFromSlice(raw)
		v := Classify(a)
		if v.Class == Public && (a.IsLoopback() || a.IsPrivate() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsInterfaceLocalMulticast()) {
			t.Fatalf("Classify(%s) = public", a)
		}
		if a.Is4() {
			m := netip.AddrFrom16(a.As16())
			if vm := Classify(m); vm.Class != v.Class {
				t.Fatalf("Classify(%s) = %v but Classify(%s) = %v", a, v.Class, m, vm.Class)
			}
		}
		if v.Class == Public && a.Is6() && !a.Is4In6() && !netip.MustParsePrefix("2000::/3").Contains(a) && !netip.MustParsePrefix("64:ff9b::/96").Contains(a) && !netip.MustParsePrefix("::ffff:0:0:0/96").Contains(a) {
			t.Fatalf("Classify(%s) = public outside 2000::/3", a)
		}
	})
}
