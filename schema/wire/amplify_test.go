package wire

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	rpccp "capnproto.org/go/capnp/v3/std/capnp/rpc"

	"toybox/tests/amplify"
)

// Cap'n Proto pointers may alias: the attacks below are messages of a few
// hundred bytes whose deep copy is tens of MiB, and a peer that never
// reads what it is sent.

// dagDepth makes a DAG whose deep copy is 2^20 nodes of 24 bytes (24 MiB)
// from 21 nodes on the wire.
const dagDepth = amplify.Depth

// dag is amplify.DAG, failing t on an error.
func dag(t testing.TB, seg *capnp.Segment, depth int) capnp.Struct {
	t.Helper()
	d, err := amplify.DAG(seg, depth)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// setTag sets the union tag of s (at data offset off) to a value the
// schema does not know.
func setTag(s capnp.Struct, off capnp.DataOffset) { s.SetUint16(off, 99) }

// unservedMessages are messages go-capnp v3.1.0-alpha.2 does not serve.
// Each carries a DAG wherever go-capnp would copy it back in an
// unimplemented message (the whole message, or the call or disembargo in
// it).
var unservedMessages = []struct {
	name  string
	build func(t testing.TB, m rpccp.Message) error
}{
	{"obsoleteSave", func(t testing.TB, m rpccp.Message) error {
		return m.SetObsoleteSave(dag(t, m.Segment(), dagDepth).ToPtr())
	}},
	{"obsoleteDelete", func(t testing.TB, m rpccp.Message) error {
		return m.SetObsoleteDelete(dag(t, m.Segment(), dagDepth).ToPtr())
	}},
	{"provide", func(t testing.TB, m rpccp.Message) error {
		p, err := m.NewProvide()
		if err != nil {
			return err
		}
		return p.SetRecipient(dag(t, m.Segment(), dagDepth).ToPtr())
	}},
	{"accept", func(t testing.TB, m rpccp.Message) error {
		a, err := m.NewAccept()
		if err != nil {
			return err
		}
		return a.SetProvision(dag(t, m.Segment(), dagDepth).ToPtr())
	}},
	{"join", func(t testing.TB, m rpccp.Message) error {
		j, err := m.NewJoin()
		if err != nil {
			return err
		}
		return j.SetKeyPart(dag(t, m.Segment(), dagDepth).ToPtr())
	}},
	{"thirdPartyAnswer", func(t testing.TB, m rpccp.Message) error {
		a, err := m.NewThirdPartyAnswer()
		if err != nil {
			return err
		}
		return a.SetCompletion(dag(t, m.Segment(), dagDepth).ToPtr())
	}},
	{"unknown message", func(t testing.TB, m rpccp.Message) error {
		if err := m.SetObsoleteSave(dag(t, m.Segment(), dagDepth).ToPtr()); err != nil {
			return err
		}
		setTag(capnp.Struct(m), 0)
		return nil
	}},
	{"call with results to yourself", func(t testing.TB, m rpccp.Message) error {
		c, err := dagCall(t, m)
		c.SendResultsTo().SetYourself()
		return err
	}},
	{"call with results to a third party", func(t testing.TB, m rpccp.Message) error {
		c, err := dagCall(t, m)
		if err != nil {
			return err
		}
		return c.SendResultsTo().SetThirdParty(dag(t, m.Segment(), dagDepth).ToPtr())
	}},
	{"call to an unknown target", func(t testing.TB, m rpccp.Message) error {
		c, err := dagCall(t, m)
		if err != nil {
			return err
		}
		tg, err := c.Target()
		setTag(capnp.Struct(tg), 4)
		return err
	}},
	{"call with an unknown op", func(t testing.TB, m rpccp.Message) error {
		c, err := dagCall(t, m)
		if err != nil {
			return err
		}
		tg, _ := c.Target()
		pa, _ := tg.PromisedAnswer()
		ops, err := pa.NewTransform(1)
		setTag(capnp.Struct(ops.At(0)), 0)
		return err
	}},
	{"call carrying a third-party capability", func(t testing.TB, m rpccp.Message) error {
		c, err := dagCall(t, m)
		if err != nil {
			return err
		}
		p, _ := c.Params()
		table, err := p.NewCapTable(1)
		if err != nil {
			return err
		}
		d, err := table.At(0).NewThirdPartyHosted()
		if err != nil {
			return err
		}
		return d.SetId(dag(t, m.Segment(), dagDepth).ToPtr())
	}},
	{"call carrying an unknown capability", func(t testing.TB, m rpccp.Message) error {
		c, err := dagCall(t, m)
		if err != nil {
			return err
		}
		p, _ := c.Params()
		table, err := p.NewCapTable(1)
		setTag(capnp.Struct(table.At(0)), 0)
		return err
	}},
	{"disembargo of accept", func(t testing.TB, m rpccp.Message) error {
		d, err := dagDisembargo(m)
		d.Context().SetAccept([]byte("x"))
		return err
	}},
	{"disembargo of an unknown context", func(t testing.TB, m rpccp.Message) error {
		d, err := dagDisembargo(m)
		setTag(capnp.Struct(d), 4)
		return err
	}},
	{"return of results sent elsewhere", func(t testing.TB, m rpccp.Message) error {
		r, err := m.NewReturn()
		r.SetResultsSentElsewhere()
		return err
	}},
	{"return taken from another question", func(t testing.TB, m rpccp.Message) error {
		r, err := m.NewReturn()
		r.SetTakeFromOtherQuestion(1)
		return err
	}},
	{"return awaited from a third party", func(t testing.TB, m rpccp.Message) error {
		r, err := m.NewReturn()
		if err != nil {
			return err
		}
		return r.SetAwaitFromThirdParty(dag(t, m.Segment(), dagDepth).ToPtr())
	}},
	{"unknown return", func(t testing.TB, m rpccp.Message) error {
		r, err := m.NewReturn()
		setTag(capnp.Struct(r), 6)
		return err
	}},
	{"unknown resolve", func(t testing.TB, m rpccp.Message) error {
		r, err := m.NewResolve()
		r.SetPromiseId(7)
		setTag(capnp.Struct(r), 4)
		return err
	}},
}

// dagCall makes m a call on the bootstrap (question 1) whose params are a
// DAG.
func dagCall(t testing.TB, m rpccp.Message) (rpccp.Call, error) {
	c, err := m.NewCall()
	if err != nil {
		return c, err
	}
	c.SetQuestionId(1)
	c.SetInterfaceId(testIface)
	c.SetMethodId(testMethod)
	tg, err := c.NewTarget()
	if err != nil {
		return c, err
	}
	if _, err := tg.NewPromisedAnswer(); err != nil {
		return c, err
	}
	p, err := c.NewParams()
	if err != nil {
		return c, err
	}
	return c, p.SetContent(dag(t, m.Segment(), dagDepth).ToPtr())
}

// dagDisembargo makes m a disembargo whose target is the bootstrap's
// answer.
func dagDisembargo(m rpccp.Message) (rpccp.Disembargo, error) {
	d, err := m.NewDisembargo()
	if err != nil {
		return d, err
	}
	tg, err := d.NewTarget()
	if err != nil {
		return d, err
	}
	_, err = tg.NewPromisedAnswer()
	return d, err
}

// TestUnservedMessagesEndTheConnection: go-capnp answered each message
// above with an unimplemented one holding a deep copy of it (or of the
// call or disembargo in it), or took a third-party capability for one of
// the peer's own. Each now ends the connection, with a warning that names
// it.
func TestUnservedMessagesEndTheConnection(t *testing.T) {
	for _, tt := range unservedMessages {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncBuffer
			rc, enc, _ := protocolPeer(t, &logs)
			msg := raw(t, func(m rpccp.Message) error { return tt.build(t, m) })
			if err := enc.Encode(msg); err != nil {
				t.Fatal(err)
			}
			select {
			case <-rc.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("%s kept the connection", tt.name)
			}
			if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, ErrUnserved.Error()) {
				t.Errorf("%s logged %q; want a warning naming %q", tt.name, got, ErrUnserved)
			}
		})
	}
}

