package supervisor

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// TestRemovalThatFailsLaterStillPrunes: a removal whose record is gone
// (the vat is not installed any more) but whose data could not be kept
// still ends with its code removed, as docs/manifest.md says of every
// removal; before, it stayed until some later install, removal or start.
func TestRemovalThatFailsLaterStillPrunes(t *testing.T) {
	testenv.RequireRoot(t)
	s, st, _ := unwalledSupervisor(t, time.Second)
	h := s.AdminHandler()
	script, err := os.ReadFile(shellScriptApp(t))
	if err != nil {
		t.Fatal(err)
	}
	body := append(append([]byte{}, script...), "# prune on a failed removal\n"...)
	sum := sha256.Sum256(body)
	d := hex.EncodeToString(sum[:])
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
// took whatever it answers (InstallRequest.Code says so), a refused vat id
// included; otherwise that code could never be removed while the
// supervisor runs.
func TestInstallReleasesItsPinOnBadInput(t *testing.T) {
	testenv.RequireRoot(t)
	s, st, _ := unwalledSupervisor(t, time.Second)
	code := storeFile(t, st, writeTemp(t, []byte("#!/bin/sh\n# never installed\n")))
	if _, _, err := s.Install(InstallRequest{ID: "Not_A_Vat", Code: code}); err == nil {
		t.Fatal("Install with a bad id succeeded")
	}
	s.pruneCode()
	if _, err := os.Stat(code.Dir); err == nil {
		t.Error("code whose install was refused is still stored: its pin was never released")
	}
}
