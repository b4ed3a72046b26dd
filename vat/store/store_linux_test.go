package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
)

// TestPutFullDiskIsNotABadBundle: a bundle that fits the limits but not the
// state dir's disk was refused as "bad bundle: writing ...: no space left
// on device", a 400 that blames the bundle for the host's full disk. It is
// the host's error (storing the bundle), and nothing is stored.
func TestPutFullDiskIsNotABadBundle(t *testing.T) {
	testenv.RequireRoot(t)
	state := t.TempDir()
	if err := unix.Mount("tmpfs", state, "tmpfs", 0, "size=256k,mode=0755"); err != nil {
		testenv.Unavailable(t, "cannot mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(state, unix.MNT_DETACH) })
	s, err := Open(Config{StateDir: filepath.Join(state, "state")})
	if err != nil {
		t.Fatal(err)
	}
	big := entry{name: "data/zeros", body: strings.Repeat("\x00", 1<<20)}
	_, err = s.Put(bytes.NewReader(mkTar(t, true, goodManifest, goodApp, big)), "", nil)
	if err == nil || errors.Is(err, ErrBadBundle) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "storing the bundle") {
		t.Errorf("Put on a full disk = %v; want a storing error (ENOSPC), not %v", err, ErrBadBundle)
	}
	if ents := codeEntries(t, s); len(ents) != 0 {
		t.Errorf("code/ = %v; want nothing stored", ents)
	}
	if _, err := os.Stat(filepath.Join(state, "state", "vats")); err != nil {
		t.Error(err)
	}
}
