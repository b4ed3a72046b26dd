//go:build linux

package access

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
)

// fullDisk mounts a small tmpfs and returns its folder; fill fills it.
func fullDisk(t *testing.T) (dir string, fill func()) {
	t.Helper()
	testenv.RequireRoot(t)
	dir = t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=256k,mode=0700"); err != nil {
		testenv.Unavailable(t, "cannot mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	fill = func() {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(dir, "filler"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 4096)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, unix.ENOSPC) {
					t.Fatalf("filling %s: %v; want ENOSPC", dir, err)
				}
				return
			}
		}
	}
	return dir, fill
}

// TestRevokeOnFullDisk: an owner revokes a leaked token while the disk
// that keeps the tokens file is full. The token must stop opening its vat
// at once, the error must say the revocation is not stored, the file must
// keep every token it held (nothing already stored is lost), and once
// there is room again revoking it again stores it.
func TestRevokeOnFullDisk(t *testing.T) {
	dir, fill := fullDisk(t)
	p := filepath.Join(dir, "tokens.json")
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	leaked, leakedInfo := mint(t, s, "alice")
	kept, _ := mint(t, s, "alice")
	before, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	fill()

	info, err := s.Revoke("alice", leakedInfo.ID)
	if err == nil {
		t.Fatal("Revoke on a full disk = nil error; want it to say the revocation is not stored")
	}
	if !errors.Is(err, ErrNotStored) || info.ID != leakedInfo.ID {
		t.Errorf("Revoke on a full disk = %+v, %v; want the token's info and ErrNotStored", info, err)
	}
	if !strings.Contains(err.Error(), "restart") {
		t.Errorf("Revoke on a full disk: %v; want it to say a restart would open the token again", err)
	}
	if _, ok := s.Check("alice", leaked); ok {
		t.Error("a token revoked on a full disk still opens its vat")
	}
	if _, ok := s.Check("alice", kept); !ok {
		t.Error("the token not revoked no longer opens its vat")
	}
	if got := s.Unstored("alice"); len(got) != 1 || got[0] != leakedInfo.ID {
		t.Errorf("Unstored(alice) = %v; want [%s]", got, leakedInfo.ID)
	}
	if after, _ := os.ReadFile(p); string(after) != string(before) {
		t.Errorf("the tokens file changed on a full disk:\n%s\nwant\n%s", after, before)
	}

	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Revoke("alice", leakedInfo.ID); err != nil || info.ID != leakedInfo.ID {
		t.Fatalf("Revoke again with room = %+v, %v; want it stored", info, err)
	}
	if got := s.Unstored("alice"); len(got) != 0 {
		t.Errorf("Unstored(alice) after it was stored = %v; want none", got)
	}
	again, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := again.Check("alice", leaked); ok {
		t.Error("after a restart the revoked token opens its vat again")
	}
	if _, ok := again.Check("alice", kept); !ok {
		t.Error("after a restart the token not revoked no longer opens its vat")
	}
	if _, err := again.Revoke("alice", leakedInfo.ID); !errors.Is(err, ErrNoToken) {
		t.Errorf("Revoke of a stored revocation = %v; want ErrNoToken", err)
	}
}

// TestRevokeRetried: a revocation not stored is written by itself once
// the disk has room again: an owner who frees space need not revoke the
// token again before a restart.
func TestRevokeRetried(t *testing.T) {
	old := retryEvery
	retryEvery = 20 * time.Millisecond
	t.Cleanup(func() { retryEvery = old })
	dir, fill := fullDisk(t)
	p := filepath.Join(dir, "tokens.json")
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	leaked, info := mint(t, s, "alice")
	fill()
	if _, err := s.Revoke("alice", info.ID); !errors.Is(err, ErrNotStored) {
		t.Fatalf("Revoke on a full disk = %v; want ErrNotStored", err)
	}
	time.Sleep(5 * retryEvery) // retried, and failing still
	if got := s.Unstored("alice"); len(got) != 1 {
		t.Fatalf("Unstored(alice) on a full disk = %v; want [%s]", got, info.ID)
	}
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(s.Unstored("alice")) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the revocation was not stored within 10s of the disk having room")
		}
		time.Sleep(retryEvery)
	}
	again, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := again.Check("alice", leaked); ok {
		t.Error("after a restart the revoked token opens its vat again")
	}
}
