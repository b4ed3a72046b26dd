package tests

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// heldRemote accepts every connection and keeps it, reading until its end:
// accepted counts the connections, ended those whose other side ended.
type heldRemote struct {
	port            string
	accepted, ended atomic.Int64
}

func newHeldRemote(t *testing.T) *heldRemote {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &heldRemote{port: strconv.Itoa(l.Addr().(*net.TCPAddr).Port)}
	conns := make(chan net.Conn, 1<<16)
	t.Cleanup(func() {
		_ = l.Close()
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.accepted.Add(1)
			conns <- c
			go func() {
				buf := make([]byte, 512)
				for {
					if _, err := c.Read(buf); err != nil {
						r.ended.Add(1)
						return
					}
				}
			}()
		}
	}()
	return r
}

// TestRelayLimitRefusalIsShut: an app of a real wall holds MaxAppSockets
// (1024) relayed sockets; each connect past that is refused with its
// reason, and its connection, which the switchboard had already made, ends
// at once. It was only closed by the supervisor while the switchboard kept
// its duplicate: it stayed open at the remote and counted against the
// vat's connections at the switchboard (4096) until the vat restarted.
func TestRelayLimitRefusalIsShut(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	r := newHeldRemote(t)
	addr := "127.0.0.1:" + r.port
	s.mustInstall("cap", example(t, "capnp-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, r.port)))
	s.mustGet("/cap/hold?"+q("addr", addr, "n", "1024"), "got: held 1024, refused 0")
	_, body := s.get("/cap/hold?" + q("addr", addr, "n", "8"))
	if !strings.HasPrefix(body, "got: held 0, refused 8") || !strings.Contains(body, "too many relayed sockets open for this vat") {
		t.Fatalf("8 connects past the limit: %q; want all refused for the relayed sockets' limit", body)
	}
	waitFor(t, "the refused connections to end at the remote", 10*time.Second, func() bool { return r.ended.Load() >= 8 })
	if a, e := r.accepted.Load(), r.ended.Load(); a != 1032 || e != 8 {
		t.Errorf("the remote accepted %d connections and saw %d end; want 1032 and the 8 refused", a, e)
	}
	s.mustGet("/cap/release", "got: released 1024")
	waitFor(t, "the released connections to end at the remote", 10*time.Second, func() bool { return r.ended.Load() == 1032 })
}
