package supervisor

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toybox/vat/store"
	"toybox/vat/words"
)

// TestStoppingIsNotServing: while a restart or an upgrade stops the old
// app (here one that ignores SIGTERM, so the stop takes the whole grace),
// the vat's status says so and visitors get 503 with Retry-After, not the
// app that is going away and not the word of a serving vat.
func TestStoppingIsNotServing(t *testing.T) {
	s := deafVat(t)
	pub := s.PublicHandler()
	get := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		pub.ServeHTTP(w, httptest.NewRequest("GET", "/slow/", nil))
		return w
	}
	if w := get(); w.Code != http.StatusOK {
		t.Fatalf("before the restart: %d %s", w.Code, w.Body)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Restart("slow"); done <- err }()
	time.Sleep(500 * time.Millisecond) // well inside the 2 s grace
	if st, err := s.Status("slow"); err != nil || st.Status != words.Stopping.String() {
		t.Errorf("status while the old app stops: %q, %v; want %q", st.Status, err, words.Stopping)
	}
	if w := get(); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("a visit while the old app stops: %d %q; want 503 with Retry-After", w.Code, w.Body)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w := get(); w.Code != http.StatusOK {
		t.Errorf("after the restart: %d %s", w.Code, w.Body)
	}
}

// deafVat is an unwalled supervisor (grace 2 s) running vat "slow": the
// shell-script app, deaf to SIGTERM, so a stop takes the whole grace.
func deafVat(t *testing.T) *Supervisor {
	t.Helper()
	s, st, _ := unwalledSupervisor(t, 2*time.Second)
	if _, _, err := s.Install(InstallRequest{ID: "slow", Code: deafCode(t, st, "")}); err != nil {
		t.Fatal(err)
	}
	return s
}

// deafCode stores the shell-script app deaf to SIGTERM (perl inherits the
// ignored signal), so that a stop takes the whole grace; tag makes another
// version of it.
func deafCode(t *testing.T, st *store.Store, tag string) store.Code {
	t.Helper()
	app, err := os.ReadFile(shellScriptApp(t))
	if err != nil {
		t.Fatal(err)
	}
	deaf := strings.Replace(string(app), "set -eu\n", "set -eu\ntrap '' TERM\n", 1) + tag
	code, err := st.Put(strings.NewReader(deaf), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// noRecords makes every later record save of st fail (its vats folder
// becomes a file) until the test ends.
func noRecords(t *testing.T, st *store.Store) {
	t.Helper()
	vats := filepath.Join(st.StateDir(), "vats")
	if err := os.Rename(vats, vats+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vats, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(vats); _ = os.Rename(vats+".aside", vats) })
}

// TestRemovingIsNotServing: while a removal stops the app, the vat's status
// said it was still running ("walled"), and so did the 503 its visitors
// got ("vat slow is walled"). It says it is being removed.
func TestRemovingIsNotServing(t *testing.T) {
	s := deafVat(t)
	done := make(chan error, 1)
	go func() { done <- s.Remove("slow", true) }()
	time.Sleep(500 * time.Millisecond) // well inside the 2 s grace
	if st, err := s.Status("slow"); err != nil || st.Status != words.OffRemoved.String() {
		t.Errorf("status while the app stops for its removal: %q, %v; want %q", st.Status, err, words.OffRemoved)
	}
	w := httptest.NewRecorder()
	s.PublicHandler().ServeHTTP(w, httptest.NewRequest("GET", "/slow/", nil))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), words.OffRemoved.String()) {
		t.Errorf("a visit while the app stops for its removal: %d %q; want 503 saying %q", w.Code, w.Body, words.OffRemoved)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
