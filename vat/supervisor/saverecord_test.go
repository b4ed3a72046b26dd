package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"toybox/tests/testenv"
	"toybox/vat/wall"
)

// TestFailedNewInstallRetiresItsFolders: a new vat whose record could not
// be saved was forgotten, but its data folder stayed with the uid it had
// been given, free again for the next vat installed, until the supervisor
// restarted. Its folders are retired, as at a removal: data to root, run
// folder gone.
func TestFailedNewInstallRetiresItsFolders(t *testing.T) {
	testenv.RequireRoot(t)
	s, st := testSupervisorWith(t, func(c *Config) {
		c.Launch = func(context.Context, wall.Spec, *slog.Logger) (Process, error) {
			return nil, errors.New("no wall in this test")
		}
	})
	code, err := st.Put(strings.NewReader("#!/bin/sh\nexit 0\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	// No record can be saved: vats/ is a file.
	vats := filepath.Join(st.StateDir(), "vats")
	if err := os.Remove(vats); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vats, nil, 0o600); err != nil {
		t.Fatal(err)
	}
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
