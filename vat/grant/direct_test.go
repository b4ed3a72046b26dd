package grant

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
)

// directHandles asks vc (toybox-entry's fd 3) for its direct switchboard
// connections and returns each one's bootstrap Handle with its connection.
func directHandles(t *testing.T, vc schema.Vat, cli *wire.Conn) ([]schema.Handle, []*wire.Conn, error) {
	t.Helper()
	fut, release := vc.Direct(context.Background(), nil)
	defer release()
	res, err := fut.Struct()
	if err != nil {
		return nil, nil, err
	}
	seqs, err := res.Fds()
	if err != nil {
		return nil, nil, err
	}
	var hs []schema.Handle
	var wcs []*wire.Conn
	for i := 0; i < seqs.Len(); i++ {
		f, err := cli.TakeFD(seqs.At(i))
		if err != nil {
			return nil, nil, err
		}
		h, wc := handleOn(t, f)
		hs, wcs = append(hs, h), append(wcs, wc)
	}
	return hs, wcs, nil
}

// handleOn bootstraps f, a switchboard connection (taking f).
func handleOn(t *testing.T, f *os.File) (schema.Handle, *wire.Conn) {
	t.Helper()
	wc, err := wire.FromFile(f, true)
	if err != nil {
		t.Fatal(err)
	}
	rc := wc.RPCWith(capnp.Client{}, nil, wire.Limits{Backlog: math.MaxInt})
	h := schema.Handle(rc.Bootstrap(context.Background()))
	t.Cleanup(func() { h.Release(); _ = rc.Close() })
	return h, wc
}

