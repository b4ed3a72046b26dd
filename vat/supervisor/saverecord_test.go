package supervisor

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// TestFailedNewInstallRetiresItsFolders: a new vat whose record could not
// be saved was forgotten, but its data folder stayed with the uid it had
// been given, free again for the next vat installed, until the supervisor
// restarted. Its folders are retired, as at a removal: data to root, run
// folder gone.
func TestFailedNewInstallRetiresItsFolders(t *testing.T) {
	testenv.RequireRoot(t)
	s, st := noWallSupervisor(t, nil)
	code, err := st.Put(strings.NewReader("#!/bin/sh\nexit 0\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	noRecords(t, st)
	if _, _, err := s.Install(InstallRequest{ID: "lost", Code: code}); err == nil || !strings.Contains(err.Error(), "saving the vat record") {
		t.Fatalf("Install = %v; want a failure to save the record", err)
	}
	fi, err := os.Lstat(st.DataDir("lost"))
	if err != nil {
		t.Fatal(err)
	}
	if sys := fi.Sys().(*syscall.Stat_t); sys.Uid != 0 || sys.Gid != 0 {
		t.Errorf("data folder of the failed install belongs to %d:%d; want root", sys.Uid, sys.Gid)
	}
	if _, err := os.Lstat(st.RunDir("lost")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run folder of the failed install: %v; want it gone", err)
	}
}

// TestUpgradeWhoseRecordCannotBeSavedIs500: an upgrade whose record the
// host could not save rolls back, as one whose new version does not come
// up does, but the admin API blamed the request for it (400 "upgrade
// refused"): it is the host's failure, a 500 "upgrade failed".
func TestUpgradeWhoseRecordCannotBeSavedIs500(t *testing.T) {
	s, st, _ := unwalledSupervisor(t, time.Second)
	code := storeFile(t, st, shellScriptApp(t))
	if _, _, err := s.Install(InstallRequest{ID: "keep", Code: code}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(shellScriptApp(t))
	if err != nil {
		t.Fatal(err)
	}
	noRecords(t, st)
	w := httptest.NewRecorder()
	body := append(b, []byte("# v2\n")...)
	s.AdminHandler().ServeHTTP(w, httptest.NewRequest("PUT", "/keep", bytes.NewReader(body)))
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "upgrade failed") || !strings.Contains(w.Body.String(), "saving the vat record") {
		t.Errorf("PUT of an upgrade whose record cannot be saved = %d %s; want 500 naming why", w.Code, w.Body)
	}
	if st, err := s.Status("keep"); err != nil || st.Code != code.Ref() {
		t.Errorf("after the failed upgrade: %v, code %s; want the old version (%s)", err, st.Code, code.Ref())
	}
}
