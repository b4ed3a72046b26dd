package switchboard

import (
	"context"
	"net"
	"strings"
	"testing"

	"capnproto.org/go/capnp/v3"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
)

// socketOn asks h for a connection (Handle.socket), takes its descriptor on
// wc and bootstraps it. The handle and connection close when the test
// ends.
func socketOn(t *testing.T, h schema.Handle, wc *wire.Conn) (schema.Handle, *wire.Conn, error) {
	t.Helper()
	fut, release := h.Socket(context.Background(), nil)
	defer release()
	res, err := fut.Struct()
	if err != nil {
		return schema.Handle{}, nil, err
	}
	f, err := wc.TakeFD(res.Fd())
	if err != nil {
		t.Fatal(err)
	}
	nwc, err := wire.FromFile(f, true)
	if err != nil {
		t.Fatal(err)
	}
	conn := nwc.RPC(capnp.Client{}, nil)
	boot := schema.Handle(conn.Bootstrap(context.Background()))
	t.Cleanup(func() {
		boot.Release()
		_ = conn.Close()
	})
	return boot, nwc, nil
}

// TestDirectConnectionHandlesBounded: a connection Handle.socket made is
// held by untrusted code (toybox-entry, in a wall), and counts its calls
// and pipelined bytes against limits of its own (its handles count against
// the asking connection's: TestDirectConnectionsShareTheirConns). A socket() asked
// on it made another connection with limits of its own again, and so on:
// with limits.handles 4, one direct connection made 4 more, and with them
// held 4 + 4×4 = 20 handles and connections (with the defaults, 8192
// connections of 8192 handles, ~7 KiB each: hundreds of GiB). Whatever one direct connection
// makes, through constrain or socket, it holds at most limits.handles.
func TestDirectConnectionHandlesBounded(t *testing.T) {
	const limit = 4
	f := newFixture(t, func(c *Config) { c.Limits.Handles = limit })
	sup := dial(t, f.local)
	member, err := constrain(t, sup.root, labels.Set{Port: 443})
	if err != nil {
		t.Fatal(err)
	}
	defer member.Release()
	direct, dwc, err := socketOn(t, member, sup.wc) // the supervisor's ask
	if err != nil {
		t.Fatalf("socket() on the supervisor's connection: %v", err)
	}

	// The wall's code, holding direct: every handle it can make, on it and
	// on every connection it can make from it.
	made := 0
	var held []schema.Handle
	defer func() {
		for _, h := range held {
			h.Release()
		}
	}()
	grab := func(h schema.Handle) {
		for i := 0; i < 2*limit; i++ {
			c, err := constrain(t, h, labels.Set{Port: 443})
			if err != nil {
				return
			}
			held = append(held, c)
			made++
		}
	}
	var nested []schema.Handle
	for i := 0; i < 2*limit; i++ {
		n, _, err := socketOn(t, direct, dwc)
		if err != nil {
			break
		}
		made++
		nested = append(nested, n)
	}
	grab(direct)
	for _, n := range nested {
		grab(n)
	}
	if made > limit {
		t.Errorf("one direct connection made %d handles and connections (%d of them connections); want at most limits.handles, %d", made, len(nested), limit)
	}

	// What it is for still works.
	if got, err := check(context.Background(), direct, "tcp", "127.0.0.1", 443); err != nil || !got.allow {
		t.Errorf("check on the direct connection = %+v, %v; want allowed", got, err)
	}
}

// TestDirectConnectionsShareTheirConns: a vat's connects reach the
// switchboard on its relay connection and on a direct connection per
// member of its grant (Handle.socket, asked on the relay's). limits.conns
// bounds what one vat holds open: counted on each connection alone, a vat
// with k members held k+1 times it, and with four members of the defaults
// (4 × 4096) took every place of limits.totalConns (16384), so no other
// vat could connect at all. The direct connections count against the
// connection they came from, together.
func TestDirectConnectionsShareTheirConns(t *testing.T) {
	port := echoServer(t, "")
	const limit = 3
	f := newFixture(t, func(c *Config) { c.Limits = Limits{Conns: limit, TotalConns: 100} })
	vat := dial(t, f.local) // one vat's relay connection
	var held []net.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	ctx := context.Background()
	opened := 0
	fill := func(c *client, h schema.Handle) {
		for range 2 * limit {
			conn, err := c.connectFD(ctx, h, "tcp", "127.0.0.1", port, nil)
			if err != nil {
				if !strings.Contains(err.Error(), "connections open") {
					t.Fatalf("connect = %v; want the connections limit", err)
				}
				return
			}
			held = append(held, conn)
			opened++
		}
	}
	// Two members, a direct connection for each, as the supervisor asks
	// them for toybox-entry.
	for _, m := range []labels.Set{{Port: port}, {Host: "127.0.0.1"}} {
		h, err := constrain(t, vat.root, m)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release()
		direct, dwc, err := socketOn(t, h, vat.wc)
		if err != nil {
			t.Fatalf("socket(): %v", err)
		}
		fill(&client{wc: dwc, root: direct}, direct)
	}
	fill(vat, vat.root)
	if opened != limit {
		t.Errorf("one vat held %d connections open over its relay and 2 direct connections; want limits.conns, %d", opened, limit)
	}
	// Another vat still connects.
	other := dial(t, f.local)
	fill(other, other.root)
	if opened != 2*limit {
		t.Errorf("another vat then opened %d; want %d", opened-limit, limit)
	}
}
