package addrclass

import "net/netip"

// row is one entry of the classification table: a prefix, the class it
// gives, and what it is called in a refusal.
type row struct {
	prefix netip.Prefix
	class  Class
	what   string
	embed  embedding // for rows judged by an embedded IPv4 address
	source string    // the registry (or list) the row comes from
}

// embedding says how an IPv6 prefix carries an IPv4 address.
type embedding int

const (
	embedNone     embedding = iota
	embedLow32              // the last 32 bits (mapped, NAT64 /96, SIIT)
	embed6to4               // bits 16..47 (RFC 3056)
	embedTeredo             // client = ^(last 32 bits), server = bits 32..63 (RFC 4380)
	embedCompat             // deprecated IPv4-compatible ::a.b.c.d (refused)
	embedLocalUse           // 64:ff9b:1::/48: the embedding is not fixed (refused)
)

const (
	srcIPv4  = "IANA IPv4 Special-Purpose Address Registry"
	srcIPv6  = "IANA IPv6 Special-Purpose Address Registry"
	srcMcast = "IANA multicast address space"
	srcSpace = "IANA IPv6 address space (outside 2000::/3 is unassigned or reserved)"
	srcMeta  = "cloud metadata services"
)

func p(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// ipv4Rows is the IANA IPv4 Special-Purpose Address Registry (every row, as
// of its 2024 revision), plus multicast. A row whose "Globally Reachable" is
// True is public; the rest are local (private use, loopback, link local,
// shared address space) or never.
var ipv4Rows = []row{
	{prefix: p("0.0.0.0/8"), class: Never, what: `a "this network" address`, source: srcIPv4},
	{prefix: p("0.0.0.0/32"), class: Never, what: "the unspecified address", source: srcIPv4},
	{prefix: p("10.0.0.0/8"), class: Local, what: "a private address", source: srcIPv4},
	{prefix: p("100.64.0.0/10"), class: Local, what: "a shared (CGNAT) address", source: srcIPv4},
	{prefix: p("127.0.0.0/8"), class: Local, what: "a loopback address", source: srcIPv4},
	{prefix: p("169.254.0.0/16"), class: Local, what: "a link-local address", source: srcIPv4},
	{prefix: p("172.16.0.0/12"), class: Local, what: "a private address", source: srcIPv4},
	{prefix: p("192.0.0.0/24"), class: Never, what: "an IETF protocol assignment address", source: srcIPv4},
	{prefix: p("192.0.0.0/29"), class: Never, what: "an IPv4 service continuity (DS-Lite) address", source: srcIPv4},
	{prefix: p("192.0.0.8/32"), class: Never, what: "the IPv4 dummy address", source: srcIPv4},
	{prefix: p("192.0.0.9/32"), class: Public, what: "the port control protocol anycast address", source: srcIPv4},
	{prefix: p("192.0.0.10/32"), class: Public, what: "the TURN anycast address", source: srcIPv4},
	{prefix: p("192.0.0.170/32"), class: Never, what: "a NAT64/DNS64 discovery address", source: srcIPv4},
	{prefix: p("192.0.0.171/32"), class: Never, what: "a NAT64/DNS64 discovery address", source: srcIPv4},
	{prefix: p("192.0.2.0/24"), class: Never, what: "a documentation address (TEST-NET-1)", source: srcIPv4},
	{prefix: p("192.31.196.0/24"), class: Public, what: "an AS112 address", source: srcIPv4},
	{prefix: p("192.52.193.0/24"), class: Public, what: "an AMT address", source: srcIPv4},
	{prefix: p("192.88.99.0/24"), class: Never, what: "a deprecated 6to4 relay anycast address", source: srcIPv4},
	{prefix: p("192.168.0.0/16"), class: Local, what: "a private address", source: srcIPv4},
	{prefix: p("192.175.48.0/24"), class: Public, what: "an AS112 direct delegation address", source: srcIPv4},
	{prefix: p("198.18.0.0/15"), class: Never, what: "a benchmarking address", source: srcIPv4},
	{prefix: p("198.51.100.0/24"), class: Never, what: "a documentation address (TEST-NET-2)", source: srcIPv4},
	{prefix: p("203.0.113.0/24"), class: Never, what: "a documentation address (TEST-NET-3)", source: srcIPv4},
	{prefix: p("240.0.0.0/4"), class: Never, what: "a reserved address", source: srcIPv4},
	{prefix: p("255.255.255.255/32"), class: Never, what: "the limited broadcast address", source: srcIPv4},
	{prefix: p("224.0.0.0/4"), class: Never, what: "a multicast address", source: srcMcast},
}

// ipv6Rows is the IANA IPv6 Special-Purpose Address Registry (every row, as
// of its 2025 revision), the deprecated forms that embed IPv4, site-local,
// multicast, and everything outside 2000::/3.
var ipv6Rows = []row{
	{prefix: p("::/0"), class: Never, what: "an address outside the IPv6 global unicast space", source: srcSpace},
	{prefix: p("2000::/3"), class: Public, what: "a global unicast address", source: srcSpace},
	{prefix: p("::1/128"), class: Local, what: "a loopback address", source: srcIPv6},
	{prefix: p("::/128"), class: Never, what: "the unspecified address", source: srcIPv6},
	{prefix: p("::ffff:0:0/96"), class: Never, what: "an IPv4-mapped address", embed: embedLow32, source: srcIPv6},
	{prefix: p("::ffff:0:0:0/96"), class: Never, what: "an IPv4-translated (SIIT) address", embed: embedLow32, source: srcSpace},
	{prefix: p("::/96"), class: Never, what: "a deprecated IPv4-compatible address", embed: embedCompat, source: srcSpace},
	{prefix: p("64:ff9b::/96"), class: Never, what: "a NAT64 address", embed: embedLow32, source: srcIPv6},
	{prefix: p("64:ff9b:1::/48"), class: Never, what: "a local-use NAT64 address", embed: embedLocalUse, source: srcIPv6},
	{prefix: p("100::/64"), class: Never, what: "a discard-only address", source: srcIPv6},
	{prefix: p("100:0:0:1::/64"), class: Never, what: "a dummy IPv6 prefix address", source: srcIPv6},
	{prefix: p("2001::/23"), class: Never, what: "an IETF protocol assignment address", source: srcIPv6},
	{prefix: p("2001::/32"), class: Never, what: "a Teredo address", embed: embedTeredo, source: srcIPv6},
	{prefix: p("2001:1::1/128"), class: Public, what: "the port control protocol anycast address", source: srcIPv6},
	{prefix: p("2001:1::2/128"), class: Public, what: "the TURN anycast address", source: srcIPv6},
	{prefix: p("2001:1::3/128"), class: Public, what: "the DNS-SD service registration anycast address", source: srcIPv6},
	{prefix: p("2001:2::/48"), class: Never, what: "a benchmarking address", source: srcIPv6},
	{prefix: p("2001:3::/32"), class: Public, what: "an AMT address", source: srcIPv6},
	{prefix: p("2001:4:112::/48"), class: Public, what: "an AS112 address", source: srcIPv6},
	{prefix: p("2001:10::/28"), class: Never, what: "a deprecated ORCHID address", source: srcIPv6},
	{prefix: p("2001:20::/28"), class: Public, what: "an ORCHIDv2 address", source: srcIPv6},
	{prefix: p("2001:30::/28"), class: Public, what: "a drone remote ID (DET) address", source: srcIPv6},
	{prefix: p("2001:db8::/32"), class: Never, what: "a documentation address", source: srcIPv6},
	{prefix: p("2002::/16"), class: Never, what: "a 6to4 address", embed: embed6to4, source: srcIPv6},
	{prefix: p("2620:4f:8000::/48"), class: Public, what: "an AS112 direct delegation address", source: srcIPv6},
	{prefix: p("3fff::/20"), class: Never, what: "a documentation address", source: srcIPv6},
	{prefix: p("5f00::/16"), class: Never, what: "a segment routing (SRv6 SID) address", source: srcIPv6},
	{prefix: p("fc00::/7"), class: Local, what: "a unique-local address", source: srcIPv6},
	{prefix: p("fe80::/10"), class: Local, what: "a link-local address", source: srcIPv6},
	{prefix: p("fec0::/10"), class: Never, what: "a deprecated site-local address", source: srcSpace},
	{prefix: p("ff00::/8"), class: Never, what: "a multicast address", source: srcMcast},
}

// metadataRows are cloud instance metadata and platform service addresses.
// They are refused on every handle, including local ones, and take
// precedence over every registry row.
var metadataRows = []row{
	{prefix: p("169.254.169.0/24"), class: Never, what: "a cloud metadata address", source: srcMeta},   // AWS, GCP, Azure, OCI, DO, OpenStack, ...
	{prefix: p("169.254.170.0/24"), class: Never, what: "a cloud metadata address", source: srcMeta},   // AWS ECS task / EKS pod identity
	{prefix: p("169.254.0.23/32"), class: Never, what: "a cloud metadata address", source: srcMeta},    // Tencent Cloud
	{prefix: p("100.100.100.200/32"), class: Never, what: "a cloud metadata address", source: srcMeta}, // Alibaba Cloud (CGNAT space)
	{prefix: p("168.63.129.16/32"), class: Never, what: "a cloud metadata address", source: srcMeta},   // Azure wire server (public space)
	{prefix: p("192.0.0.192/32"), class: Never, what: "a cloud metadata address", source: srcMeta},     // Oracle Cloud
	{prefix: p("fd00:ec2::/32"), class: Never, what: "a cloud metadata address", source: srcMeta},      // AWS IPv6 instance services
	// Equinix Metal (formerly Packet): what metadata.platformequinix.com
	// and metadata.packet.net answer, in public space
	// (deploy.equinix.com/developers/docs/metal/server-metadata/metadata/).
	{prefix: p("192.80.8.124/32"), class: Never, what: "a cloud metadata address", source: srcMeta},
	// Scaleway instance metadata, IPv4 and IPv6 (cloud-init's Scaleway
	// datasource documentation).
	{prefix: p("169.254.42.42/32"), class: Never, what: "a cloud metadata address", source: srcMeta},
	{prefix: p("fd00:42::42/128"), class: Never, what: "a cloud metadata address", source: srcMeta},
	// Google Cloud metadata server for IPv6 (cloud.google.com/compute/docs/
	// metadata/querying-metadata).
	{prefix: p("fd20:ce::254/128"), class: Never, what: "a cloud metadata address", source: srcMeta},
	// Oracle Cloud IMDS over IPv6 (docs.oracle.com/en-us/iaas/Content/
	// Compute/Tasks/gettingmetadata.htm).
	{prefix: p("fd00:c1::a9fe:a9fe/128"), class: Never, what: "a cloud metadata address", source: srcMeta},
	// Akamai (Linode) metadata service over IPv6 (cloud-init's Akamai
	// datasource documentation).
	{prefix: p("fd00:a9fe:a9fe::1/128"), class: Never, what: "a cloud metadata address", source: srcMeta},
	// Alibaba Cloud ECS metadata over IPv6 (the IPv6 twin of
	// 100.100.100.200; cloud-init's AliYun datasource, PR 6893).
	{prefix: p("fd00:100::100:200/128"), class: Never, what: "a cloud metadata address", source: srcMeta},
}

// MetadataNames are host names of cloud metadata services. A name equal to
// one of these, or below it, is refused on every handle before any lookup.
// What each one answers is on metadataRows too (TestMetadataNamesHaveRows),
// so no other name, and no address literal, reaches the same service.
var MetadataNames = []string{
	"metadata",
	"metadata.google.internal",
	"metadata.goog",
	"instance-data",
	"instance-data.ec2.internal",
	"metadata.tencentyun.com",
	"metadata.platformequinix.com",
	"metadata.packet.net",
	"metadata.azure.internal",
	"100-100-100-200.aliyun",
}
