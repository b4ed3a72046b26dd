package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/rpc"
	"capnproto.org/go/capnp/v3/server"
	rpccp "capnproto.org/go/capnp/v3/std/capnp/rpc"

	"toybox/tests/testenv"
)

// The attacks below are a peer that writes raw Cap'n Proto RPC messages (a
// vat on fd 3 needs nothing else) against a side served by Conn.RPC.

const (
	testIface  = 0x9a1b2c3d4e5f6071
	testMethod = 0 // returns nothing
	testMint   = 1 // returns a new capability (a server of its own)
	testBlock  = 2 // returns when its call is cancelled (holds the calls behind it)
	testLarge  = 3 // returns largeAnswer bytes (nothing once its call is cancelled)
	testHold   = 4 // holds a snapshot of its params' capability until its call is cancelled
	// Each returns after laterDelay; its results' pointer is:
	testLaterNull = 5 // null
	testLaterText = 6 // text, not a capability
	testLaterBare = 7 // a capability with no methods
	testLaterBoot = 8 // a capability with the bootstrap's methods
	testCopy      = 9 // copies its params' first pointer (copyArgs)
)

// holding hears from testHold once it holds its snapshot.
var holding = make(chan struct{}, 1)

// laterDelay is how long the testLater methods take: calls pipelined on
// their answers wait for it.
const laterDelay = 200 * time.Millisecond

// largeAnswer is the size of testLarge's results: a door's largest answer.
const largeAnswer = 1 << 20

// served starts an RPC server with a one-method bootstrap on one end of a
// socketpair and returns it and the raw other end.
func served(t *testing.T) (*Conn, *net.UnixConn) {
	t.Helper()
	fds, err := testenv.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromFile(os.NewFile(uintptr(fds[0]), "served"), false)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.FileConn(os.NewFile(uintptr(fds[1]), "raw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return c, nc.(*net.UnixConn)
}

func bootstrap() capnp.Client {
	later := func(method uint16, fill func(res capnp.Struct) error) server.Method {
		return server.Method{
			Method: capnp.Method{InterfaceID: testIface, MethodID: method},
			Impl: func(_ context.Context, call *server.Call) error {
				time.Sleep(laterDelay)
				res, err := call.AllocResults(capnp.ObjectSize{PointerCount: 1})
				if err != nil {
					return err
				}
				return fill(res)
			},
		}
	}
	setCap := func(res capnp.Struct, c capnp.Client) error {
		id := res.Message().CapTable().Add(c)
		return res.SetPtr(0, capnp.NewInterface(res.Segment(), id).ToPtr())
	}
	return capnp.NewClient(server.New([]server.Method{
		later(testLaterNull, func(capnp.Struct) error { return nil }),
		later(testLaterText, func(res capnp.Struct) error { return res.SetText(0, "not a capability") }),
		later(testLaterBare, func(res capnp.Struct) error { return setCap(res, capnp.NewClient(server.New(nil, nil, nil))) }),
		later(testLaterBoot, func(res capnp.Struct) error { return setCap(res, bootstrap()) }),
		{
			Method: capnp.Method{InterfaceID: testIface, MethodID: testMethod},
			Impl:   func(context.Context, *server.Call) error { return nil },
		},
		{
			Method: capnp.Method{InterfaceID: testIface, MethodID: testCopy},
			Impl:   func(_ context.Context, call *server.Call) error { return copyArgs(call.Args()) },
		},
		{
			Method: capnp.Method{InterfaceID: testIface, MethodID: testMint},
			Impl: func(_ context.Context, call *server.Call) error {
				res, err := call.AllocResults(capnp.ObjectSize{PointerCount: 1})
				if err != nil {
					return err
				}
				id := res.Message().CapTable().Add(capnp.NewClient(server.New(nil, nil, nil)))
				return res.SetPtr(0, capnp.NewInterface(res.Segment(), id).ToPtr())
			},
		},
		{
			Method: capnp.Method{InterfaceID: testIface, MethodID: testBlock},
			Impl: func(ctx context.Context, _ *server.Call) error {
				<-ctx.Done()
				return ctx.Err()
			},
		},
		{
			Method: capnp.Method{InterfaceID: testIface, MethodID: testLarge},
			Impl: func(ctx context.Context, call *server.Call) error {
				if err := ctx.Err(); err != nil {
					return err // the connection has ended: no one to answer
				}
				res, err := call.AllocResults(capnp.ObjectSize{PointerCount: 1})
				if err != nil {
					return err
				}
				d, err := capnp.NewData(res.Segment(), make([]byte, largeAnswer))
				if err != nil {
					return err
				}
				return res.SetPtr(0, d.ToPtr())
			},
		},
		{
			Method: capnp.Method{InterfaceID: testIface, MethodID: testHold},
			Impl: func(ctx context.Context, call *server.Call) error {
				p, err := call.Args().Ptr(0)
				if err != nil {
					return err
				}
				s := p.Interface().Client().Snapshot()
				defer s.Release()
				select {
				case holding <- struct{}{}:
				default:
				}
				<-ctx.Done()
				return ctx.Err()
			},
		},
	}, nil, nil))
}

// heavyCall calls method on the bootstrap as question q, its params a
// struct holding data bytes and caps capabilities of the peer's own.
func heavyCall(t testing.TB, q uint32, method uint16, data, caps int) *capnp.Message {
	return raw(t, func(m rpccp.Message) error {
		c, err := m.NewCall()
		if err != nil {
			return err
		}
		c.SetQuestionId(q)
		c.SetInterfaceId(testIface)
		c.SetMethodId(method)
		tg, err := c.NewTarget()
		if err != nil {
			return err
		}
		pa, err := tg.NewPromisedAnswer()
		if err != nil {
			return err
		}
		pa.SetQuestionId(0)
		p, err := c.NewParams()
		if err != nil {
			return err
		}
		st, err := capnp.NewStruct(p.Segment(), capnp.ObjectSize{PointerCount: 1})
		if err != nil {
			return err
		}
		if data > 0 {
			d, err := capnp.NewData(p.Segment(), make([]byte, data))
			if err != nil {
				return err
			}
			if err := st.SetPtr(0, d.ToPtr()); err != nil {
				return err
			}
		}
		if err := p.SetContent(st.ToPtr()); err != nil {
			return err
		}
		table, err := p.NewCapTable(int32(caps))
		if err != nil {
			return err
		}
		for i := 0; i < caps; i++ {
			table.At(i).SetSenderHosted(uint32(i))
		}
		return nil
	})
}

// readingPeer serves the test bootstrap under lim to a raw peer that reads
// everything and has sent its Bootstrap; enc writes its next messages.
func readingPeer(t *testing.T, lim Limits) (*rpc.Conn, *capnp.Encoder) {
	t.Helper()
	c, peer := served(t)
	rc := c.RPCWith(bootstrap(), nil, lim)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
		}
	}()
	enc := capnp.NewEncoder(peer)
	if err := enc.Encode(bootstrapMsg(t)); err != nil {
		t.Fatal(err)
	}
	return rc, enc
}

