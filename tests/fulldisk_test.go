//go:build linux

package tests

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fillState fills the state dir's file system (a tmpfs, stackOpts.stateMiB)
// to its last byte with one file, and returns what removes that file.
func (s *stack) fillState() (free func()) {
	s.t.Helper()
	p := filepath.Join(s.state, "filler")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 4 << 10, 1} {
		b := make([]byte, chunk)
		for {
			if _, err := f.Write(b); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					s.t.Fatal(err)
				}
				break
			}
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.state, &st); err != nil || st.Bavail != 0 {
		s.t.Fatalf("the state dir is not full: %d blocks free, %v", st.Bavail, err)
	}
	return func() {
		s.t.Helper()
		if err := os.Remove(p); err != nil {
			s.t.Fatal(err)
		}
	}
}

// TestFullDiskRemove: on a full state disk every DELETE /<vat>, ?purge=1
// too, failed with 500 "clearing the wall choice of alice: writing
// walls.json: ... no space left on device": the removal first wrote
// walls.json again, changed or not, and a new copy of it needs room. So
// the one operation that frees room, removing a vat with its data, could
// not run until room was made by hand. A choice that is already so is not
// written: the vat goes, its image and code with it, and nothing of it is
// back after a restart.
func TestFullDiskRemove(t *testing.T) {
	s := newStack(t, stackOpts{stateMiB: 64})
	s.mustInstall("alice", example(t, "counter-v1"), "")
	s.mustInstall("bob", example(t, "counter-v2"), "")
	s.mustGet("/alice/", "v1 count 1")
	s.fillState()

	if code, body := s.adminDo("DELETE", "/alice?purge=1", nil); code != http.StatusOK {
		t.Fatalf("DELETE /alice?purge=1 on a full disk = %d %s; want 200", code, body)
	}
	if code, body := s.adminDo("GET", "/alice", nil); code != http.StatusNotFound {
		t.Errorf("GET /alice after its removal = %d %s; want 404", code, body)
	}
	for _, p := range []string{"vats/alice.json", "vats/alice.json.good", "disk/alice.img", "data/alice"} {
		if _, err := os.Lstat(filepath.Join(s.state, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after DELETE ?purge=1: %v; want it gone", p, err)
		}
	}
	s.mustGet("/bob/", "v2 count 1")

	s.killToybox()
	s.startToybox()
	if code, body := s.adminDo("GET", "/alice", nil); code != http.StatusNotFound {
		t.Errorf("GET /alice after a restart = %d %s; want 404", code, body)
	}
	waitFor(t, "bob back", 20*time.Second, func() bool { return s.status("bob")["status"] == "walled" })
	s.mustGet("/bob/", "v2 count 2")
}

// TestFullDiskStartKeepsData: a supervisor started on a full state disk
// cannot make the small image that finds whether data folders can have a
// disk limit, and so ran every vat without one: on its bare data folder,
// which is empty while its image is not mounted. The counter started again
// at 1, its data out of its sight, and what it wrote meanwhile would be
// hidden by the next mount. A vat whose data lies in an image now stays off
// and says why; once the disk has room, a restart of the vat brings it
// back with its data: the probe is tried again.
func TestFullDiskStartKeepsData(t *testing.T) {
	s := newStack(t, stackOpts{stateMiB: 64})
	s.mustInstall("alice", example(t, "counter-v1"), "")
	s.mustGet("/alice/", "v1 count 1")
	s.mustGet("/alice/", "v1 count 2")
	// As after a reboot: the images are unmounted when toybox stops.
	s.stopToybox()
	// The walls' /etc views go at start, and their room with them: gone
	// now, so that the disk is still full when alice starts.
	if err := os.RemoveAll(filepath.Join(s.state, "etc")); err != nil {
		t.Fatal(err)
	}
	free := s.fillState()

	s.startToybox()
	st := s.waitWord("alice", "off: it stopped")
	if why := st["last_error"].(string); !strings.Contains(why, "disk image") || !strings.Contains(why, "empty data folder") {
		t.Errorf("alice's last_error on a full disk = %q; want its disk image named", why)
	}
	if code, body := s.get("/alice/"); code == http.StatusOK {
		t.Errorf("GET /alice/ on a full disk = %d %q; want it off, not running without its data", code, body)
	}

	// Room again: a restart of the vat mounts its image, the supervisor
	// still running (its disk limits were found again).
	free()
	if code, body := s.adminDo("POST", "/alice/restart", nil); code != http.StatusOK {
		t.Fatalf("POST /alice/restart with room again = %d %s", code, body)
	}
	s.mustGet("/alice/", "v1 count 3")
	if lim, _ := s.status("alice")["limits"].(map[string]any); lim["disk_mib"] == nil {
		t.Errorf("alice's limits after the restart = %v; want its disk limit in force", lim)
	}

	// And after a restart of the supervisor.
	s.stopToybox()
	s.startToybox()
	waitFor(t, "alice back", 20*time.Second, func() bool { return s.status("alice")["status"] == "walled" })
	s.mustGet("/alice/", "v1 count 4")
}
