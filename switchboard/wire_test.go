package switchboard

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/rpc"
	"capnproto.org/go/capnp/v3/rpc/transport"
	rpccp "capnproto.org/go/capnp/v3/std/capnp/rpc"

	"toybox/schema"
	"toybox/schema/wire"
)

// pausable is a connection whose reads wait while paused.
type pausable struct {
	*wire.Conn
	mu     sync.Mutex
	resume chan struct{} // nil: reading
}

func (p *pausable) pause() {
	p.mu.Lock()
	p.resume = make(chan struct{})
	p.mu.Unlock()
}

func (p *pausable) Read(b []byte) (int, error) {
	p.mu.Lock()
	ch := p.resume
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return p.Conn.Read(b)
}

// stuckWrites is a ByteStream whose writes never return.
type stuckWrites struct{ stop chan struct{} }

func (s *stuckWrites) Write(ctx context.Context, call schema.ByteStream_write) error {
	<-s.stop
	return nil
}

func (s *stuckWrites) End(ctx context.Context, call schema.ByteStream_end) error { return nil }

// TestReturnForACallNotYetSent: the switchboard numbers its calls to a
// peer (a stream's writes) and queues them; while the peer does not read,
// they wait to be written. A peer that sent a Return for each number had
// the ones still waiting fulfilled, and when their sending then failed
// (the peer gone), go-capnp rejected a promise already fulfilled: a panic
// that ended the switchboard, every vat's egress with it. A mutation fuzz
// of a recorded session found it. A Return for a call not yet written
// now ends the peer's connection, and the switchboard serves on.
func TestReturnForACallNotYetSent(t *testing.T) {
	spew := serveTCP(t, func(c net.Conn) {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	f := newFixture(t, nil)
	wc, err := wire.Dial(context.Background(), f.local, true)
	if err != nil {
		t.Fatal(err)
	}
	pc := &pausable{Conn: wc}
	conn := rpc.NewConn(transport.NewStream(pc), nil)
	defer conn.Close()
	root := schema.Handle(conn.Bootstrap(context.Background()))
	defer root.Release()
	stuck := &stuckWrites{stop: make(chan struct{})}
	defer close(stuck.stop)
	down := schema.ByteStream_ServerToClient(stuck)
	defer down.Release()
	ctx := context.Background()
	// Ten streams of the default 1 MiB window each: more than the 4 MiB
	// the switchboard queues for a peer that does not read.
	for range 10 {
		fut, release := root.Connect(ctx, func(p schema.Handle_connect_Params) error {
			tg, err := p.NewTarget()
			if err != nil {
				return err
			}
			if err := target("tcp", "127.0.0.1", spew)(tg); err != nil {
				return err
			}
			return p.SetDownstream(down.AddRef())
		})
		if _, err := fut.Struct(); err != nil {
			t.Fatal(err)
		}
		defer release()
	}
	time.Sleep(time.Second) // the peer's own Finishes go out
	pc.pause()
	time.Sleep(2 * time.Second) // the switchboard's writes pile up
	for id := range uint32(400) {
		_, seg := capnp.NewMultiSegmentMessage(nil)
		m, err := rpccp.NewRootMessage(seg)
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.NewReturn()
		if err != nil {
			t.Fatal(err)
		}
		r.SetAnswerId(id)
		if _, err := r.NewResults(); err != nil {
			t.Fatal(err)
		}
		b, err := m.Message().Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wc.Write(b); err != nil {
			break // the switchboard ended the connection
		}
	}
	time.Sleep(500 * time.Millisecond)
	_ = wc.Close()
	time.Sleep(time.Second) // the switchboard's queued writes fail
	c := dial(t, f.local)
	if got, err := check(ctx, c.root, "tcp", "127.0.0.1", spew); err != nil || !got.allow {
		t.Errorf("check after the peer's Returns = %+v, %v; want the switchboard serving", got, err)
	}
}
