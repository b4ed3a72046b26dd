package wire

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/rpc"
	rpccp "capnproto.org/go/capnp/v3/std/capnp/rpc"
)

// The messages below are ones go-capnp v3.1.0-alpha.2 does not survive:
// before the guard refused them, each panicked in the connection's
// receive goroutine (taking the whole process down: for a vat on fd 3,
// the supervisor of every vat) or left it looping for good.

// protocolPeer serves the test bootstrap to a raw peer, logging warnings
// to logs; releases gets the id of each Release the served side sends.
func protocolPeer(t *testing.T, logs *syncBuffer) (*rpc.Conn, *capnp.Encoder, <-chan uint32) {
	t.Helper()
	c, peer := served(t)
	rc := c.RPCWith(bootstrap(), Logger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))), Limits{})
	t.Cleanup(func() { _ = rc.Close() })
	releases := make(chan uint32, 64)
	go readReleases(peer, releases)
	enc := capnp.NewEncoder(peer)
	if err := enc.Encode(bootstrapMsg(t)); err != nil {
		t.Fatal(err)
	}
	return rc, enc, releases
}

func readReleases(peer *net.UnixConn, releases chan<- uint32) {
	defer close(releases)
	dec := capnp.NewDecoder(peer)
	for {
		msg, err := dec.Decode()
		if err != nil {
			return
		}
		if m, err := rpccp.ReadRootMessage(msg); err == nil && m.Which() == rpccp.Message_Which_release {
			r, _ := m.Release()
			releases <- r.Id()
		}
	}
}

// promiseCall calls method on the bootstrap as question q, its params
// carrying the peer's promises ids (held while the call runs), the first
// as the struct's pointer.
func promiseCall(t testing.TB, q uint32, method uint16, ids ...uint32) *capnp.Message {
	msg := heavyCall(t, q, method, 0, len(ids))
	m, err := rpccp.ReadRootMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := m.Call()
	p, _ := c.Params()
	content, _ := p.Content()
	if err := content.Struct().SetPtr(0, capnp.NewInterface(p.Segment(), 0).ToPtr()); err != nil {
		t.Fatal(err)
	}
	table, _ := p.CapTable()
	for i, id := range ids {
		table.At(i).SetSenderPromise(id)
	}
	return msg
}

// resolveMsg resolves the peer's promise p: to its capability (or
// promise) to, or with an exception.
func resolveMsg(t testing.TB, p uint32, to uint32, promise, exception bool) *capnp.Message {
	return raw(t, func(m rpccp.Message) error {
		r, err := m.NewResolve()
		if err != nil {
			return err
		}
		r.SetPromiseId(p)
		if exception {
			e, err := r.NewException()
			if err != nil {
				return err
			}
			return e.SetReason("no")
		}
		d, err := r.NewCap()
		if err != nil {
			return err
		}
		if promise {
			d.SetSenderPromise(to)
		} else {
			d.SetSenderHosted(to)
		}
		return nil
	})
}

// endsWith waits for rc to end, with a warning naming ErrProtocol.
func endsWith(t *testing.T, rc *rpc.Conn, logs *syncBuffer, what string) {
	t.Helper()
	select {
	case <-rc.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s kept the connection", what)
	}
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, ErrProtocol.Error()) {
		t.Errorf("%s logged %q; want a warning naming %q", what, got, ErrProtocol)
	}
}

// TestCallOnItsOwnAnswerEndsTheConnection: a call pipelined on its own
// question id made go-capnp call a nil pipeline caller (the process
// panicked). It ends the connection; a call pipelined on another's answer
// goes through.
func TestCallOnItsOwnAnswerEndsTheConnection(t *testing.T) {
	var logs syncBuffer
	rc, enc, _ := protocolPeer(t, &logs)
	if err := enc.Encode(callMsg(t, 1)); err != nil {
		t.Fatal(err)
	}
	self := callMsg(t, 2)
	m, _ := rpccp.ReadRootMessage(self)
	c, _ := m.Call()
	tg, _ := c.Target()
	pa, _ := tg.PromisedAnswer()
	pa.SetQuestionId(1) // question 1's answer: a struct, not a capability
	if err := enc.Encode(self); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rc.Done():
		t.Fatal("a call pipelined on another call's answer ended the connection")
	case <-time.After(300 * time.Millisecond):
	}
	pa.SetQuestionId(3)
	c.SetQuestionId(3)
	_ = enc.Encode(self)
	endsWith(t, rc, &logs, "a call pipelined on its own answer")
}