// heapGrowth runs f and returns how much the heap in use grew meanwhile
// (after a collection at each end), in bytes.
func heapGrowth(f func()) int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := int64(ms.HeapInuse)
	f()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse) - before
}

// TestAliasedMessagesDoNotAmplify: eight obsoleteSave messages of 536
// bytes each, from a peer that reads nothing, made the served side hold
// 264 MiB (each answered with its 24 MiB deep copy, queued for a peer
// that never took it). The first ends the connection; the served side
// grows by less than 8 MiB.
func TestAliasedMessagesDoNotAmplify(t *testing.T) {
	c, peer := served(t)
	rc := c.RPC(bootstrap(), nil)
	defer rc.Close()
	enc := capnp.NewEncoder(peer)
	grew := heapGrowth(func() {
		for i := 0; i < 8; i++ {
			msg := raw(t, func(m rpccp.Message) error { return unservedMessages[0].build(t, m) })
			_ = peer.SetWriteDeadline(time.Now().Add(time.Second))
			if err := enc.Encode(msg); err != nil {
				break // the connection has ended
			}
		}
		select {
		case <-rc.Done():
		case <-time.After(5 * time.Second):
			t.Error("the connection was kept")
		}
	})
	t.Logf("the served side grew by %d KiB", grew>>10)
	if grew > 8<<20 {
		t.Errorf("the served side grew by %d MiB; want under 8 MiB", grew>>20)
	}
}

// copyArgs is what the bootstrap's testCopy method does with its params'
// first pointer: a deep copy into a message of its own, as a server that
// passes an argument on does.
func copyArgs(args capnp.Struct) error {
	p, err := args.Ptr(0)
	if err != nil {
		return err
	}
	_, seg := capnp.NewMultiSegmentMessage(nil)
	dst, err := capnp.NewRootStruct(seg, capnp.ObjectSize{PointerCount: 1})
	if err != nil {
		return err
	}
	return dst.SetPtr(0, p)
}

