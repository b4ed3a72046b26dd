package fixit

import "testing"

func TestACardActsOnceOnItsOwnVat(t *testing.T) {
	var rs Records
	a := rs.Raise("alice", "sha256:aa", "bwrap: setting up uid map: Permission denied")
	if again := rs.Raise("alice", "sha256:aa", "bwrap: setting up uid map: Permission denied"); again.Ref != a.Ref {
		t.Errorf("the same failure raised twice: refs %s and %s; want one record", a.Ref, again.Ref)
	}
	b := rs.Raise("bob", "sha256:bb", "no toybox-entry")
	if a.Ref == b.Ref || len(a.Ref) != 32 {
		t.Fatalf("refs %q and %q; want two distinct 128-bit refs", a.Ref, b.Ref)
	}
	if _, ok := rs.Take("0123456789abcdef0123456789abcdef"); ok {
		t.Error("a forged ref was taken")
	}
	got, ok := rs.Take(b.Ref)
	if !ok || got.Vat != "bob" {
		t.Fatalf("Take(bob's ref) = %+v, %v; want bob's record", got, ok)
	}
	if _, ok := rs.Take(b.Ref); ok {
		t.Error("a used card acted twice")
	}
	// A new failure replaces the old card.
	c := rs.Raise("alice", "sha256:cc", "another reason")
	if _, ok := rs.Take(a.Ref); ok {
		t.Error("the card of a replaced failure still acts")
	}
	rs.Settle("alice")
	if _, ok := rs.Take(c.Ref); ok {
		t.Error("the card of a settled vat still acts")
	}
	// A card from another process (before a restart) names nothing here.
	var fresh Records
	if _, ok := fresh.Take(c.Ref); ok {
		t.Error("a card from before a restart acted")
	}
}
