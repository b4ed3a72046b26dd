package wire

import (
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	rpccp "capnproto.org/go/capnp/v3/std/capnp/rpc"

	"toybox/tests/amplify"
)

// servedMessages are messages the guard lets through to go-capnp, the
// seeds of FuzzGuard beside unservedMessages.
var servedMessages = []struct {
	name  string
	build func(t testing.TB) *capnp.Message
}{
	{"call", func(t testing.TB) *capnp.Message { return heavyCall(t, 1, testMethod, 64, 2) }},
	{"call pipelined on an answer", func(t testing.TB) *capnp.Message { return pipelinedOn(t, 2, 1, testLaterBoot) }},
	{"call that copies a DAG", func(t testing.TB) *capnp.Message {
		return raw(t, func(m rpccp.Message) error {
			c, err := dagCall(t, m)
			c.SetMethodId(testCopy)
			return err
		})
	}},
	{"finish", func(t testing.TB) *capnp.Message { return finishMsg(t, 1) }},
	{"release", func(t testing.TB) *capnp.Message { return releaseMsg(t, 0) }},
	{"resolve", func(t testing.TB) *capnp.Message { return resolveMsg(t, 0, 1, false, false) }},
	{"disembargo", func(t testing.TB) *capnp.Message {
		return raw(t, func(m rpccp.Message) error {
			d, err := dagDisembargo(m)
			d.Context().SetSenderLoopback(1)
			return err
		})
	}},
	{"return", func(t testing.TB) *capnp.Message {
		return raw(t, func(m rpccp.Message) error {
			r, err := m.NewReturn()
			if err != nil {
				return err
			}
			_, err = r.NewResults()
			return err
		})
	}},
	{"abort", func(t testing.TB) *capnp.Message {
		return raw(t, func(m rpccp.Message) error {
			e, err := m.NewAbort()
			if err != nil {
				return err
			}
			return e.SetReason("bye")
		})
	}},
}

// FuzzGuard sends what it is given, after a Bootstrap, to a side served
// through the guard, then hangs up. Whatever the bytes, the served side
// neither panics (go-capnp's goroutines take the process with them) nor
// keeps the connection once the peer has gone.
func FuzzGuard(f *testing.F) {
	var t testing.TB = f
	for _, m := range servedMessages {
		f.Add(frames(f, m.build(t)))
	}
	for _, m := range unservedMessages {
		f.Add(frames(f, raw(t, func(msg rpccp.Message) error { return m.build(t, msg) })))
	}
	f.Add(frames(f, methodMsg(t, 1, testBlock), pipelinedOn(t, 2, 1, testMethod), finishMsg(t, 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, peer := served(t)
		rc := c.RPCWith(bootstrap(), nil, Limits{Unfinished: 64, Caps: 16, CallBytes: 1 << 20, AnswerBytes: 4 << 20, BacklogBytes: 64 << 10})
		defer rc.Close()
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, err := peer.Read(buf); err != nil {
					return
				}
			}
		}()
		_ = peer.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := peer.Write(append(frames(t, bootstrapMsg(t)), data...)); err != nil {
			return // the served side has ended the connection
		}
		_ = peer.CloseWrite()
		select {
		case <-rc.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("the served side kept the connection after the peer hung up (input %x)", data)
		}
	})
}

// frames is amplify.Frames, failing t on an error.
func frames(t testing.TB, msgs ...*capnp.Message) []byte {
	t.Helper()
	b, err := amplify.Frames(msgs...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
