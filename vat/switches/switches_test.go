package switches

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"toybox/vat/words"
)

func TestDecideOrder(t *testing.T) {
	tests := []struct {
		name string
		in   Inputs
		want Decision
	}{
		{"nothing set: walled", Inputs{}, Decision{Walled: true}},
		{"owner", Inputs{OwnerUnwall: true}, Decision{Word: words.NotWalledChoice}},
		{"host beats owner", Inputs{HostOff: true, OwnerUnwall: true}, Decision{Word: words.NotWalledHost}},
		{"kill beats all", Inputs{Kill: true, HostOff: true, OwnerUnwall: true, Approved: true, NoBwrap: true}, Decision{Word: words.NotWalledOperator}},
		{"no bubblewrap, walls on: off", Inputs{NoBwrap: true}, Decision{Off: true, Word: words.OffNoBwrap}},
		{"no bubblewrap, host default off", Inputs{NoBwrap: true, HostOff: true}, Decision{Word: words.NotWalledNoBwrap}},
		{"approved", Inputs{Approved: true, OwnerUnwall: true}, Decision{Word: words.NotWalledApproved}},
		{"approved needs no bubblewrap", Inputs{Approved: true, NoBwrap: true}, Decision{Word: words.NotWalledApproved}},
		{"owner's choice needs no bubblewrap", Inputs{OwnerUnwall: true, NoBwrap: true}, Decision{Word: words.NotWalledChoice}},
		{"host beats approved", Inputs{HostOff: true, Approved: true}, Decision{Word: words.NotWalledHost}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.in)
			if got.Walled != tt.want.Walled || got.Off != tt.want.Off || got.Word != tt.want.Word || got.Reason == "" {
				t.Errorf("Decide(%+v) = %+v; want %+v with a reason", tt.in, got, tt.want)
			}
		})
	}
}

func TestNewRejectsUnknownValues(t *testing.T) {
	for _, cfg := range []Config{{Kill: "no"}, {Default: "maybe"}, {Kill: "OFF"}} {
		if _, err := New(cfg); !errors.Is(err, ErrBadSwitch) {
			t.Errorf("New(%+v) err = %v; want ErrBadSwitch", cfg, err)
		}
	}
}

func TestOwnerChoiceFile(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.For("alice", "")
	if err != nil || !d.Walled {
		t.Fatalf("For(alice) before any choice = %+v, %v; want walled", d, err)
	}
	if err := s.SetChoice("alice", false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("walls.json mode = %v; want 0600", fi.Mode().Perm())
	}
	if d, _ := s.For("alice", ""); d.Walled || d.Word != words.NotWalledChoice {
		t.Errorf("For(alice) after unwall = %+v; want not walled (your choice)", d)
	}
	if d, _ := s.For("bob", ""); !d.Walled {
		t.Errorf("For(bob) = %+v; want walled (choice is per vat)", d)
	}
	if err := s.SetChoice("alice", true); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.For("alice", ""); !d.Walled {
		t.Errorf("For(alice) after wall again = %+v; want walled", d)
	}
}

// TestSetChoiceAlreadySoWritesNothing: a removal clears the vat's choice
// (SetChoice walled), and rewrote walls.json each time, which a full disk
// refused: no vat could be removed there. A choice already so writes
// nothing.
func TestSetChoiceAlreadySoWritesNothing(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, FileName)
	if err := s.SetChoice("alice", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("walls.json after walling a walled vat: %v; want none written", err)
	}
	if err := s.SetChoice("alice", false); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetChoice("alice", false); err != nil {
		t.Fatal(err)
	}
	if err := s.SetChoice("bob", true); err != nil {
		t.Fatal(err)
	}
	// Each write renames a new file in: the same file is none.
	if after, err := os.Stat(p); err != nil || !os.SameFile(before, after) {
		t.Errorf("walls.json after choices already so: rewritten (%v); want it untouched", err)
	}
}

func TestCorruptFileFailsClosed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, _ := New(Config{StateDir: dir})
	if _, err := s.For("alice", ""); err == nil {
		t.Error("For with a corrupt walls.json succeeded; want an error (never guess)")
	}
}

// TestChangedOutside: toybox's own writes are not changes from outside;
// an edit by anything else is, once; markers survive an owner's choice.
func TestChangedOutside(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if ch, err := s.ChangedOutside(); err != nil || ch {
		t.Fatalf("first look = %v, %v; want no change (it takes note)", ch, err)
	}
	if err := s.SetChoice("alice", false); err != nil {
		t.Fatal(err)
	}
	if err := s.Mark("walled", time.Now()); err != nil {
		t.Fatal(err)
	}
	if ch, err := s.ChangedOutside(); err != nil || ch {
		t.Fatalf("after toybox's own writes = %v, %v; want no change", ch, err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(`{"unwalled":["alice","bob"],"notices":{"walled":"2026-01-01T00:00:00Z"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if ch, err := s.ChangedOutside(); err != nil || !ch {
		t.Fatalf("after an outside edit = %v, %v; want a change", ch, err)
	}
	if ch, _ := s.ChangedOutside(); ch {
		t.Fatal("the same outside edit reported twice")
	}
	// An outside edit toybox overwrites before it looks is still told.
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(`{"unwalled":[],"notices":{"walled":"2026-01-01T00:00:00Z"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.SetChoice("carol", false); err != nil {
		t.Fatal(err)
	}
	if ch, _ := s.ChangedOutside(); !ch {
		t.Fatal("an outside edit followed by toybox's own write went untold")
	}
	if ok, err := s.Marked("walled"); err != nil || !ok {
		t.Fatalf("Marked(walled) = %v, %v after a choice was written; want the marker kept", ok, err)
	}
	if ok, _ := s.Marked("kill"); ok {
		t.Fatal("Marked(kill) without a mark")
	}
}
