package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"toybox/tests/testenv"
)

// TestDeepTreesAreRemovedWithFewDescriptors: a vat leaves a chain of
// folders deeper than the supervisor's descriptor limit in its run folder
// and its data folder. os.RemoveAll holds one descriptor per level, so it
// ran the supervisor out of descriptors (every other accept, dial and
// spawn failing meanwhile) and then failed: the vat's next start
// (PrepareDirs clears the run folder) and a purge failed for good.
func TestDeepTreesAreRemovedWithFewDescriptors(t *testing.T) {
	s := openStore(t)
	// Whatever happens, the temporary folder goes (os.RemoveAll, which
	// t.TempDir uses, could not remove the chain).
	t.Cleanup(func() { _ = exec.Command("rm", "-rf", s.StateDir()).Run() })
	const id = "deep"
	if err := s.PrepareDirs(id, -1, -1); err != nil {
		t.Fatal(err)
	}
	testenv.LowNoFile(t, 256)
	testenv.DeepChain(t, s.RunDir(id), 1000)
	testenv.DeepChain(t, s.DataDir(id), 1000)
	if err := os.WriteFile(filepath.Join(s.RunDir(id), "app.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.PrepareDirs(id, -1, -1); err != nil {
		t.Fatalf("PrepareDirs with a deep tree in the run folder: %v", err)
	}
	if ents, err := os.ReadDir(s.RunDir(id)); err != nil || len(ents) != 0 {
		t.Fatalf("the run folder holds %d entries after PrepareDirs (%v)", len(ents), err)
	}
	testenv.DeepChain(t, s.RunDir(id), 1000)
	if err := s.Purge(id); err != nil {
		t.Fatalf("Purge of deep trees: %v", err)
	}
	for _, d := range []string{s.DataDir(id), s.RunDir(id)} {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s is still there after Purge (%v)", d, err)
		}
	}
}

// TestDeepDataIsHandedOverWhole: a data folder deeper than PATH_MAX is
// handed to root (Retire) and to a later uid (PrepareDirs) entry by entry;
// a walk by paths failed with "file name too long" past PATH_MAX, leaving
// what lay deeper to the old uid and the vat unable to start again.
func TestDeepDataIsHandedOverWhole(t *testing.T) {
	testenv.RequireRoot(t) // chown
	s := openStore(t)
	t.Cleanup(func() { _ = exec.Command("rm", "-rf", s.StateDir()).Run() })
	const id = "deep"
	if err := s.PrepareDirs(id, 1300500, 1300500); err != nil {
		t.Fatal(err)
	}
	testenv.DeepChain(t, s.DataDir(id), 3000)
	if err := os.Symlink("/etc/passwd", filepath.Join(s.DataDir(id), "d", "link")); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("chown", "-R", "-h", "1300500:1300500", s.DataDir(id)).Run(); err != nil {
		t.Fatal(err)
	}
	if err := s.Retire(id); err != nil {
		t.Fatalf("Retire of a deep data folder: %.300v", err)
	}
	owners := func() string {
		out, err := exec.Command("sh", "-c", "find "+s.DataDir(id)+" -printf '%U:%G\\n' | sort | uniq -c").CombinedOutput()
		if err != nil {
			t.Fatalf("find: %v %s", err, out)
		}
		return string(out)
	}
	if got, want := owners(), "   3002 0:0\n"; got != want {
		t.Fatalf("after Retire the owners are\n%swant\n%s", got, want)
	}
	if err := s.PrepareDirs(id, 1300501, 1300501); err != nil {
		t.Fatalf("PrepareDirs for a later uid: %.300v", err)
	}
	if got, want := owners(), "   3002 1300501:1300501\n"; got != want {
		t.Fatalf("after PrepareDirs the owners are\n%swant\n%s", got, want)
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/etc/passwd", &st); err != nil || st.Uid != 0 {
		t.Fatalf("a link's target was changed: uid %d (%v)", st.Uid, err)
	}
}

// TestHandoverStopsWhenAFolderMoves: were something to move the folder
// being handed over out of the tree meanwhile (a process of the vat that
// outlived it), ".." would lead to where it went, and the names of the
// level above would be changed there: the step up is checked, so the
// handover stops and a file by such a name outside stays as it was.
func TestHandoverStopsWhenAFolderMoves(t *testing.T) {
	testenv.RequireRoot(t) // chown
	root := t.TempDir()
	data, outside := filepath.Join(root, "data"), filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(data, "a", "b"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// "victim" is a name in data/a (the level above b) and in outside.
	for _, f := range []string{filepath.Join(data, "a", "victim"), filepath.Join(outside, "victim")} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	moved := false
	beforeClimb := func() {
		if !moved {
			moved = true // the first step up is from b: move b out
			if err := os.Rename(filepath.Join(data, "a", "b"), filepath.Join(outside, "b")); err != nil {
				t.Error(err)
			}
		}
	}
	// The first step up is from b (the only folder below a), whatever
	// order a's names come in: beforeClimb moves b out just before it.
	err := chownTree(data, 4242, 4242, beforeClimb)
	if err == nil || !strings.Contains(err.Error(), "moved while it was handed over") {
		t.Fatalf("chownTree = %v; want the move named", err)
	}
	fi, err := os.Stat(filepath.Join(outside, "victim"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 {
		t.Errorf("a file outside the tree was handed to uid %d", st.Uid)
	}
}

// TestDeepUploadLeftoverIsRemoved: a half-unpacked bundle deeper than the
// descriptor limit (what a bundle of one long-named entry left before
// names were bounded) is removed at Open; os.RemoveAll, one descriptor per
// level, failed with "too many open files" at every start.
func TestDeepUploadLeftoverIsRemoved(t *testing.T) {
	s := openStore(t)
	t.Cleanup(func() { _ = exec.Command("rm", "-rf", s.StateDir()).Run() })
	left := filepath.Join(s.codeDir(), ".unpack-123")
	if err := os.Mkdir(left, 0o700); err != nil {
		t.Fatal(err)
	}
	testenv.LowNoFile(t, 256)
	testenv.DeepChain(t, left, 1000)
	if _, err := Open(s.cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a deep upload leftover is still there after Open (%v)", err)
	}
}

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
	s.cfg.beforeClimb = func() {
		if moved {
			return
		}
		moved = true // a process of the vat moves every d*/s up meanwhile
		for i := range 10 {
			_ = os.Rename(filepath.Join(data, fmt.Sprintf("d%d", i), "s"), filepath.Join(data, fmt.Sprintf("s%d", i)))
		}
	}
	if err := s.Retire(id); err == nil || !strings.Contains(err.Error(), "moved") {
		t.Fatalf("Retire while a folder moves = %v; want the move named", err)
	}
	s.cfg.beforeClimb = nil
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
