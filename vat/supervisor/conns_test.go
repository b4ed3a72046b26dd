package supervisor

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/netutil"
)

// guardedServer serves "ok" behind g and a hard cap of limit connections,
// as toybox serve does, and returns its address.
func guardedServer(t *testing.T, g *ConnGuard, limit int) string {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ConnState: g.ConnState, IdleTimeout: time.Minute,
	}
	go func() { _ = srv.Serve(g.Listener(netutil.LimitListener(l, limit))) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// idleConn connects from local (an IP), makes one request, reads the
// answer and keeps the connection open: idle, as a hoarder leaves it.
func idleConn(t *testing.T, addr, local string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp4", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// TestConnGuardShedsIdle: connections left idle fill the listener; a new
// client is still served, because idle ones make room (without the guard
// it waits behind them for the whole idle timeout).
func TestConnGuardShedsIdle(t *testing.T) {
	g := newConnGuard(100, 4)
	g.countLoopback = true
	addr := guardedServer(t, g, 6)
	for i := range 6 {
		if _, err := idleConn(t, addr, "127.0.0.1"); err != nil {
			t.Fatalf("idle connection %d: %v", i+1, err)
		}
	}
	if _, err := idleConn(t, addr, "127.0.0.2"); err != nil {
		t.Fatalf("a new client behind six idle connections: %v", err)
	}
}

// TestConnGuardPerClient: one address holds at most perClient connections;
// the next is closed at once, and another address is still served.
func TestConnGuardPerClient(t *testing.T) {
	g := newConnGuard(2, 100)
	g.countLoopback = true // the test's clients are loopback addresses
	addr := guardedServer(t, g, 100)
	for i := range 2 {
		if _, err := idleConn(t, addr, "127.0.0.1"); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
	}
	if _, err := idleConn(t, addr, "127.0.0.1"); err == nil {
		t.Fatal("a third connection from one address was served")
	}
	if _, err := idleConn(t, addr, "127.0.0.2"); err != nil {
		t.Fatalf("another address: %v", err)
	}
}

// TestClientKey: an IPv6 client is its /64; an IPv4 one (mapped or not) its
// address.
func TestClientKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":             "192.0.2.7",
		"::ffff:192.0.2.7":      "192.0.2.7",
		"2001:db8:1:2:aaaa::1":  "2001:db8:1:2::/64",
		"2001:db8:1:2:bbbb::ff": "2001:db8:1:2::/64",
		"fe80::1%eth0":          "fe80::/64",
	} {
		if got := clientKey(netip.MustParseAddr(in)); got != want {
			t.Errorf("clientKey(%s) = %s; want %s", in, got, want)
		}
	}
}

// TestConnGuardLoopbackNotCounted: a loopback client (a reverse proxy on
// the same host, whose address every visitor shares) is not held to
// perClient.
func TestConnGuardLoopbackNotCounted(t *testing.T) {
	addr := guardedServer(t, newConnGuard(2, 100), 100)
	for i := range 5 {
		if _, err := idleConn(t, addr, "127.0.0.1"); err != nil {
			t.Fatalf("loopback connection %d: %v", i+1, err)
		}
	}
}
