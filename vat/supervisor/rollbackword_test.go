package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toybox/vat/words"
)

// TestRollbackIsNotServing: an upgrade whose new version came up but whose
// record could not be saved is rolled back; while the new version stops
// (here one deaf to SIGTERM, so the stop takes the whole grace) the vat
// said it served the new code ("not walled ...", its code the new one),
// and visitors were sent to the version being undone.
func TestRollbackIsNotServing(t *testing.T) {
	s := deafVat(t)
	old, err := s.Status("slow")
	if err != nil {
		t.Fatal(err)
	}
	app, err := os.ReadFile(shellScriptApp(t))
	if err != nil {
		t.Fatal(err)
	}
	v2 := strings.Replace(string(app), "set -eu\n", "set -eu\ntrap '' TERM\n", 1) + "# v2\n"
	code, err := s.cfg.Store.Put(strings.NewReader(v2), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	vats := filepath.Join(s.cfg.Store.StateDir(), "vats")
	if err := os.Rename(vats, vats+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vats, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(vats); _ = os.Rename(vats+".aside", vats) })
	done := make(chan error, 1)
	go func() { _, _, err := s.Install(InstallRequest{ID: "slow", Code: code}); done <- err }()
	lies := 0
	for {
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("upgrade succeeded; want it rolled back")
			}
			if lies > 2 {
				t.Errorf("the vat said %d times (every 20 ms) that it served the new code %s while the rollback stopped it", lies, code.Ref())
			}
			if st, _ := s.Status("slow"); st.Code != old.Code {
				t.Errorf("after the rollback: code %s; want %s", st.Code, old.Code)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		st, err := s.Status("slow")
		if err == nil && st.Code == code.Ref() && wordOf(st.Status).Serving() {
			lies++
		}
	}
}

func wordOf(s string) words.Word {
	for _, w := range words.All() {
		if w.String() == s {
			return w
		}
	}
	return words.Unknown
}

// TestUnrecordedInstallIsNotServing: a new vat whose app came up but whose
// record could not be saved is stopped and forgotten; while it stopped it
// said it served.
func TestUnrecordedInstallIsNotServing(t *testing.T) {
	s, st, _ := unwalledSupervisor(t, 2*time.Second)
	app, err := os.ReadFile(shellScriptApp(t))
	if err != nil {
		t.Fatal(err)
	}
	deaf := strings.Replace(string(app), "set -eu\n", "set -eu\ntrap '' TERM\n", 1)
	code, err := st.Put(strings.NewReader(deaf), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	vats := filepath.Join(st.StateDir(), "vats")
	if err := os.Rename(vats, vats+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vats, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(vats); _ = os.Rename(vats+".aside", vats) })
	done := make(chan error, 1)
	go func() { _, _, err := s.Install(InstallRequest{ID: "lost", Code: code}); done <- err }()
	lies := 0
	for {
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("install succeeded; want a failure to save its record")
			}
			if lies > 2 {
				t.Errorf("the vat said %d times (every 20 ms) that it served while it was stopped for good", lies)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if st, err := s.Status("lost"); err == nil && wordOf(st.Status).Serving() {
			lies++
		}
	}
}
