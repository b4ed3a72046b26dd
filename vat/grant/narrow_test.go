package grant

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"toybox/labels"
	"toybox/schema"
	"toybox/tests/testenv"
)

// TestNarrowingsDoNotPileUp: a vat that narrows its Handle to one port
// after another, and releases each narrowing, leaves the supervisor holding
// a bounded number of switchboard handles (each one is the switchboard's
// goroutine and memory, and counts against its per-connection limit): its
// narrowings keep working far past the switchboard's handle limit. What
// is still in use is kept: a narrowing the vat holds, and the switchboard
// handle behind an app's socket whose narrowing is gone (releasing it
// would end the connection); a narrowing made again reuses its idle
// handle; Revoke releases everything.
func TestNarrowingsDoNotPileUp(t *testing.T) {
	const limit = 24  // the switchboard's handles per connection
	const maxIdle = 4 // the vat's idle switchboard handles
	sock := startSwitchboardHolding(t, limit)
	port := echoServer(t)
	v, _ := newVatWith(t, sock, VatConfig{ID: "cycler", Grants: []labels.Set{{Host: "127.0.0.1"}}, MaxIdle: maxIdle})
	vc, cli := vatClient(t, v)
	h := egress(t, vc)
	ctx := context.Background()

	narrow := func(l labels.Set) (schema.Handle, error) { return constrainTo(ctx, h, l) }
	check := func(nh schema.Handle, port uint16) error {
		fut, release := nh.Check(ctx, func(p schema.Handle_check_Params) error {
			tg, err := p.NewTarget()
			if err != nil {
				return err
			}
			_ = tg.SetScheme("tcp")
			_ = tg.SetHost("127.0.0.1")
			tg.SetPort(port)
			return nil
		})
		defer release()
		res, err := fut.Struct()
		if err != nil {
			return err
		}
		d, err := res.Decision()
		if err != nil {
			return err
		}
		if !d.Allow() {
			reason, _ := d.Reason()
			return errors.New("refused: " + reason)
		}
		return nil
	}
	member := func(l labels.Set) string {
		m, err := labels.Constrain(labels.Set{Host: "127.0.0.1", Vat: "cycler"}, l)
		if err != nil {
			t.Fatal(err)
		}
		return m.String()
	}

	// Held for the whole test.
	kept, err := narrow(labels.Set{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Release()
	if err := check(kept, port); err != nil {
		t.Fatal(err)
	}
	keptUp, _ := cachedUpstream(v, member(labels.Set{Port: port}))
	// Released at once; the app keeps the socket it made.
	gone, err := narrow(labels.Set{Scheme: "tcp", Port: port})
	if err != nil {
		t.Fatal(err)
	}
	c, err := connectFD(ctx, gone, cli, "127.0.0.1", port)
	gone.Release()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, "before")

	// A released narrowing is shut down, and lets go of its switchboard
	// handle, once nothing refers to it: here when go-capnp finishes the
	// constrain call that returned it, 250 ms after its answer. So the
	// narrowings come in batches, each well below the limit, and the
	// supervisor's count is awaited after each.
	const batch = 12
	n := 6 * batch
	bound := 2 + maxIdle // kept, the socket's, the idle ones
	piled := false
	for i := range n {
		p := uint16(20000 + i)
		nh, err := narrow(labels.Set{Port: p})
		if err == nil {
			err = check(nh, p)
			nh.Release()
		}
		if err != nil {
			t.Fatalf("narrowing %d of %d (switchboard limit %d handles): %v", i+1, n, limit, err)
		}
		if i%batch != batch-1 || piled {
			continue
		}
		var held int
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if held = upstreamsHeld(v); held <= bound || time.Now().After(deadline) {
				break
			}
		}
		if held > bound {
			t.Errorf("after %d narrowings released, the supervisor holds %d switchboard handles for the vat; want at most %d", i+1, held, bound)
			piled = true // said once; the narrowings go on, to the limit
		}
	}
	roundTrip(t, c, "after") // its switchboard handle was kept
	if err := check(kept, port); err != nil {
		t.Fatalf("the narrowing held throughout: %v", err)
	}
	if up, _ := cachedUpstream(v, member(labels.Set{Port: port})); !up.IsSame(keptUp) {
		t.Error("the switchboard handle of a narrowing the vat holds was replaced")
	}

	// The same narrowing again: its idle switchboard handle is reused.
	last := uint16(20000 + n - 1)
	idle, refs := cachedUpstream(v, member(labels.Set{Port: last}))
	if !idle.IsValid() || refs != 0 {
		t.Fatalf("the last narrowing released: cached %v with %d holds; want an idle switchboard handle", idle.IsValid(), refs)
	}
	again, err := narrow(labels.Set{Port: last})
	if err != nil {
		t.Fatal(err)
	}
	if err := check(again, last); err != nil {
		t.Fatal(err)
	}
	if up, refs := cachedUpstream(v, member(labels.Set{Port: last})); !up.IsSame(idle) || refs != 1 {
		t.Errorf("the same narrowing again: same switchboard handle %v, %d holds; want the idle one reused, held once", up.IsSame(idle), refs)
	}
	again.Release()

	// Once the app's socket is closed, its switchboard handle is idle too.
	_ = c.Close()
	socketKey := member(labels.Set{Scheme: "tcp", Port: port})
	testenv.WaitFor(t, 5*time.Second, func() error {
		if _, refs := cachedUpstream(v, socketKey); refs != 0 {
			return fmt.Errorf("the app closed its socket; its switchboard handle still has %d holds", refs)
		}
		return nil
	})

	v.Revoke()
	if held := upstreamsHeld(v); held != 0 {
		t.Errorf("after Revoke the supervisor holds %d switchboard handles for the vat", held)
	}
}

// upstreamsHeld counts the switchboard handles v holds.
func upstreamsHeld(v *Vat) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, e := range v.cache {
		if e.h.IsValid() {
			n++
		}
	}
	return n
}

// cachedUpstream returns the switchboard handle v holds for key (borrowed:
// only to compare) and how many hold it.
func cachedUpstream(v *Vat, key string) (schema.Handle, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e := v.cache[key]; e != nil {
		return e.h, e.refs
	}
	return schema.Handle{}, 0
}
