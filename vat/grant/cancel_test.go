package grant

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/labels"
	"toybox/schema"
)

// The attack: a vat that gives up on its connects again and again. The
// sockets the switchboard hands over meanwhile arrive on the upstream
// session every vat shares; left unclaimed, they would fill its limit and
// break it, taking the other vats' connections down. Another vat's
// connection must outlive it, and new connects must still work.
func TestCancelledConnectsSpareOtherVats(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	port := echoServer(t)
	u := NewUpstream(UpstreamConfig{Path: sock})
	t.Cleanup(func() { _ = u.Close() })
	grant := labels.Set{Host: "127.0.0.1", Port: port}
	vat := func(id string) *Vat {
		v, err := NewVat(VatConfig{ID: labels.VatID(id), Grants: []labels.Set{grant}, Upstream: u})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(v.Revoke)
		return v
	}
	bob, eve := vat("bob"), vat("eve")
	bc, bcli := vatClient(t, bob)
	bh := egress(t, bc)
	live, err := connectFD(context.Background(), bh, bcli, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	roundTrip(t, live, "before")

	ec, _ := vatClient(t, eve)
	eh := egress(t, ec)
	for i := range 1500 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(1500))*time.Microsecond)
		fut, release := eh.Connect(ctx, func(p schema.Handle_connect_Params) error {
			tg, err := p.NewTarget()
			if err != nil {
				return err
			}
			_ = tg.SetScheme("tcp")
			_ = tg.SetHost("127.0.0.1")
			tg.SetPort(port)
			p.SetWantFd(true)
			return nil
		})
		_, err := fut.Struct()
		cancel()
		release()
		if err != nil && capnp.IsDisconnected(err) {
			// eve broke its own connection (its unclaimed sockets): its
			// business; it comes back on a new one.
			ec, _ = vatClient(t, eve)
			eh = egress(t, ec)
		}
		if i%300 == 0 {
			roundTrip(t, live, "during")
		}
	}
	roundTrip(t, live, "after")
	again, err := connectFD(context.Background(), bh, bcli, "127.0.0.1", port)
	if err != nil {
		t.Fatalf("bob's connect after eve's cancels: %v", err)
	}
	defer again.Close()
	roundTrip(t, again, "new")
}