// TestManyCapabilitiesInOneMessageEndTheConnection: each capability a
// message carries becomes an import, and a Release queued back when it is
// dropped; a million in one 16 MiB call held gigabytes of Releases for a
// peer that did not read. Past Limits.Caps the connection ends; a call
// with fewer goes through.
func TestManyCapabilitiesInOneMessageEndTheConnection(t *testing.T) {
	rc, enc := readingPeer(t, Limits{Caps: 16})
	defer rc.Close()
	if err := enc.Encode(heavyCall(t, 1, testMethod, 0, 16)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rc.Done():
		t.Fatal("a call carrying the limit's number of capabilities ended the connection")
	case <-time.After(300 * time.Millisecond):
	}
	_ = enc.Encode(heavyCall(t, 2, testMethod, 0, 17))
	select {
	case <-rc.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a call carrying more capabilities than Limits.Caps kept the connection")
	}
}

// TestHeldCallBytesEndTheConnection: calls queued behind one that does not
// return (pipelined on a promise still pending) are held in full. Past
// Limits.CallBytes of them the connection ends; fewer keep it.
func TestHeldCallBytesEndTheConnection(t *testing.T) {
	rc, enc := readingPeer(t, Limits{CallBytes: 4 << 20})
	defer rc.Close()
	for q := uint32(1); q <= 3; q++ { // 3 MiB held
		if err := enc.Encode(heavyCall(t, q, testBlock, 1<<20, 0)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-rc.Done():
		t.Fatal("3 MiB of held calls ended the connection (limit 4 MiB)")
	case <-time.After(300 * time.Millisecond):
	}
	for q := uint32(4); q <= 6; q++ {
		_ = enc.Encode(heavyCall(t, q, testBlock, 1<<20, 0))
	}
	select {
	case <-rc.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("6 MiB of held calls kept the connection (limit 4 MiB)")
	}
}

// readReturns reads peer until the connection ends (then closes the
// channel), sending the answer id of each Return; the channel holds n.
func readReturns(peer *net.UnixConn, n int) <-chan uint32 {
	returns := make(chan uint32, n)
	go func() {
		defer close(returns)
		dec := capnp.NewDecoder(peer)
		for {
			msg, err := dec.Decode()
			if err != nil {
				return
			}
			if m, err := rpccp.ReadRootMessage(msg); err == nil && m.Which() == rpccp.Message_Which_return {
				r, _ := m.Return()
				returns <- r.AnswerId()
			}
		}
	}()
	return returns
}

// syncBuffer is a log sink shared by the rpc goroutines and the test.
type syncBuffer = testenv.Buffer

// TestUnfinishedAnswerBytesEndTheConnection: go-capnp keeps each answer,
// results included, until its Finish. A peer that reads answers of large
// results and never finishes them ends the connection, with a warning
// naming the limit, once past Limits.AnswerBytes of them; fewer keep it.
func TestUnfinishedAnswerBytesEndTheConnection(t *testing.T) {
	const limit = 3*largeAnswer + largeAnswer/2
	c, peer := served(t)
	var logs syncBuffer
	rc := c.RPCWith(bootstrap(), Logger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))), Limits{AnswerBytes: limit})
	defer rc.Close()
	returns := readReturns(peer, 16)
	enc := capnp.NewEncoder(peer)
	// answered sends calls from..to and waits for their Returns.
	answered := func(from, to uint32, method uint16) bool {
		for q := from; q <= to; q++ {
			if err := enc.Encode(methodMsg(t, q, method)); err != nil {
				t.Fatalf("call %d: %v", q, err)
			}
		}
		deadline := time.After(10 * time.Second)
		for q := from; q <= to; q++ {
			select {
			case got, ok := <-returns:
				if !ok {
					return false
				}
				if got != q {
					t.Fatalf("return for question %d; want %d", got, q)
				}
			case <-deadline:
				t.Fatalf("no return for question %d", q)
			}
		}
		return true
	}
	if err := enc.Encode(bootstrapMsg(t)); err != nil {
		t.Fatal(err)
	}
	if <-returns != 0 {
		t.Fatal("want the bootstrap's return first")
	}
	// 3 MiB of answers unfinished: the next call is read and answered.
	if !answered(1, 3, testLarge) || !answered(4, 4, testMethod) {
		t.Fatal("3 MiB of unfinished answers ended the connection (limit 3.5 MiB)")
	}
	// 4 MiB: that Return is the last (the next call is not read).
	if !answered(5, 5, testLarge) {
		t.Fatal("the connection ended before the peer went past the limit")
	}
	_ = enc.Encode(callMsg(t, 6))
	select {
	case <-rc.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("4 MiB of unfinished answers kept the connection (limit 3.5 MiB)")
	}
	if q, ok := <-returns; ok {
		t.Errorf("question %d answered past the limit", q)
	}
	got := logs.String()
	if !strings.Contains(got, "level=WARN") || !strings.Contains(got, ErrAnswerBytes.Error()) || !strings.Contains(got, fmt.Sprintf("(limit %d)", limit)) {
		t.Errorf("log = %q; want a warning naming %q and the limit", got, ErrAnswerBytes)
	}
}

