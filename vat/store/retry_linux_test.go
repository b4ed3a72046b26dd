package store

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"toybox/tests/testenv"
)

// TestHandoverCutShortIsRetried: a handover that stopped part way (a
// folder moved meanwhile) must leave the data folder's own owner as it
// was, so that the next Retire or PrepareDirs walks it again; handing the
// top over first made the next one see it handed and skip the walk, and
// what the first never reached stayed with the old uid for good.
func TestHandoverCutShortIsRetried(t *testing.T) {
	testenv.RequireRoot(t) // chown
	s := openStore(t)
	const id = "cut"
	const old = 1300600
	if err := s.PrepareDirs(id, old, old); err != nil {
		t.Fatal(err)
	}
	data := s.DataDir(id)
	for i := range 10 {
		if err := os.MkdirAll(filepath.Join(data, fmt.Sprintf("d%d", i), "s"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, fmt.Sprintf("d%d", i), "f"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := exec.Command("chown", "-R", "-h", fmt.Sprintf("%d:%d", old, old), data).Run(); err != nil {
		t.Fatal(err)
	}
	moved := false
	chownClimbHook = func() {
		if moved {
			return
		}
		moved = true // a process of the vat moves every d*/s up meanwhile
		for i := range 10 {
			_ = os.Rename(filepath.Join(data, fmt.Sprintf("d%d", i), "s"), filepath.Join(data, fmt.Sprintf("s%d", i)))
		}
	}
	t.Cleanup(func() { chownClimbHook = nil })
	if err := s.Retire(id); err == nil || !strings.Contains(err.Error(), "moved") {
		t.Fatalf("Retire while a folder moves = %v; want the move named", err)
	}
	chownClimbHook = nil
	// Cut short, the folder is already out of the old uid's reach.
	if fi, err := os.Stat(data); err != nil {
		t.Fatal(err)
	} else if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm() != 0o700 {
		t.Errorf("after a Retire cut short the folder is uid %d mode %o; want root's, 0700", st.Uid, fi.Mode().Perm())
	}
	oldOwned := func() string {
		out, err := exec.Command("find", data, "-uid", fmt.Sprint(old)).CombinedOutput()
		if err != nil {
			t.Fatalf("find: %v %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// The first step up came after one d* of ten: the others were not
	// reached, so there is something to retry.
	if oldOwned() == "" {
		t.Fatal("the cut-short walk reached everything: the test no longer cuts it short")
	}
	if err := s.Retire(id); err != nil {
		t.Fatalf("Retire again: %v", err)
	}
	if left := oldOwned(); left != "" {
		t.Errorf("after a second Retire, entries still belong to the old uid %d:\n%s", old, left)
	}
}
