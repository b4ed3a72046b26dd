package switchboard

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/schema"
)

// setNullCap points field i of s at a capability that is null on the
// wire (a CapDescriptor of none): what a peer that sends no capability
// where one is expected sends, and what the generated setters never
// write (they write a null pointer).
func setNullCap(s capnp.Struct, i uint16) error {
	seg := s.Segment()
	in := capnp.NewInterface(seg, seg.Message().CapTable().Add(capnp.Client{}))
	return s.SetPtr(i, in.ToPtr())
}

// noBodyResponder takes a request's answer and gives no body stream.
type noBodyResponder struct{ started chan struct{} }

func (r *noBodyResponder) Start(ctx context.Context, call schema.Responder_start) error {
	close(r.started)
	return nil
}

func (r *noBodyResponder) Fail(ctx context.Context, call schema.Responder_fail) error { return nil }

// TestNullCapabilitiesRefused: a capability a call is given (a connect's
// or a webSocket's downstream, a request's responder, the body its
// responder's start returns) may be null on the wire. The switchboard set
// a flow limiter on each, which dereferences a null client: a panic that
// took the whole switchboard down, every vat's egress with it, for any
// peer that sent one (a fuzzed connect found it). They are now refused, or
// the answer dropped, and the switchboard serves on.
func TestNullCapabilitiesRefused(t *testing.T) {
	f := newFixture(t, nil)
	c := dial(t, f.local)
	ctx := context.Background()
	echo := echoServer(t, "")
	web := serveTCP(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		_, _ = c.Read(buf)
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")
		time.Sleep(time.Second)
	})
	call := func(name string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "needs a") {
			t.Errorf("%s with a null capability: %v; want refused", name, err)
		}
	}
	fut, release := c.root.Connect(ctx, func(p schema.Handle_connect_Params) error {
		tg, err := p.NewTarget()
		if err != nil {
			return err
		}
		if err := target("tcp", "127.0.0.1", echo)(tg); err != nil {
			return err
		}
		return setNullCap(capnp.Struct(p), 2)
	})
	_, err := fut.Struct()
	release()
	call("connect", err)

	wfut, wrelease := c.root.WebSocket(ctx, func(p schema.Handle_webSocket_Params) error {
		if err := p.SetUrl(fmt.Sprintf("ws://127.0.0.1:%d/", echo)); err != nil {
			return err
		}
		return setNullCap(capnp.Struct(p), 2)
	})
	_, err = wfut.Struct()
	wrelease()
	call("webSocket", err)

	rfut, rrelease := c.root.Request(ctx, func(p schema.Handle_request_Params) error {
		_ = p.SetMethod("GET")
		_ = p.SetUrl(fmt.Sprintf("http://127.0.0.1:%d/", web))
		return setNullCap(capnp.Struct(p), 3)
	})
	_, err = rfut.Struct()
	rrelease()
	call("request", err)

	nb := &noBodyResponder{started: make(chan struct{})}
	rfut, rrelease = c.root.Request(ctx, func(p schema.Handle_request_Params) error {
		_ = p.SetMethod("GET")
		_ = p.SetUrl(fmt.Sprintf("http://127.0.0.1:%d/", web))
		return p.SetResponder(schema.Responder_ServerToClient(nb))
	})
	if _, err := rfut.Struct(); err != nil {
		t.Fatalf("request: %v", err)
	}
	rrelease()
	select {
	case <-nb.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the responder was not started within 10s")
	}
	time.Sleep(200 * time.Millisecond) // the answer's body, to no stream

	if got, err := check(ctx, c.root, "tcp", "127.0.0.1", echo); err != nil || !got.allow {
		t.Errorf("check after the null capabilities = %+v, %v; want the switchboard serving", got, err)
	}
}