// TestAnswerBytesBurstThenQuietEndsTheConnection: a peer that writes its
// calls in one go and then only reads sends no message after the answers
// that go past Limits.AnswerBytes. The Return that goes past it ends the
// connection, with a warning naming the limit: the peer's next message is
// not waited for (it kept 400 answers of 1 MiB under a 256 MiB limit).
func TestAnswerBytesBurstThenQuietEndsTheConnection(t *testing.T) {
	const limit = 8 * largeAnswer
	const n = 16 // answers of largeAnswer bytes, twice the limit
	c, peer := served(t)
	var logs syncBuffer
	rc := c.RPCWith(bootstrap(), Logger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))), Limits{AnswerBytes: limit})
	defer rc.Close()
	hungUp := make(chan int) // how many Returns the peer read, once it reads EOF
	go func() {
		returns := 0
		dec := capnp.NewDecoder(peer)
		for {
			msg, err := dec.Decode()
			if err != nil {
				hungUp <- returns
				return
			}
			if m, err := rpccp.ReadRootMessage(msg); err == nil && m.Which() == rpccp.Message_Which_return {
				returns++
			}
		}
	}()
	var burst bytes.Buffer
	enc := capnp.NewEncoder(&burst)
	if err := enc.Encode(bootstrapMsg(t)); err != nil {
		t.Fatal(err)
	}
	for q := uint32(1); q <= n; q++ {
		if err := enc.Encode(methodMsg(t, q, testLarge)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := peer.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	// The peer now only reads, keeping its end open.
	select {
	case <-rc.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("%d unfinished answers of %d bytes kept the connection (limit %d) while the peer was quiet", n, largeAnswer, limit)
	}
	select {
	case got := <-hungUp:
		t.Logf("the peer read %d returns, then the end of the connection", got)
	case <-time.After(5 * time.Second):
		t.Error("the served side ended but the peer was not disconnected")
	}
	got := logs.String()
	if !strings.Contains(got, "level=WARN") || !strings.Contains(got, ErrAnswerBytes.Error()) || !strings.Contains(got, fmt.Sprintf("(limit %d)", limit)) {
		t.Errorf("log = %q; want a warning naming %q and the limit", got, ErrAnswerBytes)
	}
}

// TestFastCallerOfLargeAnswersKeepsTheConnection: go-capnp finishes each
// call 250 ms after its Return, so a caller of large answers always holds
// what it was answered in that time. One answered at about 100 MiB/s keeps
// its connection under a 64 MiB limit however much it gets in all.
func TestFastCallerOfLargeAnswersKeepsTheConnection(t *testing.T) {
	const limit = 64 * largeAnswer
	c, peer := served(t)
	rc := c.RPCWith(bootstrap(), nil, Limits{AnswerBytes: limit})
	defer rc.Close()
	crc := NewConn(peer, false).RPC(capnp.Client{}, nil)
	defer crc.Close()
	boot := crc.Bootstrap(context.Background())
	defer boot.Release()
	start := time.Now()
	const n = 3 * limit / largeAnswer
	for i := 0; i < n; i++ {
		next := time.Now().Add(10 * time.Millisecond)
		ans, release := boot.SendCall(context.Background(), capnp.Send{
			Method: capnp.Method{InterfaceID: testIface, MethodID: testLarge},
		})
		_, err := ans.Struct()
		release()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		time.Sleep(time.Until(next))
	}
	t.Logf("%d answers of %d bytes in %s", n, largeAnswer, time.Since(start))
	select { // the last Finishes are read
	case <-rc.Done():
		t.Fatal("the connection ended; want it kept")
	case <-time.After(500 * time.Millisecond):
	}
}

// raw builds one RPC message.
func raw(t testing.TB, build func(rpccp.Message) error) *capnp.Message {
	t.Helper()
	msg, seg := capnp.NewSingleSegmentMessage(nil)
	m, err := rpccp.NewRootMessage(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := build(m); err != nil {
		t.Fatal(err)
	}
	return msg
}

func bootstrapMsg(t testing.TB) *capnp.Message {
	return raw(t, func(m rpccp.Message) error {
		b, err := m.NewBootstrap()
		b.SetQuestionId(0)
		return err
	})
}

// callMsg calls the bootstrap's method testMethod as question q
// (pipelined on question 0, the bootstrap).
func callMsg(t testing.TB, q uint32) *capnp.Message { return methodMsg(t, q, testMethod) }

func methodMsg(t testing.TB, q uint32, method uint16) *capnp.Message {
	return heavyCall(t, q, method, 0, 0)
}

// finishMsg finishes question q, giving back the capabilities of its
// results (the protocol's default).
func finishMsg(t testing.TB, q uint32) *capnp.Message { return finishKeep(t, q, false) }

// finishKeep finishes question q; keep: the capabilities of its results
// stay the peer's, to Release later.
func finishKeep(t testing.TB, q uint32, keep bool) *capnp.Message {
	return raw(t, func(m rpccp.Message) error {
		f, err := m.NewFinish()
		f.SetQuestionId(q)
		f.SetReleaseResultCaps(!keep)
		return err
	})
}

// TestUnfinishedCallsEndTheConnection: a peer that pipelines calls and
// never finishes one makes the served side keep every answer. Answered
// calls left without a Finish past finishGrace, more than Limits.Unfinished
// of them, end the connection; so do too many in all, whatever their age.
func TestUnfinishedCallsEndTheConnection(t *testing.T) {
	const limit = 16
	for _, burst := range []bool{false, true} {
		rc, enc := readingPeer(t, Limits{Unfinished: limit}) // it reads, so nothing waits on it
		n := uint32(limit + 10)
		if burst {
			n = unfinishedFactor*limit + 10
		}
		for q := uint32(1); q <= n; q++ {
			if err := enc.Encode(callMsg(t, q)); err != nil {
				break // the connection ended: what the test wants
			}
		}
		// Without a burst, a call after the grace finds them stale. The
		// stale are counted at most once a second, as calls come, and
		// under load the answers themselves can take seconds: one more
		// call a second, fewer than 30 in all, far below the burst bound.
		more := time.NewTicker(finishGrace / 2)
		deadline := time.After(30 * time.Second)
	wait:
		for {
			select {
			case <-rc.Done():
				break wait
			case <-more.C:
				if !burst {
					n++
					_ = enc.Encode(callMsg(t, n))
				}
			case <-deadline:
				t.Fatalf("burst %v: the served side still holds %d unfinished calls; want the connection ended", burst, n)
			}
		}
		more.Stop()
		_ = rc.Close()
	}
}

// TestFastCallerKeepsTheConnection: go-capnp sends a call's Finish 250 ms
// after its Return, so a caller that makes calls one after another as fast
// as it can always has many unfinished. It is no attacker.
func TestFastCallerKeepsTheConnection(t *testing.T) {
	c, peer := served(t)
	rc := c.RPCWith(bootstrap(), nil, Limits{Unfinished: 1024})
	defer rc.Close()
	pc := NewConn(peer, false)
	crc := pc.RPC(capnp.Client{}, nil)
	defer crc.Close()
	boot := crc.Bootstrap(context.Background())
	defer boot.Release()
	end := time.Now().Add(3 * time.Second)
	calls := 0
	for time.Now().Before(end) {
		ans, release := boot.SendCall(context.Background(), capnp.Send{
			Method:   capnp.Method{InterfaceID: testIface, MethodID: testMethod},
			ArgsSize: capnp.ObjectSize{},
		})
		_, err := ans.Struct()
		release()
		if err != nil {
			t.Fatalf("call %d: %v", calls, err)
		}
		calls++
	}
	t.Logf("%d calls in 3 s", calls)
}

// TestFinishedCallsKeepTheConnection: the limit counts calls left
// unfinished, not calls made: a peer that finishes each call may make any
// number, and is answered. It makes more than either bound allows
// unfinished (the stale one and unfinishedFactor times it in all), under a
// small Unfinished: at the default's 16,384 the same test took minutes
// under -race.
func TestFinishedCallsKeepTheConnection(t *testing.T) {
	const limit = 64
	c, peer := served(t)
	rc := c.RPCWith(bootstrap(), nil, Limits{Unfinished: limit})
	defer rc.Close()
	enc := capnp.NewEncoder(peer)
	dec := capnp.NewDecoder(peer)
	returns := make(chan uint32, 1<<16)
	go func() {
		for {
			msg, err := dec.Decode()
			if err != nil {
				close(returns)
				return
			}
			m, err := rpccp.ReadRootMessage(msg)
			if err == nil && m.Which() == rpccp.Message_Which_return {
				r, _ := m.Return()
				returns <- r.AnswerId()
			}
		}
	}()
	if err := enc.Encode(bootstrapMsg(t)); err != nil {
		t.Fatal(err)
	}
	const n = unfinishedFactor*limit + 10
	for q := uint32(1); q <= n; q++ {
		if err := enc.Encode(callMsg(t, q)); err != nil {
			t.Fatalf("call %d: %v", q, err)
		}
		if err := enc.Encode(finishMsg(t, q)); err != nil {
			t.Fatalf("finish %d: %v", q, err)
		}
	}
	if err := enc.Encode(callMsg(t, n+1)); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case q, ok := <-returns:
			if !ok {
				t.Fatal("the connection ended; want it kept")
			}
			if q == n+1 {
				return
			}
		case <-deadline:
			t.Fatal("no answer to the last call")
		}
	}
}

