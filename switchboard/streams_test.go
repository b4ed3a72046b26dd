package switchboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/schema"
)

// TestFinishedStreamsBounded: the stream a call hands back (a request's
// body, a relayed connect's or a WebSocket's upstream) is a server with a
// goroutine of its own for as long as the caller holds it, and the
// connection's count (limits.conns) was given back once the request was
// answered or the connection shut. A caller that kept every stream held
// one goroutine each past every limit: 100 of each with limits.conns 4
// kept 100 goroutines, up to the transport's bound of 131072 capabilities
// per connection (the test keeps 40). A finished connection now counts until its stream is
// released too.
func TestFinishedStreamsBounded(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	_ = l.Close() // nothing listens there: every request fails at the dial
	hangUp := serveTCP(t, func(net.Conn) {})
	wsBye := wsRemote(t, func(c net.Conn) { _, _ = c.Write(serverFrame(opClose, []byte{0x03, 0xe8})) })
	const limit = 4
	ctx := context.Background()
	wait := func(done chan struct{}) error {
		select {
		case <-done:
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("not over within 10s")
		}
	}
	tests := []struct {
		name string
		// open makes one stream, waits until what it was for is over,
		// and returns the stream, held.
		open func(h schema.Handle) (capnp.Client, error)
	}{
		{"request body", func(h schema.Handle) (capnp.Client, error) {
			rc := newResp()
			fut, release := h.Request(ctx, func(p schema.Handle_request_Params) error {
				_ = p.SetMethod("GET")
				_ = p.SetUrl(fmt.Sprintf("http://127.0.0.1:%d/", closed))
				return p.SetResponder(schema.Responder_ServerToClient(rc))
			})
			defer release()
			r, err := fut.Struct()
			if err != nil {
				return capnp.Client{}, err
			}
			return capnp.Client(r.Body().AddRef()), wait(rc.done)
		}},
		{"connect upstream", func(h schema.Handle) (capnp.Client, error) {
			down := newCollector()
			fut, release := h.Connect(ctx, func(p schema.Handle_connect_Params) error {
				tg, err := p.NewTarget()
				if err != nil {
					return err
				}
				if err := target("tcp", "127.0.0.1", hangUp)(tg); err != nil {
					return err
				}
				return p.SetDownstream(schema.ByteStream_ServerToClient(down))
			})
			defer release()
			r, err := fut.Struct()
			if err != nil {
				return capnp.Client{}, err
			}
			up := r.Upstream().AddRef()
			ef, erel := up.End(ctx, nil)
			_, _ = ef.Struct()
			erel()
			return capnp.Client(up), wait(down.done)
		}},
		{"webSocket upstream", func(h schema.Handle) (capnp.Client, error) {
			mc := &msgCollector{got: make(chan struct{}, 1), closed: make(chan struct{})}
			up, err := openWebSocket(h, fmt.Sprintf("ws://127.0.0.1:%d/", wsBye), mc)
			if err != nil {
				return capnp.Client{}, err
			}
			return capnp.Client(up), wait(mc.closed)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, newFixture(t, func(c *Config) { c.Limits = Limits{Conns: limit} }).local)
			var kept []capnp.Client
			defer func() {
				for _, s := range kept {
					s.Release()
				}
			}()
			before := runtime.NumGoroutine()
			const n = 40
			for range n {
				s, err := tt.open(c.root)
				if s.IsValid() {
					kept = append(kept, s)
				}
				if err != nil && !errors.Is(err, ErrLimit) && !capnp.IsDisconnected(err) {
					mustContain(t, "error", err.Error(), ErrLimit.Error())
				}
			}
			time.Sleep(time.Second) // go-capnp finishes ~250ms after a return
			g := runtime.NumGoroutine() - before
			t.Logf("%d kept: %d more goroutines", len(kept), g)
			if len(kept) > limit || g > n/2 {
				t.Errorf("%d streams kept by the caller after what they were for was over, and %d more goroutines, with limits.conns %d", len(kept), g, limit)
			}
		})
	}
}