func describe(t *testing.T, h schema.Handle) labels.Set {
	t.Helper()
	fut, release := h.Describe(context.Background(), nil)
	defer release()
	res, err := fut.Struct()
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	l, err := res.Labels()
	if err != nil {
		t.Fatal(err)
	}
	s, err := fromSchema(l)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDirectIsTheGrantAndNoWider: toybox-entry's direct switchboard
// connections are one per grant member, each bootstrapped with that
// member's handle (vat label included). Through them the entry reaches
// what its member admits and nothing else: not another member's port
// (the union is the entry trying each), not an ungranted port, not by a
// constrain that names another vat, port or host (a conflict, never a
// widening), not through a further Handle.socket. An app's fd 3 gets none.
func TestDirectIsTheGrantAndNoWider(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	p1, p2, other := echoServer(t), echoServer(t), echoServer(t)
	var mu sync.Mutex
	var got []Decision
	u := NewUpstream(UpstreamConfig{Path: sock})
	t.Cleanup(func() { _ = u.Close() })
	v, err := NewVat(VatConfig{
		ID: "erin", Grants: []labels.Set{{Host: "127.0.0.1", Port: p1}, {Host: "127.0.0.1", Port: p2, Origin: labels.OriginManifest}}, Upstream: u,
		OnDecision: func(d Decision) { mu.Lock(); got = append(got, d); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Revoke)
	ctx := context.Background()

	// An app's fd 3 is never given one.
	avc, acli := vatClient(t, v)
	if _, _, err := directHandles(t, avc, acli); err == nil || !strings.Contains(err.Error(), "only toybox-entry") {
		t.Fatalf("an app's Vat.direct: %v; want refused, only toybox-entry", err)
	}
	// Nor does a vat's Handle make one.
	ah := egress(t, avc)
	if fut, rel := ah.Socket(ctx, nil); true {
		_, err := fut.Struct()
		rel()
		if err == nil || !strings.Contains(err.Error(), "only toybox-entry") {
			t.Fatalf("an app's Handle.socket: %v; want refused", err)
		}
	}

	vc, cli := entryClient(t, v)
	hs, wcs, err := directHandles(t, vc, cli)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 {
		t.Fatalf("%d direct connections; want one per member, 2", len(hs))
	}
	if l := describe(t, hs[0]); l.Vat != "erin" || l.Port != p1 || l.Origin != "" {
		t.Errorf("first member's labels %s; want vat erin, port %d, typed", l, p1)
	}
	if l := describe(t, hs[1]); l.Vat != "erin" || l.Port != p2 || l.Origin != labels.OriginManifest {
		t.Errorf("second member's labels %s; want vat erin, port %d, origin manifest", l, p2)
	}
	c1, err := connectFD(ctx, hs[0], wcs[0], "127.0.0.1", p1)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	roundTrip(t, c1, "one hop")
	c2, err := connectFD(ctx, hs[1], wcs[1], "127.0.0.1", p2)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	roundTrip(t, c2, "other member")

	// The attacks: every one must be refused by the switchboard.
	if c, err := connectFD(ctx, hs[0], wcs[0], "127.0.0.1", p2); err == nil {
		c.Close()
		t.Errorf("member 1's connection reached member 2's port %d", p2)
	}
	for i := range hs {
		if c, err := connectFD(ctx, hs[i], wcs[i], "127.0.0.1", other); err == nil || !strings.Contains(err.Error(), "egress refused") {
			if c != nil {
				c.Close()
			}
			t.Errorf("member %d's connection, ungranted port %d: %v; want egress refused", i, other, err)
		}
	}
	for _, wide := range []labels.Set{{Vat: "mallory"}, {Port: other}, {Host: "10.0.0.1"}, {Scheme: "https", Port: p1, Host: "127.0.0.2"}} {
		if n, err := constrainTo(ctx, hs[0], wide); err == nil {
			l := describe(t, n)
			n.Release()
			t.Errorf("constrain %s on a direct connection gave %s; want a conflict", wide, l)
		}
	}
	// A direct connection makes no further one (each would count against
	// limits of its own).
	fut, rel := hs[0].Socket(ctx, nil)
	_, err = fut.Struct()
	rel()
	if err == nil || !strings.Contains(err.Error(), "egress refused") {
		t.Errorf("Handle.socket on a direct connection: %v; want refused", err)
	}

	// Reports reach OnDecision.
	rfut, rrel := vc.ReportDirect(ctx, func(p schema.Vat_reportDirect_Params) error {
		l, err := p.NewReports(2)
		if err != nil {
			return err
		}
		for i, port := range []uint16{p1, p2} {
			if err := (schema.TargetFields{Scheme: "tcp", Host: "127.0.0.1", Port: port}).Set(l.At(i).NewTarget); err != nil {
				return err
			}
			l.At(i).SetAllowed(i == 0)
			if err := l.At(i).SetReason("connection refused"); err != nil {
				return err
			}
		}
		return nil
	})
	if _, err := rfut.Struct(); err != nil {
		t.Fatal(err)
	}
	rrel()
	mu.Lock()
	if len(got) != 2 || got[0].Outcome != Allowed || got[0].Target.Port != p1 || got[1].Outcome != Failed || got[1].Reason != "connection refused" {
		t.Errorf("decisions from reports: %+v; want p1 allowed, p2 failed", got)
	}
	mu.Unlock()
}

// TestDirectRevokedByRegrantAndStop: a member the new grant does not
// contain loses its direct connection: the switchboard shuts what it made
// and closes it, so a socket held from before the change refuses
// everything; the member kept goes on. Stopping the vat closes the rest.
// The entry asks again and gets the new grant's members.
func TestDirectRevokedByRegrantAndStop(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	p1, p2, p3 := echoServer(t), echoServer(t), echoServer(t)
	v, _ := newVat(t, sock, "erin", labels.Set{Host: "127.0.0.1", Port: p1}, labels.Set{Host: "127.0.0.1", Port: p2})
	ctx := context.Background()
	vc, cli := entryClient(t, v)
	hs, wcs, err := directHandles(t, vc, cli)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := connectFD(ctx, hs[0], wcs[0], "127.0.0.1", p1)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	roundTrip(t, c1, "before")

	if err := v.SetGrants([]labels.Set{{Host: "127.0.0.1", Port: p2}, {Host: "127.0.0.1", Port: p3}}); err != nil {
		t.Fatal(err)
	}
	if !readEOF(t, c1, 5*time.Second) {
		t.Fatal("a connection made on the removed member's direct connection is still open")
	}
	if c, err := connectFD(ctx, hs[0], wcs[0], "127.0.0.1", p1); err == nil {
		c.Close()
		t.Fatal("the removed member's direct connection still connects after the regrant")
	} else {
		t.Logf("old direct connection after the regrant: %v", err)
	}
	c2, err := connectFD(ctx, hs[1], wcs[1], "127.0.0.1", p2)
	if err != nil {
		t.Fatalf("the member kept: %v", err)
	}
	roundTrip(t, c2, "kept")
	c2.Close()

	hs, wcs, err = directHandles(t, vc, cli)
	if err != nil || len(hs) != 2 {
		t.Fatalf("asking again: %d connections, %v; want 2", len(hs), err)
	}
	c3, err := connectFD(ctx, hs[1], wcs[1], "127.0.0.1", p3)
	if err != nil {
		t.Fatalf("the new member: %v", err)
	}
	defer c3.Close()
	roundTrip(t, c3, "new")

	v.Revoke()
	if !readEOF(t, c3, 5*time.Second) {
		t.Fatal("a direct connect's socket is still open after the vat stopped")
	}
	// The switchboard revokes the members one by one, as their releases
	// and the session's end reach it: the one whose socket ended first
	// may be gone before the next is. Each must refuse soon.
	for i, port := range []uint16{p2, p3} { // each member's own target
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := connectFD(ctx, hs[i], wcs[i], "127.0.0.1", port)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatalf("direct connection %d still connects 5 s after the vat stopped", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// directGen is Vat.direct's answer: the members' labels and the grant's
// generation (each connection is closed at once: these are what Direct
// says, not what it connects).
func directGen(t *testing.T, vc schema.Vat, cli *wire.Conn) ([]labels.Set, uint64) {
	t.Helper()
	fut, release := vc.Direct(context.Background(), nil)
	defer release()
	res, err := fut.Struct()
	if err != nil {
		t.Fatal(err)
	}
	seqs, _ := res.Fds()
	l, err := res.Members()
	if err != nil || l.Len() != seqs.Len() {
		t.Fatalf("direct: %d members for %d connections, %v", l.Len(), seqs.Len(), err)
	}
	var ms []labels.Set
	for i := 0; i < l.Len(); i++ {
		if f, err := cli.TakeFD(seqs.At(i)); err == nil {
			_ = f.Close()
		}
		s, err := fromSchema(l.At(i))
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, s)
	}
	return ms, res.Gen()
}

// grantChanged starts vc.grantChanged(gen) and returns where its answer
// (the new generation, or the error) arrives.
func grantChanged(vc schema.Vat, gen uint64) <-chan error {
	out := make(chan error, 1)
	fut, release := vc.GrantChanged(context.Background(), func(p schema.Vat_grantChanged_Params) error {
		p.SetGen(gen)
		return nil
	})
	go func() {
		defer release()
		res, err := fut.Struct()
		if err == nil && res.Gen() == gen {
			err = errors.New("answered with the generation it was given")
		}
		out <- err
	}()
	return out
}

// TestDirectFollowsTheGrant: toybox-entry learns of a regrant as it
// happens. grantChanged waits while the grant stays, answers when a
// regrant adds a member (so that the entry asks Vat.direct again and the
// new member takes one hop at once), and fails when the vat stops. The
// other way, a member the regrant removes stops at once: the entry's
// connection for it refuses the very next connect, with no wait for a
// held connection to be shut first. An app's fd 3 may not watch.
func TestDirectFollowsTheGrant(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	p1, p2 := echoServer(t), echoServer(t)
	v, _ := newVat(t, sock, "erin", labels.Set{Host: "127.0.0.1", Port: p1})
	ctx := context.Background()

	avc, _ := vatClient(t, v)
	if err := <-grantChanged(avc, 0); err == nil || !strings.Contains(err.Error(), "only toybox-entry") {
		t.Fatalf("an app's grantChanged: %v; want refused, only toybox-entry", err)
	}

	vc, cli := entryClient(t, v)
	ms, gen := directGen(t, vc, cli)
	if len(ms) != 1 || ms[0].Port != p1 || ms[0].Vat != "erin" {
		t.Fatalf("direct members %v; want the one grant, with the vat's label", ms)
	}
	if err := <-grantChanged(vc, gen+1); err != nil {
		t.Fatalf("grantChanged with a stale generation: %v; want an answer at once", err)
	}
	waiting := grantChanged(vc, gen)
	select {
	case err := <-waiting:
		t.Fatalf("grantChanged answered (%v) with no regrant", err)
	case <-time.After(200 * time.Millisecond):
	}

	// A regrant adds p2: the watch answers, and asking again gives both.
	if err := v.SetGrants([]labels.Set{{Host: "127.0.0.1", Port: p1}, {Host: "127.0.0.1", Port: p2}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiting:
		if err != nil {
			t.Fatalf("grantChanged after a regrant: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("grantChanged did not answer the regrant that added a member")
	}
	hs, wcs, err := directHandles(t, vc, cli)
	if err != nil || len(hs) != 2 {
		t.Fatalf("asking again: %d connections, %v; want 2", len(hs), err)
	}
	c, err := connectFD(ctx, hs[1], wcs[1], "127.0.0.1", p2)
	if err != nil {
		t.Fatalf("the member the regrant added, one hop: %v", err)
	}
	roundTrip(t, c, "added")
	c.Close()
	ms, gen2 := directGen(t, vc, cli)
	if gen2 == gen || len(ms) != 2 {
		t.Fatalf("after the regrant: generation %d (was %d), members %v", gen2, gen, ms)
	}

	// A regrant removes p1: its connection refuses the very next connect.
	waiting = grantChanged(vc, gen2)
	if err := v.SetGrants([]labels.Set{{Host: "127.0.0.1", Port: p2}}); err != nil {
		t.Fatal(err)
	}
	if c, err := connectFD(ctx, hs[0], wcs[0], "127.0.0.1", p1); err == nil {
		c.Close()
		t.Fatal("the removed member's direct connection connected right after the regrant")
	}
	if err := <-waiting; err != nil {
		t.Fatalf("grantChanged after the removal: %v", err)
	}
	if c, err := connectFD(ctx, hs[1], wcs[1], "127.0.0.1", p2); err != nil {
		t.Fatalf("the member kept: %v", err)
	} else {
		c.Close()
	}

	// The vat stops: a waiting watch fails.
	_, gen3 := directGen(t, vc, cli)
	waiting = grantChanged(vc, gen3)
	v.Revoke()
	select {
	case err := <-waiting:
		if err == nil {
			t.Fatal("grantChanged answered the stop as a regrant")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("grantChanged still waits after the vat stopped")
	}
}

// TestDirectAskedAgainIsBounded: every direct connection Vat.direct makes
// is a handle on the supervisor's switchboard session, which every vat
// shares and the switchboard bounds (limits.handles). An entry that asked
// again and again and kept every connection took the session's handles
// for itself, and every other vat's egress failed. One run of a wall is
// handed at most maxDirectConns; past them Vat.direct is refused, saying
// why, and the entry's connects go through the relay.
func TestDirectAskedAgainIsBounded(t *testing.T) {
	const limit = maxDirectConns + 40 // the switchboard's handles per connection
	sock := startSwitchboardHolding(t, limit)
	port := echoServer(t)
	u := NewUpstream(UpstreamConfig{Path: sock})
	t.Cleanup(func() { _ = u.Close() })
	vat := func(id string) *Vat {
		v, err := NewVat(VatConfig{ID: labels.VatID(id), Grants: []labels.Set{{Host: "127.0.0.1", Port: port}}, Upstream: u})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(v.Revoke)
		return v
	}
	mallory, alice := vat("mallory"), vat("alice")

	vc, cli := entryClient(t, mallory)
	kept := 0
	var refusal error
	for i := 0; i < limit; i++ {
		hs, _, err := directHandles(t, vc, cli) // each kept till the test ends
		if err != nil {
			refusal = err
			break
		}
		kept += len(hs)
	}
	if refusal == nil || !strings.Contains(refusal.Error(), "direct") {
		t.Errorf("mallory's entry kept %d direct connections, asked for %d; want refused past %d, saying why (got %v)", kept, limit, maxDirectConns, refusal)
	}
	if kept > maxDirectConns {
		t.Errorf("mallory's entry holds %d direct connections; want at most %d", kept, maxDirectConns)
	}

	// Another vat on the same session still connects.
	avc, acli := vatClient(t, alice)
	c, err := connectFD(context.Background(), egress(t, avc), acli, "127.0.0.1", port)
	if err != nil {
		t.Fatalf("alice's connect once mallory's entry has asked for %d direct connections: %v; want it to work", kept, err)
	}
	defer c.Close()
	roundTrip(t, c, "alice")
}