// TestPeerThatDoesNotReadIsNotBuffered: a peer that calls (and finishes)
// without ever reading makes the served side answer every call. Past
// Limits.BacklogBytes of answers the served side's answers wait, and past
// Limits.Backlog of them it stops reading, so the peer's writes block
// instead of the served side's memory growing. (A BacklogBytes of 256 KiB
// keeps the test short: the default holds some 80,000 small answers.)
func TestPeerThatDoesNotReadIsNotBuffered(t *testing.T) {
	const backlogBytes = 256 << 10
	c, peer := served(t)
	rc := c.RPCWith(bootstrap(), nil, Limits{BacklogBytes: backlogBytes})
	defer rc.Close()
	enc := capnp.NewEncoder(peer)
	if err := enc.Encode(bootstrapMsg(t)); err != nil {
		t.Fatal(err)
	}
	const n = 200000
	var sent uint32
	for q := uint32(1); q <= n; q++ {
		_ = peer.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if err := enc.Encode(callMsg(t, q)); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("call %d: %v", q, err)
			}
			break
		}
		if err := enc.Encode(finishMsg(t, q)); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("finish %d: %v", q, err)
			}
			break
		}
		sent = q
	}
	// What gets through: the answers behind (backlogBytes of them, at
	// least 40 bytes each), the backlog, and the answers and calls the
	// sockets hold, a few thousand each.
	const minReturn = 40
	if sent >= n || sent > backlogBytes/minReturn+8*DefaultBacklog {
		t.Errorf("the served side read %d of %d calls from a peer that never reads; want it to stop near %d", sent, n, backlogBytes/minReturn+DefaultBacklog)
	}
	if q := c.Queued(); q > backlogBytes+64<<10 {
		t.Errorf("%d bytes wait for the peer; want at most %d and the message waiting for room", q, backlogBytes)
	}
	t.Logf("%d calls went through before the served side stopped reading; %d bytes wait for the peer", sent, c.Queued())
	select {
	case <-rc.Done():
		t.Error("the connection ended; want it stalled, not broken")
	default:
	}
}

