package grant

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/labels"
)

// readEOF reports whether c reads end of stream within d (the switchboard
// shut it); false when it stays open.
func readEOF(t *testing.T, c interface {
	Read([]byte) (int, error)
	SetReadDeadline(time.Time) error
}, d time.Duration,
) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

// TestSetGrantsRevokesWhatItNoLongerAdmits: a vat with two grants holds a
// connection under each, and a narrowed Handle. Its grant loses one: the
// connection under the lost one is shut by the switchboard, the other
// keeps working, and neither Handle reaches the lost port any longer. A
// grant that widens again lets the narrowed Handle reach it once more.
// Without SetGrants' release of the uncovered switchboard handle, the
// first connection stays open (its read times out, not EOF).
func TestSetGrantsRevokesWhatItNoLongerAdmits(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	p1, p2 := echoServer(t), echoServer(t)
	var mu sync.Mutex
	var got []Decision
	u := NewUpstream(UpstreamConfig{Path: sock})
	t.Cleanup(func() { _ = u.Close() })
	v, err := NewVat(VatConfig{
		ID: "erin", Grants: []labels.Set{{Host: "127.0.0.1", Port: p1}, {Host: "127.0.0.1", Port: p2}}, Upstream: u,
		OnDecision: func(d Decision) { mu.Lock(); got = append(got, d); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Revoke)
	vc, cli := entryClient(t, v)
	h := egress(t, vc)
	ctx := context.Background()
	narrow, err := constrainTo(ctx, h, labels.Set{Host: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer narrow.Release()
	c1, err := connectFD(ctx, h, cli, "127.0.0.1", p1)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := connectFD(ctx, narrow, cli, "127.0.0.1", p2)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	roundTrip(t, c1, "one")
	roundTrip(t, c2, "two")

	if err := v.SetGrants([]labels.Set{{Host: "127.0.0.1", Port: p2}}); err != nil {
		t.Fatal(err)
	}
	if !readEOF(t, c1, 5*time.Second) {
		t.Fatalf("the connection to port %d, which the new grant refuses, is still open", p1)
	}
	roundTrip(t, c2, "still here")
	if _, err := connectFD(ctx, h, cli, "127.0.0.1", p1); err == nil || !strings.Contains(err.Error(), "not granted") {
		t.Fatalf("the vat's Handle after the change, port %d: %v; want refused, not granted", p1, err)
	}
	if _, err := connectFD(ctx, narrow, cli, "127.0.0.1", p1); err == nil || !strings.Contains(err.Error(), "not granted") {
		t.Fatalf("a narrowing made before the change, port %d: %v; want refused, not granted", p1, err)
	}
	if got := v.Members(); len(got) != 1 || got[0].Port != p2 {
		t.Fatalf("Members() = %v; want the one new grant", got)
	}

	if err := v.SetGrants([]labels.Set{{Host: "127.0.0.1", Port: p1}, {Host: "127.0.0.1", Port: p2}}); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c2, "a widening shuts nothing")
	c3, err := connectFD(ctx, narrow, cli, "127.0.0.1", p1)
	if err != nil {
		t.Fatalf("the narrowing after the grant widened again, port %d: %v", p1, err)
	}
	roundTrip(t, c3, "back")
	_ = c3.Close()

	mu.Lock()
	defer mu.Unlock()
	var allowed, refused int
	for _, d := range got {
		switch d.Outcome {
		case Allowed:
			allowed++
		case Refused:
			refused++
			if !strings.Contains(d.Reason, "not granted") || strings.HasPrefix(d.Reason, "egress refused") {
				t.Errorf("refusal reason %q; want the reason alone", d.Reason)
			}
		}
		if d.Op != "connect" || d.Target.Host != "127.0.0.1" {
			t.Errorf("decision %+v; want a connect to 127.0.0.1", d)
		}
	}
	if allowed != 3 || refused != 2 {
		t.Errorf("decisions: %d allowed, %d refused; want 3 and 2: %+v", allowed, refused, got)
	}
}

func TestCovered(t *testing.T) {
	g := []labels.Set{{Host: "example.com", Vat: "a"}, {Scheme: "https", Host: "api.example.com", Port: 443, Vat: "a"}}
	tests := []struct {
		name string
		m    labels.Set
		want bool
	}{
		{"same", labels.Set{Host: "example.com", Vat: "a"}, true},
		{"narrower", labels.Set{Host: "example.com", Port: 443, Vat: "a"}, true},
		{"wider", labels.Set{Vat: "a"}, false},
		{"other host", labels.Set{Host: "example.org", Vat: "a"}, false},
		{"any port where 443 only", labels.Set{Scheme: "https", Host: "api.example.com", Vat: "a"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := covered(tt.m, g); got != tt.want {
				t.Errorf("covered(%v) = %v; want %v", tt.m, got, tt.want)
			}
		})
	}
}
