package supervisor

import (
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
	code := deafCode(t, s.cfg.Store, "# v2\n")
	noRecords(t, s.cfg.Store)
	lies, err := servingWhile(s, "slow", func() error {
		_, _, err := s.Install(InstallRequest{ID: "slow", Code: code})
		return err
	}, func(st Status) bool { return st.Code == code.Ref() })
	if err == nil {
		t.Fatal("upgrade succeeded; want it rolled back")
	}
	if lies > 2 {
		t.Errorf("the vat said %d times (every 20 ms) that it served the new code %s while the rollback stopped it", lies, code.Ref())
	}
	if st, _ := s.Status("slow"); st.Code != old.Code {
		t.Errorf("after the rollback: code %s; want %s", st.Code, old.Code)
	}
}

// TestUnrecordedInstallIsNotServing: a new vat whose app came up but whose
// record could not be saved is stopped and forgotten; while it stopped it
// said it served.
func TestUnrecordedInstallIsNotServing(t *testing.T) {
	s, st, _ := unwalledSupervisor(t, 2*time.Second)
	code := deafCode(t, st, "")
	noRecords(t, st)
	lies, err := servingWhile(s, "lost", func() error {
		_, _, err := s.Install(InstallRequest{ID: "lost", Code: code})
		return err
	}, nil)
	if err == nil {
		t.Fatal("install succeeded; want a failure to save its record")
	}
	if lies > 2 {
		t.Errorf("the vat said %d times (every 20 ms) that it served while it was stopped for good", lies)
	}
}

// servingWhile runs op and, every 20 ms until it returns, reads vat id's
// status; it returns op's error and how many of those reads gave a serving
// word (and matched also, if not nil).
func servingWhile(s *Supervisor, id string, op func() error, also func(Status) bool) (int, error) {
	done := make(chan error, 1)
	go func() { done <- op() }()
	n := 0
	for {
		select {
		case err := <-done:
			return n, err
		case <-time.After(20 * time.Millisecond):
		}
		st, err := s.Status(id)
		if err == nil && wordOf(st.Status).Serving() && (also == nil || also(st)) {
			n++
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