func releaseMsg(t testing.TB, id uint32) *capnp.Message {
	return raw(t, func(m rpccp.Message) error {
		r, err := m.NewRelease()
		r.SetId(id)
		r.SetReferenceCount(1)
		return err
	})
}

// minted reads the served side's messages and sends on ids the export id
// of each capability a call's Return hands over.
func minted(peer *net.UnixConn, ids chan<- uint32) {
	defer close(ids)
	dec := capnp.NewDecoder(peer)
	for {
		msg, err := dec.Decode()
		if err != nil {
			return
		}
		m, err := rpccp.ReadRootMessage(msg)
		if err != nil || m.Which() != rpccp.Message_Which_return {
			continue
		}
		r, _ := m.Return()
		if r.Which() != rpccp.Return_Which_results || r.AnswerId() == 0 {
			continue // not a call's (0: the bootstrap)
		}
		p, _ := r.Results()
		table, _ := p.CapTable()
		for i := 0; i < table.Len(); i++ {
			if d := table.At(i); d.Which() == rpccp.CapDescriptor_Which_senderHosted {
				ids <- d.SenderHosted()
			}
		}
	}
}

// TestHeldCapabilitiesEndTheConnection: a peer that asks again and again
// for a new capability and releases none (its Finish keeps the results'
// capabilities) makes the served side keep a server (and its goroutine)
// for each; past Limits.Exports the connection ends. One that gives back
// what it got (by Release, or by its Finish) may ask any number of times.
func TestHeldCapabilitiesEndTheConnection(t *testing.T) {
	const limit = 200
	for _, how := range []string{"keeps", "releases", "finishes"} {
		releases := how != "keeps"
		c, peer := served(t)
		rc := c.RPCWith(bootstrap(), nil, Limits{Exports: limit})
		ids := make(chan uint32, 4*limit)
		go minted(peer, ids)
		enc := capnp.NewEncoder(peer)
		if err := enc.Encode(bootstrapMsg(t)); err != nil {
			t.Fatal(err)
		}
		got := 0
		for q := uint32(1); q <= 3*limit; q++ {
			if enc.Encode(methodMsg(t, q, testMint)) != nil {
				break
			}
			id, ok := <-ids
			if !ok {
				break
			}
			got++
			if enc.Encode(finishKeep(t, q, how != "finishes")) != nil {
				break
			}
			if how == "releases" {
				if err := enc.Encode(releaseMsg(t, id)); err != nil {
					break
				}
			}
		}
		if releases {
			if got != 3*limit {
				t.Errorf("a peer that %s what it gets: %d of %d capabilities, then the connection ended", how, got, 3*limit)
			}
		} else {
			select {
			case <-rc.Done():
			case <-time.After(10 * time.Second):
				t.Errorf("the peer holds %d capabilities (limit %d); want the connection ended", got, limit)
			}
			if got > limit+10 {
				t.Errorf("the peer got %d capabilities; want about %d at most", got, limit)
			}
		}
		_ = rc.Close()
	}
}