// TestReadLimitIsTiedToSize: go-capnp let every reader of a message
// traverse 64 MiB of it whatever its size, so a server that copied an
// argument of a few hundred bytes copied 24 MiB. What the readers of a
// message may traverse is now readLimit of its size: the copy of a DAG
// fails; a copy of an argument that is what it looks like (1 MiB of data,
// or a DAG of a few levels) goes through.
func TestReadLimitIsTiedToSize(t *testing.T) {
	tests := []struct {
		name string
		arg  func(seg *capnp.Segment) (capnp.Ptr, error)
		ok   bool
	}{
		{"a DAG of 24 MiB in 536 bytes", func(seg *capnp.Segment) (capnp.Ptr, error) {
			return dag(t, seg, dagDepth).ToPtr(), nil
		}, false},
		{"a list of a million empty structs", func(seg *capnp.Segment) (capnp.Ptr, error) {
			l, err := capnp.NewCompositeList(seg, capnp.ObjectSize{}, 1<<20)
			return l.ToPtr(), err
		}, false},
		{"a DAG of 6 levels", func(seg *capnp.Segment) (capnp.Ptr, error) {
			return dag(t, seg, 6).ToPtr(), nil
		}, true},
		{"1 MiB of data", func(seg *capnp.Segment) (capnp.Ptr, error) {
			d, err := capnp.NewData(seg, make([]byte, 1<<20))
			return d.ToPtr(), err
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, peer := served(t)
			rc := c.RPC(bootstrap(), nil)
			defer rc.Close()
			crc := NewConn(peer, false).RPC(capnp.Client{}, nil)
			defer crc.Close()
			boot := crc.Bootstrap(context.Background())
			defer boot.Release()
			ans, release := boot.SendCall(context.Background(), capnp.Send{
				Method:   capnp.Method{InterfaceID: testIface, MethodID: testCopy},
				ArgsSize: capnp.ObjectSize{PointerCount: 1},
				PlaceArgs: func(args capnp.Struct) error {
					p, err := tt.arg(args.Segment())
					if err != nil {
						return err
					}
					return args.SetPtr(0, p)
				},
			})
			defer release()
			_, err := ans.Struct()
			switch {
			case tt.ok && err != nil:
				t.Errorf("copying %s: %v; want it copied", tt.name, err)
			case !tt.ok && (err == nil || !strings.Contains(err.Error(), "traversal limit")):
				t.Errorf("copying %s: %v; want the traversal limit reached", tt.name, err)
			}
		})
	}
}

// TestLargeAnswersToAPeerThatDoesNotRead: a peer that sent calls for
// answers of 1 MiB and read nothing had every call it had sent read
// before the first answer was written (up to Limits.Backlog of them), and
// every answer built and queued: 1.2 GiB for 1,232 calls. The answers
// past Limits.BacklogBytes wait instead, and the served side grows by
// tens of MiB at most. (A Backlog of 128, not 4096, keeps the test short:
// the calls left when the connection closes are still answered, to no
// one.)
func TestLargeAnswersToAPeerThatDoesNotRead(t *testing.T) {
	c, peer := served(t)
	rc := c.RPCWith(bootstrap(), nil, Limits{Backlog: 128})
	defer rc.Close()
	enc := capnp.NewEncoder(peer)
	if err := enc.Encode(bootstrapMsg(t)); err != nil {
		t.Fatal(err)
	}
	var sent uint32
	grew := heapGrowth(func() {
		for q := uint32(1); q <= 20000; q++ {
			_ = peer.SetWriteDeadline(time.Now().Add(time.Second))
			if err := enc.Encode(methodMsg(t, q, testLarge)); err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("call %d: %v", q, err)
				}
				break
			}
			sent = q
		}
		time.Sleep(500 * time.Millisecond) // the answers being built
	})
	t.Logf("%d calls sent; %d bytes wait for the peer; the served side grew by %d MiB", sent, c.Queued(), grew>>20)
	if grew > 48<<20 {
		t.Errorf("the served side grew by %d MiB for a peer that reads nothing; want under 48 MiB", grew>>20)
	}
	if q := c.Queued(); q > DefaultBacklogBytes+2*largeAnswer {
		t.Errorf("%d bytes wait for the peer; want at most DefaultBacklogBytes and an answer or two", q)
	}
	// The peer reads at last, and finishes each answer: the answers come
	// (a few are enough to tell: they are 1 MiB each).
	answered := readReturns(peer, int(sent)+1) // the reader never waits on the writer
	_ = peer.SetWriteDeadline(time.Time{})
	deadline := time.After(30 * time.Second)
	for returns := 0; returns < 16; returns++ {
		select {
		case q, ok := <-answered:
			if !ok {
				t.Fatalf("the connection ended after %d returns", returns)
			}
			if err := enc.Encode(finishMsg(t, q)); err != nil {
				t.Fatalf("finishing %d: %v", q, err)
			}
		case <-deadline:
			t.Fatalf("only %d returns came", returns)
		}
	}
}
