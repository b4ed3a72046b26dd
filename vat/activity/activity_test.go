package activity

import (
	"fmt"
	"testing"
	"time"

	"toybox/labels"
	"toybox/vat/grant"
)

func TestRecentAndCounts(t *testing.T) {
	r := New()
	for i := 0; i < MaxRecent+5; i++ {
		r.Decided("alice", grant.Decision{Op: "connect", Target: labels.Request{Scheme: "tcp", Host: "127.0.0.1", Port: uint16(1000 + i)}, Outcome: grant.Allowed})
	}
	r.Decided("alice", grant.Decision{Op: "connect", Target: labels.Request{Scheme: "tcp", Host: "example.org", Port: 443}, Outcome: grant.Refused, Reason: "egress to example.org not granted"})
	got := r.Recent("alice")
	if len(got) != MaxRecent {
		t.Fatalf("kept %d; want %d", len(got), MaxRecent)
	}
	if got[0].Outcome != "refused" || got[0].Target != "tcp://example.org:443" || got[1].Target != fmt.Sprintf("tcp://127.0.0.1:%d", 1000+MaxRecent+4) {
		t.Errorf("newest first: %+v, %+v", got[0], got[1])
	}
	if e, ok := r.LastRefusal("alice"); !ok || e.Reason != "egress to example.org not granted" {
		t.Errorf("LastRefusal = %+v, %v", e, ok)
	}
	cs := r.Decisions()
	if len(cs) != 2 || cs[0] != (DecisionCount{"alice", "allowed", "", MaxRecent + 5}) || cs[1] != (DecisionCount{"alice", "refused", "not_granted", 1}) {
		t.Errorf("Decisions = %+v", cs)
	}
	r.Spawned("alice", 30*time.Millisecond, true)
	h := r.SpawnDurations()[true]
	if h.Count != 1 || h.Counts[0] != 0 || h.Counts[2] != 1 {
		t.Errorf("spawn histogram = %+v; want 30ms counted from the 0.05 bucket up", h)
	}
}

func TestReasonClass(t *testing.T) {
	tests := []struct {
		o      grant.Outcome
		reason string
		want   string
	}{
		{grant.Refused, "egress to example.org not granted", "not_granted"},
		{grant.Refused, "port 9000 not granted", "not_granted"},
		{grant.Refused, "alias.test resolves to 8.8.8.8, an address on the operator's deny list", "deny_list"},
		{grant.Refused, "169.254.169.254 is a cloud metadata address", "metadata"},
		{grant.Refused, "10.0.0.7 is a private address", "address_class"},
		{grant.Refused, "the ClientHello names no server (SNI); it must name x", "tls"},
		{grant.Refused, "127.0.0.1:80 is held by pid 5 running as uid 7, not the toybox user", "listener_owner"},
		{grant.Refused, "the vat's grant no longer admits this handle (x)", "revoked"},
		{grant.Refused, "something new", "other"},
		{grant.Failed, "dial tcp 127.0.0.1:1: connect: connection refused", "connection_refused"},
		{grant.Allowed, "", ""},
	}
	for _, tt := range tests {
		if got := ReasonClass(tt.o, tt.reason); got != tt.want {
			t.Errorf("ReasonClass(%v, %q) = %q; want %q", tt.o, tt.reason, got, tt.want)
		}
	}
}
