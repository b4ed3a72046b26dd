package supervisor

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toybox/vat/words"
)

// TestNotAnsweringIsSaid: an app that stops accepting on its socket (here
// the socket is moved away while the app runs) kept its serving word while
// every visitor got a 502. The first request that finds nothing accepting
// turns the word into NotAnswering with the reason; the first one the app
// accepts again brings its word back.
func TestNotAnsweringIsSaid(t *testing.T) {
	s, st, _ := unwalledSupervisor(t, time.Second)
	code := storeFile(t, st, shellScriptApp(t))
	if _, _, err := s.Install(InstallRequest{ID: "deaf", Code: code}); err != nil {
		t.Fatal(err)
	}
	pub := s.PublicHandler()
	get := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		pub.ServeHTTP(w, httptest.NewRequest("GET", "/deaf/", nil))
		return w
	}
	status := func() Status {
		t.Helper()
		st, err := s.Status("deaf")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if w := get(); w.Code != http.StatusOK {
		t.Fatalf("before: %d %s", w.Code, w.Body)
	}
	serving := status().Status
	if serving != words.NotWalledOperator.String() {
		t.Fatalf("before: status %q; want %q", serving, words.NotWalledOperator)
	}

	sock := filepath.Join(st.RunDir("deaf"), "app.sock")
	if err := os.Rename(sock, sock+".aside"); err != nil {
		t.Fatal(err)
	}
	if w := get(); w.Code != http.StatusBadGateway {
		t.Fatalf("with its socket gone: %d %s; want 502", w.Code, w.Body)
	}
	got := status()
	if got.Status != words.NotAnswering.String() || !strings.Contains(got.LastError, "stopped answering on $TOYBOX_LISTEN") || !strings.Contains(got.LastError, "no such file") {
		t.Errorf("with its socket gone: status %q, last error %q; want %q and why", got.Status, got.LastError, words.NotAnswering)
	}
	if got.PID == 0 {
		t.Errorf("with its socket gone: pid 0; the app still runs")
	}

	if err := os.Rename(sock+".aside", sock); err != nil {
		t.Fatal(err)
	}
	if w := get(); w.Code != http.StatusOK {
		t.Fatalf("with its socket back: %d %s", w.Code, w.Body)
	}
	if got := status().Status; got != serving {
		t.Errorf("with its socket back: status %q; want %q again", got, serving)
	}
}
