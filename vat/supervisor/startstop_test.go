package supervisor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"toybox/labels"
	"toybox/tests/testenv"
)

// TestUnwalledLeavesNoProcess: an unwalled app has no PID namespace to
// end its children with it. One that starts a daemon in its own session
// (setsid, out of the app's process group) and exits left the daemon
// running after the vat was gone: under its uid, which the next vat
// installed may get. Every process of the vat's own uid ends with its app.
func TestUnwalledLeavesNoProcess(t *testing.T) {
	testenv.RequireRoot(t)
	s, st, dir := unwalledSupervisor(t, time.Second)
	script := filepath.Join(dir, "daemonize.sh")
	arg := "6000." + strconv.Itoa(os.Getpid()) // a sleep no one else runs
	marker := "sleep\x00" + arg
	body := "#!/bin/sh\nsetsid sleep " + arg + " </dev/null >/dev/null 2>&1 &\n" +
		"sleep " + arg + " </dev/null >/dev/null 2>&1 &\nsleep 0.2\nexit 1\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	stat, _, _ := s.Install(InstallRequest{ID: "daemons", Code: storeFile(t, st, script)})
	if stat.UID <= 0 {
		t.Fatalf("status %+v: want the vat's own uid", stat)
	}
	time.Sleep(2 * time.Second) // it ran, exited and was restarted at least once
	if err := s.Remove("daemons", true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range leftovers(marker) {
			_ = syscallKill(pid)
		}
	})
	testenv.WaitFor(t, 30*time.Second, func() error {
		if left := leftovers(marker); len(left) > 0 {
			return fmt.Errorf("%d processes the vat started outlived it: %v", len(left), left)
		}
		return nil
	})
}

// leftovers lists the processes whose command line starts with marker.
func leftovers(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.HasPrefix(string(b), marker) {
			out = append(out, pid)
		}
	}
	return out
}

