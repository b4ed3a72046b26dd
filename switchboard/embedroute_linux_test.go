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

// TestEmbeddedRoutesHere: an IPv6 form that carries an IPv4 address of
// this host (NAT64, SIIT, 6to4, Teredo) is refused on every handle, also
// when only the routing table knows the address is this host's (a local
// route, or an address that appeared since the last read of the
// interfaces): a translator that hairpins would reach this host's
// listeners with no listener-owner check between. It runs in a network
// namespace of its own.
func TestEmbeddedRoutesHere(t *testing.T) {
	if os.Getenv("TOYBOX_EMBED_ROUTES_CHILD") == "1" {
		embedRoutesChild(t)
		return
	}
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Unavailable(t, "no ip command (iproute2)")
	}
	cmd := exec.Command("unshare", "--net", os.Args[0], "-test.run=^TestEmbeddedRoutesHere$", "-test.v")
	cmd.Env = append(os.Environ(), "TOYBOX_EMBED_ROUTES_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestEmbeddedRoutesHere") {
		t.Fatalf("in a network namespace of its own: %v\n%s", err, out)
	}
}

func embedRoutesChild(t *testing.T) {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"route", "add", "local", "8.8.4.0/24", "dev", "lo"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	srv, err := New(Config{OwnAddrs: []netip.Addr{}, Resolver: "127.0.0.1:1", ResolveTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, host := range []string{
		"64:ff9b::808:404",            // NAT64
		"::ffff:0:808:404",            // SIIT
		"2002:808:404::1",             // 6to4
		"2001:0:808:404::1",           // Teredo server
		"2001:0:4136:e378::f7f7:fbfb", // Teredo client (8.8.4.4 inverted)
	} {
		for _, network := range []string{labels.NetworkPublic, labels.NetworkLocal} {
			req := labels.Request{Scheme: "tcp", Host: host, Port: 5432}
			d, err := srv.decide(context.Background(), labels.Set{Network: network}, req)
			if err != nil || d.allow {
				t.Errorf("%s handle to %s (embedding 8.8.4.4, routed here) = allowed %v (%q), %v; want refused", network, host, d.allow, d.reason, err)
			}
		}
	}
	// The embedded address that does not route here is judged as before.
	d, err := srv.decide(context.Background(), labels.Set{Network: labels.NetworkPublic}, labels.Request{Scheme: "tcp", Host: "64:ff9b::808:808", Port: 5432})
	if err != nil || !d.allow {
		t.Errorf("public handle to 64:ff9b::808:808 = %v %q, %v; want allowed", d.allow, d.reason, err)
	}
}
