package store

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"toybox/tests/testenv"
)

// TestCodeIsSealed: stored code is its owner's and the code group's only
// (files 0640, executables 0750, folders 0750), so a .env a bundle ships is
// not readable by every user of the host, as it was (0644, and the code's
// path shows in every wall's mount table). A user in the code group (what
// walls are) reads it; another user does not.
func TestCodeIsSealed(t *testing.T) {
	testenv.RequireRoot(t)
	s := openStore(t)
	if s.CodeGID() != RootCodeGID {
		t.Fatalf("CodeGID = %d under root; want %d", s.CodeGID(), RootCodeGID)
	}
	c, err := s.Put(bytes.NewReader(mkTar(t, false, goodManifest, goodApp,
		entry{name: ".env", body: "DB_PASSWORD=bundle-secret\n"},
		entry{name: "lib/data.txt", body: "data"})), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSealed(t, c.Dir, RootCodeGID)
	// Under the state dir's own modes (the parents 0711, as vat/store and
	// the unit set them), as another user and as a wall's.
	_ = os.Chmod(filepath.Dir(s.StateDir()), 0o711)
	env := filepath.Join(c.Dir, ".env")
	if out, err := readAs(env, 12345, 12345, nil); err == nil {
		t.Errorf("another user read the bundle's .env: %q", out)
	}
	if out, err := readAs(env, 1000007, 1000007, []uint32{RootCodeGID}); err != nil || !strings.Contains(out, "bundle-secret") {
		t.Errorf("a wall's uid with the code group: %q, %v; want the file", out, err)
	}
}

// TestOldCodeSealedAtOpen: code an earlier version stored world-readable
// is sealed when the store opens.
func TestOldCodeSealedAtOpen(t *testing.T) {
	testenv.RequireRoot(t)
	s := openStore(t)
	c, err := s.Put(bytes.NewReader(mkTar(t, false, goodManifest, goodApp, entry{name: ".env", body: "K=v"})), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	// As an earlier version left it.
	_ = filepath.WalkDir(c.Dir, func(p string, d fs.DirEntry, _ error) error {
		mode := os.FileMode(0o644)
		if d.IsDir() || strings.HasSuffix(p, "/app") {
			mode = 0o755
		}
		_ = os.Chmod(p, mode)
		return os.Lchown(p, 0, 0)
	})
	_ = os.Remove(filepath.Join(s.StateDir(), sealMark))
	if _, err := Open(Config{StateDir: s.StateDir()}); err != nil {
		t.Fatal(err)
	}
	checkSealed(t, c.Dir, RootCodeGID)
}

func checkSealed(t *testing.T, dir string, gid int) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		n++
		if st := fi.Sys().(*syscall.Stat_t); int(st.Gid) != gid {
			t.Errorf("%s: group %d; want %d", p, st.Gid, gid)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil
		}
		if perm := fi.Mode().Perm(); perm&0o007 != 0 || perm&0o040 == 0 {
			t.Errorf("%s: mode %v; want readable by owner and group only", p, fi.Mode())
		}
		return nil
	})
	if err != nil || n < 4 {
		t.Fatalf("walked %d entries: %v", n, err)
	}
}

// readAs reads path as uid:gid with groups, in a child process.
func readAs(path string, uid, gid uint32, groups []uint32) (string, error) {
	cmd := exec.Command("/bin/cat", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
