package switchboard

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestReloadShutsWhatTheNewDenyListRefuses: three connections are open
// on the local handle, to 127.0.0.1 by address, to 127.0.0.2 by address,
// and to 127.0.0.1 by a name. The deny list then gains 127.0.0.2/32 and
// the name: those two connections are shut (each with a decision record),
// the first stays open, and a new connection to a denied one is refused.
// Without Reload's pass over the open connections, the two stay open.
func TestReloadShutsWhatTheNewDenyListRefuses(t *testing.T) {
	f := newFixture(t, nil)
	f.dns.Set("blocked.test", mustAddr("127.0.0.1"))
	p1 := echoServer(t, "")
	l2, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: int(p1)})
	if err != nil {
		t.Fatalf("binding 127.0.0.2: %v", err)
	}
	t.Cleanup(func() { _ = l2.Close() })
	go func() {
		for {
			c, err := l2.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	c := dial(t, f.local)
	ctx := context.Background()
	open := func(host string) net.Conn {
		t.Helper()
		conn, err := c.connectFD(ctx, c.root, "tcp", host, p1, nil)
		if err != nil {
			t.Fatalf("connect %s: %v", host, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		echo(t, conn, "before")
		return conn
	}
	kept, byAddr, byName := open("127.0.0.1"), open("127.0.0.2"), open("blocked.test")

	n, err := f.srv.Reload(Policy{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, DenyNames: []string{"blocked.test"}})
	if err != nil || n != 2 {
		t.Fatalf("Reload = %d, %v; want 2 shut", n, err)
	}
	for name, conn := range map[string]net.Conn{"127.0.0.2": byAddr, "blocked.test": byName} {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("the connection to %s after the reload: read %v; want EOF (shut)", name, err)
		}
	}
	echo(t, kept, "after")
	if _, err := c.connectFD(ctx, c.root, "tcp", "127.0.0.2", p1, nil); err == nil || !strings.Contains(err.Error(), "deny list") {
		t.Errorf("a new connect to 127.0.0.2: %v; want refused for the deny list", err)
	}
	logs := f.log.String()
	if strings.Count(logs, `"op":"revoke"`) != 2 || !strings.Contains(logs, "the deny list changed") {
		t.Errorf("want two revoke records saying why; the log:\n%s", logs)
	}
}

func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo = %q, %v; want %q", buf, err, msg)
	}
	_ = c.SetDeadline(time.Time{})
}

// TestReloadReachesCallsInFlight: Reload judges the connections open when
// it runs, and a connect deciding then (here waiting on a slow DNS answer,
// its name judged by the old list) was held after that pass: the
// connection to a name the new list denies stayed open. A connection is
// now judged again under the current list as it is held.
func TestReloadReachesCallsInFlight(t *testing.T) {
	f := newFixture(t, nil)
	f.dns.Set("tracker.test", mustAddr("127.0.0.1"))
	f.dns.SetDelay("tracker.test", time.Second)
	port := echoServer(t, "")
	c := dial(t, f.local)
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := c.connectFD(context.Background(), c.root, "tcp", "tracker.test", port, nil)
		done <- result{conn, err}
	}()
	time.Sleep(300 * time.Millisecond) // the connect waits on DNS
	if _, err := f.srv.Reload(Policy{DenyNames: []string{"tracker.test"}}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		mustContain(t, "the connect in flight", r.err.Error(), "deny list")
		return
	}
	defer r.conn.Close()
	_ = r.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.conn.Write([]byte("x")); err == nil {
		if _, err := r.conn.Read(make([]byte, 1)); err == nil {
			t.Error("a connection to tracker.test, decided across the Reload that denied it, is open after it")
		}
	}
}