// TestPromiseResolvedTwiceEndsTheConnection: a promise of the peer's that
// the served side holds, resolved a second time, resolved to itself or in
// a cycle, panicked go-capnp or looped in its receive goroutine for good.
// Each ends the connection. (The served side holds a snapshot of the
// promise, as the supervisor does of one it passed on to the switchboard:
// without one, go-capnp forgets the import once it is resolved, and a
// second Resolve merely names an unknown import.)
func TestPromiseResolvedTwiceEndsTheConnection(t *testing.T) {
	tests := []struct {
		name     string
		resolves func(t *testing.T) []*capnp.Message
	}{
		{"twice", func(t *testing.T) []*capnp.Message {
			return []*capnp.Message{resolveMsg(t, 5, 10, false, false), resolveMsg(t, 5, 11, false, false)}
		}},
		{"twice with an exception", func(t *testing.T) []*capnp.Message {
			return []*capnp.Message{resolveMsg(t, 5, 0, false, true), resolveMsg(t, 5, 0, false, true)}
		}},
		{"to itself", func(t *testing.T) []*capnp.Message {
			return []*capnp.Message{resolveMsg(t, 5, 5, true, false)}
		}},
		{"to itself hosted", func(t *testing.T) []*capnp.Message {
			return []*capnp.Message{resolveMsg(t, 5, 5, false, false)}
		}},
		{"in a cycle", func(t *testing.T) []*capnp.Message {
			return []*capnp.Message{resolveMsg(t, 5, 6, true, false), resolveMsg(t, 6, 5, true, false)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncBuffer
			rc, enc, _ := protocolPeer(t, &logs)
			select {
			case <-holding: // a signal left by an earlier test
			default:
			}
			if err := enc.Encode(promiseCall(t, 1, testHold, 5, 6)); err != nil {
				t.Fatal(err)
			}
			// Until the served side holds the promise, go-capnp forgets it
			// once resolved: the second Resolve would name an unknown
			// import (which also ends the connection, for another reason).
			select {
			case <-holding:
			case <-time.After(5 * time.Second):
				t.Fatal("the served side never took hold of the promise")
			}
			for _, m := range tt.resolves(t) {
				_ = enc.Encode(m)
			}
			endsWith(t, rc, &logs, "a promise resolved "+tt.name)
		})
	}
}

// TestPromisesResolvedOnceKeepTheConnection: promises resolved once each,
// one to the other, keep the connection; so does a promise id the peer
// uses again once the served side released it, resolved anew.
func TestPromisesResolvedOnceKeepTheConnection(t *testing.T) {
	var logs syncBuffer
	rc, enc, releases := protocolPeer(t, &logs)
	for _, m := range []*capnp.Message{
		promiseCall(t, 1, testHold, 5, 6),
		resolveMsg(t, 6, 9, false, false),
		resolveMsg(t, 5, 6, true, false),
		finishMsg(t, 1), // cancels testHold: its params, 5 and 6, are released
	} {
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
	}
	released := map[uint32]bool{}
	deadline := time.After(5 * time.Second)
	for !released[5] || !released[6] {
		select {
		case id, ok := <-releases:
			if !ok {
				t.Fatalf("the connection ended: %s", logs.String())
			}
			released[id] = true
		case <-deadline:
			t.Fatalf("promises 5 and 6 not released (released %v)", released)
		}
	}
	for _, m := range []*capnp.Message{
		promiseCall(t, 2, testHold, 5),
		resolveMsg(t, 5, 10, false, false),
	} {
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-rc.Done():
		t.Fatalf("promises resolved once each ended the connection: %s", logs.String())
	case <-time.After(300 * time.Millisecond):
	}
}

// pipelinedOn calls method on field 0 of question on's answer, as
// question q.
func pipelinedOn(t testing.TB, q, on uint32, method uint16) *capnp.Message {
	msg := methodMsg(t, q, method)
	m, _ := rpccp.ReadRootMessage(msg)
	c, _ := m.Call()
	tg, _ := c.Target()
	pa, _ := tg.PromisedAnswer()
	pa.SetQuestionId(on)
	tr, err := pa.NewTransform(1)
	if err != nil {
		t.Fatal(err)
	}
	tr.At(0).SetGetPointerField(0)
	return msg
}

// TestCallsPipelinedOnAnAnswerToComeNeverPanic: a call pipelined on the
// answer of a call still running waits for it; go-capnp's own queue
// panicked (nil dereference, in the server's goroutine: the process ended)
// when the field it names held no capability, a null one, or one without
// its method. Each is refused with an exception and the connection goes
// on; a call pipelined on a capability that has the method is answered.
func TestCallsPipelinedOnAnAnswerToComeNeverPanic(t *testing.T) {
	tests := []struct {
		name    string
		method  uint16
		refused bool
	}{
		{"null capability", testLaterNull, true},
		{"not a capability", testLaterText, true},
		{"no such method", testLaterBare, true},
		{"a capability with the method", testLaterBoot, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, peer := served(t)
			rc := c.RPCWith(bootstrap(), nil, Limits{})
			defer rc.Close()
			returns := make(chan rpccp.Return_Which, 8)
			ids := make(chan uint32, 8)
			go func() {
				dec := capnp.NewDecoder(peer)
				for {
					msg, err := dec.Decode()
					if err != nil {
						close(ids)
						return
					}
					if m, err := rpccp.ReadRootMessage(msg); err == nil && m.Which() == rpccp.Message_Which_return {
						r, _ := m.Return()
						ids <- r.AnswerId()
						returns <- r.Which()
					}
				}
			}()
			enc := capnp.NewEncoder(peer)
			for _, m := range []*capnp.Message{
				bootstrapMsg(t),
				methodMsg(t, 1, tt.method),
				pipelinedOn(t, 2, 1, testMethod), // and on its answer, another
				pipelinedOn(t, 3, 2, testMethod),
			} {
				if err := enc.Encode(m); err != nil {
					t.Fatal(err)
				}
			}
			got := map[uint32]rpccp.Return_Which{}
			deadline := time.After(5 * time.Second)
			for len(got) < 4 {
				select {
				case id, ok := <-ids:
					if !ok {
						t.Fatalf("the connection ended (answers %v)", got)
					}
					got[id] = <-returns
				case <-deadline:
					t.Fatalf("answers %v; want questions 0 to 3 answered", got)
				}
			}
			want := rpccp.Return_Which_results
			if tt.refused {
				want = rpccp.Return_Which_exception
			}
			if got[2] != want {
				t.Errorf("pipelined call answered with %v; want %v", got[2], want)
			}
			// The connection goes on.
			if err := enc.Encode(callMsg(t, 4)); err != nil {
				t.Fatal(err)
			}
			select {
			case id, ok := <-ids:
				if !ok || id != 4 {
					t.Fatalf("after the pipelined calls: answer %d (%v); want question 4's", id, ok)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no answer after the pipelined calls")
			}
		})
	}
}

// emptyOps sets pa's transform to n ops of no size (noops, to go-capnp):
// the list costs its message one word however long it is.
func emptyOps(t *testing.T, pa rpccp.PromisedAnswer, n int32) {
	t.Helper()
	l, err := capnp.NewCompositeList(pa.Segment(), capnp.ObjectSize{}, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := pa.SetTransform(rpccp.PromisedAnswer_Op_List(l)); err != nil {
		t.Fatal(err)
	}
}

// TestLongTransformEndsTheConnection: go-capnp allocates 32 bytes for each
// op of a promised answer's transform, and an op of no size costs the
// message nothing: 8 million of them in a call of 152 bytes made it
// allocate 256 MiB (and held them while the call waited on an answer to
// come). A transform longer than maxTransform, wherever the message
// carries one, ends the connection; one of maxTransform ops does not.
func TestLongTransformEndsTheConnection(t *testing.T) {
	const long = 1 << 16
	target := func(n int32) func(t *testing.T) *capnp.Message {
		return func(t *testing.T) *capnp.Message {
			msg := methodMsg(t, 2, testMethod)
			m, _ := rpccp.ReadRootMessage(msg)
			c, _ := m.Call()
			tg, _ := c.Target()
			pa, _ := tg.PromisedAnswer()
			pa.SetQuestionId(1) // testBlock's answer, still to come
			emptyOps(t, pa, n)
			return msg
		}
	}
	tests := []struct {
		name string
		msg  func(t *testing.T) *capnp.Message
		ends bool
	}{
		{"call target", target(long), true},
		{"call target at the limit", target(maxTransform), false},
		{"call target on the bootstrap", func(t *testing.T) *capnp.Message {
			msg := target(long)(t)
			m, _ := rpccp.ReadRootMessage(msg)
			c, _ := m.Call()
			tg, _ := c.Target()
			pa, _ := tg.PromisedAnswer()
			pa.SetQuestionId(0)
			return msg
		}, true},
		{"capability in a call's params", func(t *testing.T) *capnp.Message {
			msg := heavyCall(t, 2, testMethod, 0, 1)
			m, _ := rpccp.ReadRootMessage(msg)
			c, _ := m.Call()
			p, _ := c.Params()
			table, _ := p.CapTable()
			pa, err := table.At(0).NewReceiverAnswer()
			if err != nil {
				t.Fatal(err)
			}
			pa.SetQuestionId(0)
			emptyOps(t, pa, long)
			return msg
		}, true},
		{"capability in a return's results", func(t *testing.T) *capnp.Message {
			return raw(t, func(m rpccp.Message) error {
				r, err := m.NewReturn()
				if err != nil {
					return err
				}
				res, err := r.NewResults()
				if err != nil {
					return err
				}
				table, err := res.NewCapTable(1)
				if err != nil {
					return err
				}
				pa, err := table.At(0).NewReceiverAnswer()
				if err != nil {
					return err
				}
				emptyOps(t, pa, long)
				return nil
			})
		}, true},
		{"capability a promise resolves to", func(t *testing.T) *capnp.Message {
			return raw(t, func(m rpccp.Message) error {
				r, err := m.NewResolve()
				if err != nil {
					return err
				}
				r.SetPromiseId(5)
				d, err := r.NewCap()
				if err != nil {
					return err
				}
				pa, err := d.NewReceiverAnswer()
				if err != nil {
					return err
				}
				emptyOps(t, pa, long)
				return nil
			})
		}, true},
		{"disembargo target", func(t *testing.T) *capnp.Message {
			return raw(t, func(m rpccp.Message) error {
				d, err := m.NewDisembargo()
				if err != nil {
					return err
				}
				tg, err := d.NewTarget()
				if err != nil {
					return err
				}
				pa, err := tg.NewPromisedAnswer()
				if err != nil {
					return err
				}
				emptyOps(t, pa, long)
				d.Context().SetSenderLoopback(1)
				return nil
			})
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncBuffer
			rc, enc, _ := protocolPeer(t, &logs)
			if err := enc.Encode(methodMsg(t, 1, testBlock)); err != nil {
				t.Fatal(err)
			}
			if err := enc.Encode(tt.msg(t)); err != nil {
				t.Fatal(err)
			}
			if tt.ends {
				endsWith(t, rc, &logs, "a transform of 65536 ops")
				return
			}
			select {
			case <-rc.Done():
				t.Fatalf("a transform of %d ops ended the connection: %s", 64, logs.String())
			case <-time.After(300 * time.Millisecond):
			}
		})
	}
}
