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
// It runs in a network namespace of its own, made for it.
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
}
