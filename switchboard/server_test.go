package switchboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/labels"
	"toybox/schema"
	"toybox/tests/testenv"
)

// TestFloodingPeerDoesNotHurtAnother: one peer queues far more calls than
// its limit (each held up by a slow DNS answer); past the limit it gets
// errors at once, and a second peer's calls still answer promptly.
func TestFloodingPeerDoesNotHurtAnother(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Limits.Calls = 32 })
	f.dns.Set("slow.test", mustAddr("127.0.0.1"))
	f.dns.SetDelay("slow.test", 1200*time.Millisecond)
	flood, calm := dial(t, f.local), dial(t, f.local)
	ctx := context.Background()

	const n = 400
	var wg sync.WaitGroup
	var mu sync.Mutex
	limited, ok := 0, 0
	for i := 0; i < n; i++ {
		fut, release := flood.root.Check(ctx, func(p schema.Handle_check_Params) error {
			tg, err := p.NewTarget()
			if err != nil {
				return err
			}
			return target("tcp", "slow.test", 80)(tg)
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer release()
			_, err := fut.Struct()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case strings.Contains(err.Error(), "limit"):
				limited++
			default:
				t.Errorf("flood call: %v", err)
			}
		}()
	}
	// While the flood is outstanding, the calm peer is served.
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	got, err := check(ctx, calm.root, "tcp", "127.0.0.1", 80)
	if err != nil || !got.allow {
		t.Fatalf("calm peer check = %+v, %v", got, err)
	}
	t.Logf("calm check took %v", time.Since(start))
	for i := 0; i < 3; i++ {
		s2 := time.Now()
		_, _ = check(ctx, calm.root, "tcp", "127.0.0.1", 80)
		t.Logf("calm check again took %v", time.Since(s2))
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("calm peer waited %v behind the flood", d)
	}
	wg.Wait()
	if limited == 0 || ok == 0 {
		t.Errorf("flood: %d served, %d refused by the limit; want some of each", ok, limited)
	}
	// And the flooding peer recovers once its calls are answered.
	if got, err := check(ctx, flood.root, "tcp", "127.0.0.1", 80); err != nil || !got.allow {
		t.Errorf("flood peer after the flood = %+v, %v", got, err)
	}
}

// TestDecisionLog: one JSON record per decision with the constant keys.
func TestDecisionLog(t *testing.T) {
	f := newFixture(t, nil)
	f.dns.Set("two.test", mustAddr("127.0.0.1"), mustAddr("::1"))
	c := dial(t, f.public)
	ctx := context.Background()
	if _, err := check(ctx, c.root, "tcp", "two.test", 22); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(f.log.String()), "\n")
	var found map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["op"] == "check" {
			if found != nil {
				t.Errorf("more than one record for one check")
			}
			found = m
		}
	}
	if found == nil {
		t.Fatalf("no check record in %q", lines)
	}
	for _, k := range []string{keySocket, keyPeerPID, keyPeerUID, keyLabels, keyOp, keyTarget, keyAddresses, keyVetted, keyAllow, keyReason} {
		if _, ok := found[k]; !ok {
			t.Errorf("record lacks key %q: %v", k, found)
		}
	}
	if found[keySocket] != "public" || found[keyAllow] != false || found[keyTarget] != "tcp://two.test:22" || found[keyLabels] != `{"network":"public"}` {
		t.Errorf("record = %v", found)
	}
	if addrs, _ := found[keyAddresses].([]any); len(addrs) != 2 {
		t.Errorf("addresses = %v; want both answers", found[keyAddresses])
	}
	mustContain(t, "reason", found[keyReason].(string), "a loopback address; this handle reaches public addresses only")
}