func syscallKill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// TestRemovedVatsFoldersRetired: removing a vat but keeping its data hands
// the data to root and drops its runtime folder: the vat's uid goes to the
// next vat installed, which must not own another vat's data (it did). A
// later install under the same id gets its data back. Folders an earlier
// version left under a removed vat's uid are retired at start.
func TestRemovedVatsFoldersRetired(t *testing.T) {
	testenv.RequireRoot(t)
	s, st, _ := unwalledSupervisor(t, time.Second)
	put := func(id string) Status {
		t.Helper()
		stat, _, err := s.Install(InstallRequest{ID: labels.VatID(id), Code: storeFile(t, st, shellScriptApp(t))})
		if err != nil {
			t.Fatal(err)
		}
		return stat
	}
	owner := func(p string) (int, error) {
		fi, err := os.Stat(p)
		if err != nil {
			return -1, err
		}
		return int(fi.Sys().(*syscall.Stat_t).Uid), nil
	}
	a := put("alpha")
	if u, err := owner(st.DataDir("alpha")); err != nil || u != a.UID {
		t.Fatalf("alpha's data owned by %d, %v; want its uid %d", u, err, a.UID)
	}
	if err := s.Remove("alpha", false); err != nil {
		t.Fatal(err)
	}
	if u, err := owner(st.DataDir("alpha")); err != nil || u != 0 {
		t.Errorf("a removed vat's kept data is owned by %d, %v; want root", u, err)
	}
	if _, err := os.Stat(st.RunDir("alpha")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a removed vat's runtime folder: %v; want it gone", err)
	}
	b := put("beta")
	if b.UID != a.UID {
		t.Logf("beta got uid %d, alpha had %d", b.UID, a.UID)
	}
	a2 := put("alpha")
	if u, err := owner(st.DataDir("alpha")); err != nil || u != a2.UID {
		t.Errorf("alpha installed again: its data owned by %d, %v; want its uid %d", u, err, a2.UID)
	}
	// A folder an earlier version left under a removed vat's uid.
	ghost := st.DataDir("ghost")
	if err := os.MkdirAll(filepath.Join(ghost, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(ghost, "sub"), a.UID, a.UID); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(ghost, a.UID, a.UID)
	s.retireOrphans() // as Start does
	if u, err := owner(filepath.Join(ghost, "sub")); err != nil || u != 0 {
		t.Errorf("an orphaned data folder after start is owned by %d, %v; want root", u, err)
	}
}

// TestUnusedCodeRemoved: stored code stays while a vat uses it (its record,
// another vat sharing it, the version an upgrade may roll back to, an
// install under way) and goes once none does: the version an upgrade
// replaced, a failed upgrade's code, a removed vat's code, code left by an
// earlier run. An unreadable record keeps everything.
func TestUnusedCodeRemoved(t *testing.T) {
	testenv.RequireRoot(t)
	s, st, _ := unwalledSupervisor(t, time.Second)
	h := s.AdminHandler()
	version := func(tag string) []byte { return scriptVersion(t, tag) }
	digest := digestOf
	stored := func(d string) bool {
		t.Helper()
		_, err := os.Stat(filepath.Join(st.StateDir(), "code", d))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return err == nil
	}
	put := func(id string, body []byte, want int) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "http://toybox/"+id, strings.NewReader(string(body))))
		if rec.Code != want {
			t.Fatalf("PUT /%s = %d %s; want %d", id, rec.Code, rec.Body, want)
		}
	}
	v1, v2 := version("v1"), version("v2")
	d1, d2 := digest(v1), digest(v2)

	put("alice", v1, http.StatusCreated)
	put("bob", v1, http.StatusCreated)
	put("alice", v2, http.StatusOK)
	if !stored(d1) || !stored(d2) {
		t.Fatalf("after alice's upgrade: v1 stored %v (bob runs it), v2 stored %v; want both", stored(d1), stored(d2))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, "http://toybox/bob", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("DELETE /bob = %d %s", rec.Code, rec.Body)
	}
	if stored(d1) || !stored(d2) {
		t.Errorf("after bob's removal: v1 stored %v (no vat runs it), v2 stored %v (alice runs it); want false, true", stored(d1), stored(d2))
	}

	// A failed upgrade: its code goes, the version it rolled back to stays.
	bad := []byte("#!/bin/sh\nexit 3\n")
	put("alice", bad, http.StatusBadRequest)
	if stored(digest(bad)) || !stored(d2) {
		t.Errorf("after a failed upgrade: its code stored %v, the old version's %v; want false, true", stored(digest(bad)), stored(d2))
	}
	if st, err := s.Status("alice"); err != nil || st.Code != "sha256:"+d2 {
		t.Errorf("alice after the failed upgrade: %+v, %v; want code sha256:%s", st, err, d2)
	}

	// Code stored for an install still under way (pinned by Put) stays
	// until the install releases it.
	code := storeFile(t, st, writeTemp(t, version("stored, not installed yet")))
	s.pruneCode()
	if !stored(code.Digest) {
		t.Error("code was removed while an install was under way")
	}
	st.Release(code.Digest) // as Install does when it ends

	// An unreadable record keeps every stored version.
	broken := filepath.Join(st.StateDir(), "vats", "carol.json")
	if err := os.WriteFile(broken, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.pruneCode()
	if !stored(code.Digest) {
		t.Error("unused code was removed while a record could not be read")
	}
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	s.pruneCode() // as Start does
	if stored(code.Digest) || !stored(d2) {
		t.Errorf("after a prune: the unused code stored %v, alice's %v; want false, true", stored(code.Digest), stored(d2))
	}
	ents, err := os.ReadDir(filepath.Join(st.StateDir(), "code"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != d2 {
			t.Errorf("code/ holds %s; want only alice's code", e.Name())
		}
	}
}

// scriptVersion is examples/shell-script's app with a comment line of its
// own: other bytes, another digest, the same vat.
func scriptVersion(t *testing.T, tag string) []byte {
	t.Helper()
	script, err := os.ReadFile(shellScriptApp(t))
	if err != nil {
		t.Fatal(err)
	}
	return append(script, "# "+tag+"\n"...)
}

// digestOf is the hex SHA-256 the store names b's code by.
func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "app")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRemovalThatFailsLaterStillPrunes: a removal whose record is gone
// (the vat is not installed any more) but whose data could not be kept
// still ends with its code removed, as docs/manifest.md says of every
// removal; before, it stayed until some later install, removal or start.
func TestRemovalThatFailsLaterStillPrunes(t *testing.T) {
	testenv.RequireRoot(t)
	s, st, _ := unwalledSupervisor(t, time.Second)
	h := s.AdminHandler()
	body := scriptVersion(t, "prune on a failed removal")
	d := digestOf(body)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "http://toybox/alice", strings.NewReader(string(body))))
	if rec.Code != http.StatusCreated {
		t.Fatalf("PUT /alice = %d %s", rec.Code, rec.Body)
	}
	// Its data folder is not a folder any more: Retire fails after the
	// record is removed.
	data := st.DataDir("alice")
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, "http://toybox/alice", nil))
	if rec.Code == http.StatusOK {
		t.Fatalf("DELETE /alice = %d; want the failed Retire reported", rec.Code)
	}
	if _, err := s.Status("alice"); err == nil {
		t.Fatal("alice is still installed after its record was removed")
	}
	if _, err := os.Stat(filepath.Join(st.StateDir(), "code", d)); err == nil {
		t.Errorf("the removed vat's code (sha256:%s) is still stored after its removal ended (%s)", d, strings.TrimSpace(rec.Body.String()))
	}
}

// TestInstallReleasesItsPinOnBadInput: Install releases the pin store.Put
// took whatever it answers (InstallRequest.Code says so), a refused grant
// included; otherwise that code could never be removed while the
// supervisor runs.
func TestInstallReleasesItsPinOnBadInput(t *testing.T) {
	testenv.RequireRoot(t)
	s, st, _ := unwalledSupervisor(t, time.Second)
	code := storeFile(t, st, writeTemp(t, []byte("#!/bin/sh\n# never installed\n")))
	if _, _, err := s.Install(InstallRequest{ID: "refused", Code: code, Egress: "*", EgressSent: true}); err == nil {
		t.Fatal("Install with a bad grant succeeded")
	}
	s.pruneCode()
	if _, err := os.Stat(code.Dir); err == nil {
		t.Error("code whose install was refused is still stored: its pin was never released")
	}
}

// TestStartRemovesLeftoverPrepareFolders: a package install's prepare
// folder (its tarballs, tree and bundle: up to the store's limits, more
// than once over) is removed when the install ends. A supervisor killed
// during one (by the OOM killer, say) left it for good; the next start
// removes it, before any install can run.
func TestStartRemovesLeftoverPrepareFolders(t *testing.T) {
	s, st := testSupervisorWith(t, nil)
	left := filepath.Join(st.StateDir(), "prepare", "pkg-123456")
	if err := os.MkdirAll(filepath.Join(left, "data", "tarballs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "data", "tarballs", "0.tgz"), []byte("a tarball"), 0o644); err != nil {
		t.Fatal(err)
	}
	started(t, s, st)
	if _, err := os.Stat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the leftover prepare folder after start: %v; want it removed", err)
	}
}
