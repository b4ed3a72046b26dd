package switches

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

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
		{"kill beats all", Inputs{Kill: true, HostOff: true, OwnerUnwall: true}, Decision{Word: words.NotWalledOperator}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.in)
			if got.Walled != tt.want.Walled || got.Word != tt.want.Word || got.Reason == "" {
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
	d, err := s.For("alice")
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
	if d, _ := s.For("alice"); d.Walled || d.Word != words.NotWalledChoice {
		t.Errorf("For(alice) after unwall = %+v; want not walled (your choice)", d)
	}
	if d, _ := s.For("bob"); !d.Walled {
		t.Errorf("For(bob) = %+v; want walled (choice is per vat)", d)
	}
	if err := s.SetChoice("alice", true); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.For("alice"); !d.Walled {
		t.Errorf("For(alice) after wall again = %+v; want walled", d)
	}
}

func TestCorruptFileFailsClosed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, _ := New(Config{StateDir: dir})
	if _, err := s.For("alice"); err == nil {
		t.Error("For with a corrupt walls.json succeeded; want an error (never guess)")
	}
}