// TestByteLimit: a peer that ignores flow control and pushes stream writes
// at a remote that never reads gets an error once its queued bytes pass
// the limit, instead of growing the switchboard's memory.
func TestByteLimit(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Limits.Bytes = 4 << 20 })
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		c, err := l.Accept()
		if err == nil {
			defer c.Close()
			<-stop // never reads
		}
	}()
	c := dial(t, f.local)
	ctx := context.Background()
	col := newCollector()
	r := connectStream(ctx, t, c.root, uint16(l.Addr().(*net.TCPAddr).Port), schema.ByteStream_ServerToClient(col))
	up := r.Upstream().AddRef() // no flow limiter: the misbehaving peer
	defer up.Release()
	chunk := make([]byte, 1<<20)
	var werr error
	for i := 0; i < 200 && werr == nil; i++ {
		werr = up.Write(ctx, func(p schema.ByteStream_write_Params) error { return p.SetData(chunk) })
	}
	if werr == nil {
		werr = up.WaitStreaming()
	}
	if werr == nil || !strings.Contains(werr.Error(), "limit") {
		t.Fatalf("200 MiB of unflowed writes: err = %v; want a limit error", werr)
	}
}

// TestHandleLimit: constrain past the handle limit fails; releasing
// handles gives the count back.
func TestHandleLimit(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Limits.Handles = 5 })
	c := dial(t, f.local)
	var hs []schema.Handle
	for i := 0; i < 5; i++ {
		h, err := constrain(t, c.root, labels.Set{Port: 443})
		if err != nil {
			t.Fatalf("constrain %d: %v", i, err)
		}
		hs = append(hs, h)
	}
	if h, err := constrain(t, c.root, labels.Set{Port: 443}); err == nil {
		h.Release()
		t.Fatal("a sixth handle was made past the limit of 5")
	} else {
		mustContain(t, "error", err.Error(), "limit")
	}
	for _, h := range hs {
		h.Release()
	}
	// go-capnp finishes ~250ms after release.
	testenv.WaitFor(t, 5*time.Second, func() error {
		h, err := constrain(t, c.root, labels.Set{Port: 443})
		if err != nil {
			return fmt.Errorf("constrain after releasing every handle: %w", err)
		}
		h.Release()
		return nil
	})
}

// TestPeerCannotPushDescriptors: a peer that sends a descriptor to the
// switchboard loses its connection; the switchboard and other peers go on.
func TestPeerCannotPushDescriptors(t *testing.T) {
	f := newFixture(t, nil)
	bad := dial(t, f.local)
	ctx := context.Background()
	if _, err := check(ctx, bad.root, "tcp", "127.0.0.1", 80); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := bad.wc.SendFD(r); err != nil {
		t.Fatal(err)
	}
	if _, err := check(ctx, bad.root, "tcp", "127.0.0.1", 80); err == nil {
		t.Error("a call riding with a pushed descriptor was answered")
	}
	good := dial(t, f.local)
	if got, err := check(ctx, good.root, "tcp", "127.0.0.1", 80); err != nil || !got.allow {
		t.Errorf("another peer after the bad one: %+v, %v", got, err)
	}
}

