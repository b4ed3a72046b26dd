package switchboard

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"toybox/labels"
	"toybox/schema"
)

// TestConstrainRefusesBadVatID: labels read from the wire are where a vat
// id enters the switchboard. A constrain whose vat label is no vat id is
// refused with the one message labels.ParseVatID gives, and no handle is
// made.
func TestConstrainRefusesBadVatID(t *testing.T) {
	f := newFixture(t, nil)
	c := dial(t, f.public)
	for _, id := range []string{"../x", "Bad", "-x", "a.b", strings.Repeat("a", 64)} {
		_, perr := labels.ParseVatID(id)
		if perr == nil {
			t.Fatalf("ParseVatID(%q) took it; the test needs a bad id", id)
		}
		h, err := constrain(t, c.root, labels.Set{Vat: id})
		if err == nil {
			h.Release()
			t.Errorf("constrain(vat %q) succeeded; want it refused", id)
			continue
		}
		if !strings.Contains(err.Error(), "constrain: bad label: "+perr.Error()) {
			t.Errorf("constrain(vat %q) = %v; want %q", id, err, perr)
		}
	}
}

// TestRevokeEndsCallsInFlight: revoke() revokes a handle and everything
// made through it before it answers. A connect or webSocket in flight when
// it came (here waiting on a slow DNS answer) went on afterwards: it
// dialled the remote for a handle already revoked, and an https connect
// sent the remote its ClientHello, before the connection was shut. Such a
// call now ends with the handle, and nothing reaches the remote.
func TestRevokeEndsCallsInFlight(t *testing.T) {
	var accepted atomic.Int32
	var got atomic.Int64
	port := serveTCP(t, func(c net.Conn) {
		accepted.Add(1)
		n, _ := io.Copy(io.Discard, c)
		got.Add(n)
	})
	f := newFixture(t, nil)
	f.dns.Set("slow.test", mustAddr("127.0.0.1"))
	f.dns.SetDelay("slow.test", time.Second)
	c := dial(t, f.local)
	hello := helloOf(t, &tls.Config{ServerName: "slow.test"})
	ctx := context.Background()
	connect := func(scheme string, hello []byte) func(h schema.Handle) error {
		return func(h schema.Handle) error {
			fut, release := h.Connect(ctx, func(p schema.Handle_connect_Params) error {
				tg, err := p.NewTarget()
				if err != nil {
					return err
				}
				if err := target(scheme, "slow.test", port)(tg); err != nil {
					return err
				}
				if err := p.SetTlsHello(hello); err != nil {
					return err
				}
				return p.SetDownstream(schema.ByteStream_ServerToClient(newCollector()))
			})
			defer release()
			_, err := fut.Struct()
			return err
		}
	}
	tests := []struct {
		name string
		call func(h schema.Handle) error
	}{
		{"connect", connect("tcp", nil)},
		{"connect https", connect("https", hello)},
		{"webSocket", func(h schema.Handle) error {
			mc := &msgCollector{got: make(chan struct{}, 1), closed: make(chan struct{})}
			up, err := openWebSocket(h, "ws://slow.test:"+itoa(port)+"/", mc)
			if err == nil {
				up.Release()
			}
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := constrain(t, c.root, labels.Set{Port: port})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release()
			done := make(chan error, 1)
			go func() { done <- tt.call(h) }()
			time.Sleep(300 * time.Millisecond) // the call waits on DNS
			rf, rrel := h.Revoke(ctx, nil)
			if _, err := rf.Struct(); err != nil {
				t.Fatalf("revoke: %v", err)
			}
			rrel()
			before, bytes := accepted.Load(), got.Load()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), ErrRevoked.Error()) {
					t.Errorf("%s in flight across revoke(): %v; want it to fail, %v", tt.name, err, ErrRevoked)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s in flight across revoke() did not end", tt.name)
			}
			time.Sleep(200 * time.Millisecond) // an accept, a read
			if n, b := accepted.Load()-before, got.Load()-bytes; n > 0 || b > 0 {
				t.Errorf("after revoke() answered, the remote accepted %d connections and read %d bytes of a call in flight", n, b)
			}
		})
	}
}
