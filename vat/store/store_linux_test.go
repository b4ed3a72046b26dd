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

// TestSaveRecordGoodCopyNeverStale: a record saved on a nearly full disk
// (room for the record's new copy, not then for its good copy's) kept the
// good copy of the state before: another code, another grant. Nothing
// keeps a good copy's code once the record reads (Prune keeps what records
// name), and should the record be damaged later the vat ran from that
// good copy: the grant the owner had narrowed, or code no longer stored.
// A good copy that cannot be written is removed: the vat whose record is
// damaged then stays off (Damaged), never runs an older state.
func TestSaveRecordGoodCopyNeverStale(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=256k,mode=0755"); err != nil {
		testenv.Unavailable(t, "cannot mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	s, err := Open(Config{StateDir: filepath.Join(mnt, "state")})
	if err != nil {
		t.Fatal(err)
	}
	old := Record{ID: "v", Code: "sha256:" + strings.Repeat("a", 64), Egress: `{"host":"wide.example"}`, UID: 7}
	if err := s.SaveRecord(old); err != nil {
		t.Fatal(err)
	}
	// Fill the disk, then free two pages: room for a record of two pages,
	// then, with the old record's page freed by the rename, one.
	filler := filepath.Join(mnt, "filler")
	f, err := os.OpenFile(filler, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	page := make([]byte, 4096)
	var n int64
	for {
		if _, err := f.Write(page); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
		n += int64(len(page))
	}
	if err := f.Truncate(n - 2*4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// The new state is larger (as a record that gains its MCP probe's
	// tools is): two pages.
	rec := Record{ID: "v", Code: "sha256:" + strings.Repeat("b", 64), Egress: `{"host":"narrow.example"}`, UID: 7, Env: map[string]string{"K": strings.Repeat("x", 5000)}}
	if err := s.SaveRecord(rec); err != nil {
		t.Fatalf("SaveRecord with room for the record = %v; want it saved", err)
	}
	b, err := os.ReadFile(s.RecordPath("v"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readRecord("v", b); err != nil || got.Code != rec.Code {
		t.Fatalf("the record = %+v, %v; want the new one", got, err)
	}
	if gb, err := os.ReadFile(s.RecordPath("v") + goodSuffix); err == nil && !bytes.Equal(gb, b) {
		g, _ := readRecord("v", gb)
		t.Errorf("the good copy names code %s, grant %s; the record %s, %s: want it the same or gone", g.Code, g.Egress, rec.Code, rec.Egress)
	}
	// Should the record be damaged now, the vat runs no older state.
	if err := os.WriteFile(s.RecordPath("v"), b[:10], 0o600); err != nil {
		t.Fatal(err)
	}
	_, bad, err := s.Records()
	if err != nil || len(bad) != 1 {
		t.Fatalf("Records = %+v, %v; want v damaged", bad, err)
	}
	if g := bad[0].Good; g != nil && g.Code != rec.Code {
		t.Errorf("damaged v runs from a good copy naming %s (grant %s); want none, or the record's %s", g.Code, g.Egress, rec.Code)
	}
}

// TestOpenFullDiskUnmarked: Open seals stored code once and marks it so
// (.code-sealed). On a full disk the mark could not be written, and Open
// failed: toybox serve refused to start ("write .code-sealed: no space
// left on device"), every vat down, and it left the mark empty, so every
// later start tried again. Sealed but unmarked, Open goes on.
func TestOpenFullDiskUnmarked(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=256k,mode=0755"); err != nil {
		testenv.Unavailable(t, "cannot mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	state := filepath.Join(mnt, "state")
	if _, err := Open(Config{StateDir: state}); err != nil {
		t.Fatal(err)
	}
	// As an earlier version left it: no mark.
	if err := os.Remove(filepath.Join(state, sealMark)); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(mnt, "filler"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	if _, err := Open(Config{StateDir: state}); err != nil {
		t.Errorf("Open on a full disk = %v; want it open, the mark left for later", err)
	}
}