// TestPipelinedCallBytesEndThePeer: calls a peer pipelines on a promise
// still pending (here, on a stream write that never returns because the
// remote does not read) wait in full outside limits.bytes. The transport
// bounds them at twice limits.bytes: past it the peer's connection ends.
// (300 pipelined calls of 1 MiB took the switchboard's heap to 305 MiB.)
func TestPipelinedCallBytesEndThePeer(t *testing.T) {
	port := serveTCP(t, func(c net.Conn) { time.Sleep(time.Minute) }) // never reads
	f := newFixture(t, func(c *Config) { c.Limits = Limits{Bytes: 4 << 20} })
	c := dial(t, f.local)
	ctx := context.Background()
	r := connectStream(ctx, t, c.root, port, schema.ByteStream_ServerToClient(newCollector()))
	up := r.Upstream()
	chunk := make([]byte, 1<<20)
	var releases []capnp.ReleaseFunc
	defer func() {
		for _, rel := range releases {
			rel()
		}
	}()
	write := func() *capnp.Answer {
		ans, rel := capnp.Client(up).SendCall(ctx, capnp.Send{
			Method:    capnp.Method{InterfaceID: schema.ByteStream_TypeID, MethodID: 0, InterfaceName: "toybox.capnp:ByteStream", MethodName: "write"},
			ArgsSize:  capnp.ObjectSize{PointerCount: 1},
			PlaceArgs: func(s capnp.Struct) error { return schema.ByteStream_write_Params(s).SetData(chunk) },
		})
		releases = append(releases, rel)
		return ans
	}
	var blocked *capnp.Answer
	for i := 0; i < 64 && blocked == nil; i++ {
		ans := write()
		select {
		case <-ans.Future().Done():
		case <-time.After(time.Second):
			blocked = ans // the remote's buffers are full
		}
	}
	if blocked == nil {
		t.Fatal("no write blocked")
	}
	pc := schema.Handle(blocked.Future().Field(0, nil).Client())
	defer pc.Release()
	host := strings.Repeat("a", 1<<20)
	for range 12 { // 12 MiB pipelined, past 2 x 4 MiB
		_, rel := pc.Check(ctx, func(p schema.Handle_check_Params) error {
			tg, err := p.NewTarget()
			if err != nil {
				return err
			}
			return target("tcp", host, 80)(tg)
		})
		defer rel()
	}
	testenv.WaitFor(t, 10*time.Second, func() error {
		if _, err := check(ctx, c.root, "tcp", "127.0.0.1", 80); err == nil {
			return errors.New("12 MiB of calls pipelined on a pending promise kept the connection (limits.bytes 4 MiB)")
		}
		return nil // the connection ended
	})
}

// TestTotalConnsBoundsEveryPeer: limits.conns bounds one peer connection
// (one vat); limits.totalConns bounds them all together, so the number of
// vats does not multiply what the switchboard (and the host's TCP memory)
// may be made to hold.
func TestTotalConnsBoundsEveryPeer(t *testing.T) {
	port := echoServer(t, "")
	f := newFixture(t, func(c *Config) { c.Limits = Limits{Conns: 3, TotalConns: 4} })
	a, b := dial(t, f.local), dial(t, f.local)
	ctx := context.Background()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	connect := func(c *client) error {
		conn, err := c.connectFD(ctx, c.root, "tcp", "127.0.0.1", port, nil)
		if err == nil {
			held = append(held, conn)
		}
		return err
	}
	for i := range 3 {
		if err := connect(a); err != nil {
			t.Fatalf("peer a's connect %d: %v", i+1, err)
		}
	}
	if err := connect(a); err == nil || !strings.Contains(err.Error(), "connections open on this connection") {
		t.Errorf("peer a's 4th connect = %v; want its own limit", err)
	}
	if err := connect(b); err != nil {
		t.Fatalf("peer b's first connect: %v", err)
	}
	if err := connect(b); err == nil || !strings.Contains(err.Error(), "limits.totalConns") {
		t.Errorf("peer b's 2nd connect = %v; want the switchboard's total limit", err)
	}
}

// TestFailedConnectsReleaseTheirCount: a connect that fails after it took
// a slot of limits.conns (here: nobody listens on the port) gives the slot
// back, so failures never use up a peer's connections.
func TestFailedConnectsReleaseTheirCount(t *testing.T) {
	port := echoServer(t, "")
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := uint16(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	f := newFixture(t, func(c *Config) { c.Limits = Limits{Conns: 2} })
	c := dial(t, f.local)
	ctx := context.Background()
	for i := range 5 {
		conn, err := c.connectFD(ctx, c.root, "tcp", "127.0.0.1", closed, nil)
		if err == nil {
			_ = conn.Close()
			t.Fatalf("connect %d to a closed port succeeded", i+1)
		}
		if strings.Contains(err.Error(), "connections open on this connection") {
			t.Fatalf("failed connect %d = %v; the failures before it kept their slots", i+1, err)
		}
	}
	for i := range 2 {
		conn, err := c.connectFD(ctx, c.root, "tcp", "127.0.0.1", port, nil)
		if err != nil {
			t.Fatalf("connect %d after the failures: %v; want a free slot", i+1, err)
		}
		defer conn.Close()
	}
}
