package switchboard

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"toybox/labels"
	"toybox/tests/testenv"
)

// TestRoutesHere: the kernel's routing table decides whether an address is
// this host's: loopback and an interface's address are; an address of a
// local route (AnyIP: `ip route add local 8.8.4.0/24 dev lo`) is too,
// though no interface lists it; an address with no route is not. Then the
// decision: such an address is never public, and is dialled as this host's
// (listener-owner check) however old the snapshot of interface addresses.
// An IPv6 form carrying such an address is refused on every handle. It
// runs in a network namespace of its own, made for it.
func TestRoutesHere(t *testing.T) {
	if os.Getenv("TOYBOX_ROUTES_CHILD") == "1" {
		routesChild(t)
		return
	}
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Unavailable(t, "no ip command (iproute2)")
	}
	cmd := exec.Command("unshare", "--net", os.Args[0], "-test.run=^TestRoutesHere$", "-test.v")
	cmd.Env = append(os.Environ(), "TOYBOX_ROUTES_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRoutesHere") {
		t.Fatalf("in a network namespace of its own: %v\n%s", err, out)
	}
}

func routesChild(t *testing.T) {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"route", "add", "local", "8.8.4.0/24", "dev", "lo"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	for _, tt := range []struct {
		addr string
		here bool
	}{
		{"127.0.0.1", true},
		{"::1", true},
		{"8.8.4.4", true},  // the local route
		{"8.8.8.8", false}, // no route at all in this namespace
		{"2001:4860:4860::8888", false},
	} {
		here, err := routesHere(netip.MustParseAddr(tt.addr))
		if err != nil || here != tt.here {
			t.Errorf("routesHere(%s) = %v, %v; want %v", tt.addr, here, err, tt.here)
		}
	}
	srv, err := New(Config{OwnAddrs: []netip.Addr{}, Resolver: "127.0.0.1:1", ResolveTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	req := labels.Request{Scheme: "tcp", Host: "8.8.4.4", Port: 5432}
	d, err := srv.decide(context.Background(), labels.Set{Network: labels.NetworkPublic}, req)
	if err != nil || d.allow || !strings.Contains(d.reason, "an address of this host") {
		t.Errorf("public handle to 8.8.4.4 = %v %q, %v; want a refusal: an address of this host", d.allow, d.reason, err)
	}
	d, err = srv.decide(context.Background(), labels.Set{Network: labels.NetworkLocal}, req)
	if err != nil || !d.allow || len(d.local) != 1 || !d.local[0] {
		t.Errorf("local handle to 8.8.4.4 = %v %q local %v, %v; want allowed as this host's (owner-checked when dialled)", d.allow, d.reason, d.local, err)
	}
	// An IPv6 form that carries it (NAT64, SIIT, 6to4, Teredo) is refused
	// on every handle: a translator that hairpins would reach this host's
	// listeners with no listener-owner check between.
	for _, host := range []string{
		"64:ff9b::808:404",            // NAT64
		"::ffff:0:808:404",            // SIIT
		"2002:808:404::1",             // 6to4
		"2001:0:808:404::1",           // Teredo server
		"2001:0:4136:e378::f7f7:fbfb", // Teredo client (8.8.4.4 inverted)
	} {
		for _, network := range []string{labels.NetworkPublic, labels.NetworkLocal} {
			d, err := srv.decide(context.Background(), labels.Set{Network: network}, labels.Request{Scheme: "tcp", Host: host, Port: 5432})
			if err != nil || d.allow {
				t.Errorf("%s handle to %s (embedding 8.8.4.4, routed here) = allowed %v (%q), %v; want refused", network, host, d.allow, d.reason, err)
			}
		}
	}
	// An embedded address that does not route here is judged as before.
	d, err = srv.decide(context.Background(), labels.Set{Network: labels.NetworkPublic}, labels.Request{Scheme: "tcp", Host: "64:ff9b::808:808", Port: 5432})
	if err != nil || !d.allow {
		t.Errorf("public handle to 64:ff9b::808:808 = %v %q, %v; want allowed", d.allow, d.reason, err)
	}
}
