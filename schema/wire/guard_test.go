package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/rpc"
	"capnproto.org/go/capnp/v3/server"
	rpccp "capnproto.org/go/capnp/v3/std/capnp/rpc"

	"toybox/tests/amplify"
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
	case <-time.After(30 * time.Second):
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
	case <-time.After(30 * time.Second):
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
		deadline := time.After(30 * time.Second)
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
	case <-time.After(30 * time.Second):
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
	case <-time.After(30 * time.Second):
		t.Fatalf("%d unfinished answers of %d bytes kept the connection (limit %d) while the peer was quiet", n, largeAnswer, limit)
	}
	select {
	case got := <-hungUp:
		t.Logf("the peer read %d returns, then the end of the connection", got)
	case <-time.After(30 * time.Second):
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
// (An Exports of 32 keeps the test short: each capability is a client
// that leak tracking records a stack for.)
func TestHeldCapabilitiesEndTheConnection(t *testing.T) {
	const limit = 32
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
			case <-time.After(30 * time.Second):
				t.Errorf("the peer holds %d capabilities (limit %d); want the connection ended", got, limit)
			}
			if got > limit+10 {
				t.Errorf("the peer got %d capabilities; want about %d at most", got, limit)
			}
		}
		_ = rc.Close()
	}
}

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
			case <-time.After(30 * time.Second):
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
		case <-time.After(30 * time.Second):
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
	case <-time.After(30 * time.Second):
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
			case <-time.After(30 * time.Second):
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
	deadline := time.After(30 * time.Second)
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
			deadline := time.After(30 * time.Second)
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
			case <-time.After(30 * time.Second):
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
