//go:build linux

package tests

import (
	"encoding/json"
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

// TestRemoveCutShortKeepsTokens: DELETE /<vat> forgot the vat's tokens,
// then removed its record. Stopped between the two (killed, or the record
// could not be removed: here its folder is read-only), the vat stayed
// installed with no token: after a restart its MCP endpoint, which had
// answered 401 to anyone without a token, was open to all. The record
// goes first now. Cut short after it (here: a full disk), the tokens stay
// with no vat: the next install under the id forgets them first, so they
// open nothing of it.
func TestRemoveCutShortKeepsTokens(t *testing.T) {
	s := newStack(t, stackOpts{stateMiB: 64})
	if code, body := s.install("alice", example(t, "mcp-http"), "mcp=http"); code != http.StatusCreated {
		t.Fatalf("PUT /alice?mcp=http = %d %s", code, body)
	}
	code, body := s.adminDo("POST", "/alice/tokens", nil)
	var minted struct{ Token string }
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &minted) != nil || minted.Token == "" {
		t.Fatalf("POST /alice/tokens = %d %s", code, body)
	}
	bearer := []string{"Authorization", "Bearer " + minted.Token}

	// The record cannot be removed.
	vats := filepath.Join(s.state, "vats")
	if err := syscall.Mount(vats, vats, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	unbind := func() { _ = syscall.Unmount(vats, syscall.MNT_DETACH) }
	t.Cleanup(unbind)
	if err := syscall.Mount("", vats, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	if code, body := s.adminDo("DELETE", "/alice", nil); code == http.StatusOK {
		t.Fatalf("DELETE /alice with its record read-only = %d %s; want it refused", code, body)
	}
	s.killToybox()
	unbind()
	s.startToybox()
	waitFor(t, "alice serving its token", 30*time.Second, func() bool {
		code, _, _ := s.mcpPost("alice", mcpInit, bearer...)
		return code == http.StatusOK
	})
	if code, _, body := s.mcpPost("alice", mcpInit); code != http.StatusUnauthorized {
		t.Fatalf("initialize without a token after a removal cut short = %d %s; want 401", code, body)
	}

	// Cut short after the record went: on a full disk the record goes, and
	// its room (two pages) is too little for the tokens' file written
	// again, which holds another vat's hundred tokens.
	if code, body := s.install("bob", example(t, "mcp-http"), "mcp=http"); code != http.StatusCreated {
		t.Fatalf("PUT /bob?mcp=http = %d %s", code, body)
	}
	for range 100 {
		if code, body := s.adminDo("POST", "/bob/tokens", nil); code != http.StatusCreated {
			t.Fatalf("POST /bob/tokens = %d %s", code, body)
		}
	}
	free := s.fillState()
	code, body = s.adminDo("DELETE", "/alice", nil)
	if gcode, gbody := s.adminDo("GET", "/alice", nil); gcode != http.StatusNotFound || !strings.Contains(body, "tokens") {
		t.Fatalf("DELETE /alice on a full disk = %d %s, then GET = %d %s; want it removed, and its tokens named", code, body, gcode, gbody)
	}
	free()
	s.killToybox()
	s.startToybox()
	if code, body := s.install("alice", example(t, "mcp-http"), "mcp=http"); code != http.StatusCreated {
		t.Fatalf("PUT /alice again = %d %s", code, body)
	}
	if code, body := s.adminDo("GET", "/alice/tokens", nil); code != http.StatusOK || strings.Contains(body, `"created"`) {
		t.Errorf("GET /alice/tokens of a vat installed again = %d %s; want none of the removed one's", code, body)
	}
	if code, _, body := s.mcpPost("alice", mcpInit); code != http.StatusOK {
		t.Errorf("initialize on the new alice, which holds no token = %d %s; want 200", code, body)
	}
}

// TestDiskLimitOffKeepsData: a vat's data lies in its disk image once a
// disk limit held it. An operator who then turns disk limits off
// (--wall-disk-mib 0) had the vat run on the bare folder under the mount
// point: empty, its data out of sight (a counter back at 1), and what it
// wrote there hidden again by the next mount. Its image is mounted as it
// is, and its status says the limit that is then in force.
func TestDiskLimitOffKeepsData(t *testing.T) {
	s := newStack(t, stackOpts{})
	s.mustInstall("alice", example(t, "counter-v1"), "")
	s.mustGet("/alice/", "v1 count 1")
	s.mustGet("/alice/", "v1 count 2")
	st := s.status("alice")
	lim, _ := st["limits"].(map[string]any)
	if lim["disk_mib"] != float64(1024) {
		t.Fatalf("alice's limits before: %v; want the default disk limit in force", st["limits"])
	}

	s.restart([]string{"--wall-disk-mib", "0"}, nil)
	st = s.waitWord("alice", "walled")
	s.mustGet("/alice/", "v1 count 3")
	lim, _ = st["limits"].(map[string]any)
	if lim["disk_mib"] != float64(1024) {
		t.Errorf("alice's limits with --wall-disk-mib 0: %v (unlimited: %v); want its image's 1024 MiB, the limit in force", st["limits"], st["unlimited"])
	}
}

// TestFullDiskRevokeToken: an owner revokes a leaked token while the
// state disk is full. DELETE /<vat>/tokens/<id> answered 500 and left the
// token opening the vat: the revocation was undone in memory because the
// tokens file could not be rewritten. The token must open nothing at
// once; the answer must say the revocation is not stored (500, "stored":
// false); GET /<vat>/tokens must list it; the other token must work; and
// once the disk has room the revocation is written by itself, so a
// restart does not bring the token back.
func TestFullDiskRevokeToken(t *testing.T) {
	s := newStack(t, stackOpts{stateMiB: 64})
	if code, body := s.install("alice", example(t, "mcp-http"), "mcp=http"); code != http.StatusCreated {
		t.Fatalf("PUT /alice?mcp=http = %d %s", code, body)
	}
	mint := func() (string, string) {
		t.Helper()
		code, body := s.adminDo("POST", "/alice/tokens", nil)
		var m struct{ Token, ID string }
		if code != http.StatusCreated || json.Unmarshal([]byte(body), &m) != nil || m.Token == "" {
			t.Fatalf("POST /alice/tokens = %d %s", code, body)
		}
		return m.Token, m.ID
	}
	keep, _ := mint()
	leaked, leakedID := mint()
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	before, err := os.ReadFile(filepath.Join(s.state, "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	free := s.fillState()

	code, body := s.adminDo("DELETE", "/alice/tokens/"+leakedID, nil)
	var ans struct {
		Revoked string
		Stored  *bool
		Error   string
	}
	_ = json.Unmarshal([]byte(body), &ans)
	if code != http.StatusInternalServerError || ans.Revoked != leakedID || ans.Stored == nil || *ans.Stored || !strings.Contains(ans.Error, "restart") {
		t.Errorf("DELETE /alice/tokens/%s on a full disk = %d %s; want 500 saying it is revoked, not stored, and a restart would open it again", leakedID, code, body)
	}
	if code, _, body := s.mcpPost("alice", mcpInit, bearer(leaked)...); code != http.StatusUnauthorized {
		t.Errorf("the token revoked on a full disk = %d %s; want 401", code, body)
	}
	if code, _, body := s.mcpPost("alice", mcpInit, bearer(keep)...); code != http.StatusOK {
		t.Errorf("the token kept = %d %s; want 200", code, body)
	}
	if code, body := s.adminDo("GET", "/alice/tokens", nil); code != http.StatusOK || !strings.Contains(body, `"revoked_not_stored"`) || !strings.Contains(body, leakedID) {
		t.Errorf("GET /alice/tokens on a full disk = %d %s; want %s listed as revoked, not stored", code, body, leakedID)
	}
	if after, _ := os.ReadFile(filepath.Join(s.state, "tokens.json")); string(after) != string(before) {
		t.Errorf("the tokens file changed on a full disk:\n%s\nwant\n%s", after, before)
	}

	free()
	waitFor(t, "the revocation stored", 30e9, func() bool {
		_, body := s.adminDo("GET", "/alice/tokens", nil)
		return !strings.Contains(body, "revoked_not_stored")
	})
	s.stopToybox()
	s.startToybox()
	waitFor(t, "alice serving again", 30e9, func() bool {
		code, _, _ := s.mcpPost("alice", mcpInit, bearer(keep)...)
		return code == http.StatusOK
	})
	if code, _, body := s.mcpPost("alice", mcpInit, bearer(leaked)...); code != http.StatusUnauthorized {
		t.Errorf("after a restart the revoked token = %d %s; want 401", code, body)
	}
}
