package supervisor

import (
	"errors"
	"os"
	"strings"
	"testing"

	"toybox/tests/testenv"
	"toybox/vat/words"
)

// TestDamagedRecordWithNoUIDToLearn: a record cut before its uid, with no
// good copy and no data folder to tell whose it was, could hold any uid:
// no new vat gets one (ErrUIDUnknown, naming the record) until the record
// is removed. The pruning of code stops too: the record names none.
func TestDamagedRecordWithNoUIDToLearn(t *testing.T) {
	testenv.RequireRoot(t) // a uid per vat is root mode's
	s, st := noWallSupervisor(t, nil)
	code, err := st.Put(strings.NewReader("#!/bin/sh\nexit 0\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Release(code.Digest)
	if err := os.WriteFile(st.RecordPath("cut"), []byte(`{"id":"cut","co`), 0o600); err != nil {
		t.Fatal(err)
	}
	started(t, s, st)
	got, err := s.Status("cut")
	if err != nil || got.Word() != words.OffDamaged || !strings.Contains(got.Damaged, "its uid is unknown") {
		t.Fatalf("Status(cut) = %+v, %v; want off, damaged, its uid unknown", got, err)
	}
	if _, err := st.Code(code.Digest); err != nil {
		t.Errorf("the stored code was pruned beside a record that names none: %v", err)
	}
	code2, err := st.Put(strings.NewReader("#!/bin/sh\nexit 2\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Install(InstallRequest{ID: "next", Code: code2}); !errors.Is(err, ErrUIDUnknown) || !strings.Contains(err.Error(), "cut") {
		t.Errorf("Install(next) = %v; want ErrUIDUnknown naming cut", err)
	}
	if _, err := s.Status("next"); err == nil {
		t.Error("the refused install is listed")
	}
	if _, err := s.Restart("cut"); err == nil || !strings.Contains(err.Error(), "cannot be read") {
		t.Errorf("Restart(cut) = %v; want the damage said", err)
	}
	if err := s.Remove("cut", false); err != nil {
		t.Fatal(err)
	}
	code3, err := st.Put(strings.NewReader("#!/bin/sh\nexit 3\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Install(InstallRequest{ID: "next", Code: code3}); errors.Is(err, ErrUIDUnknown) {
		t.Errorf("Install(next) after the damaged record's removal = %v", err)
	}
}
