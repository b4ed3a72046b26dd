package supervisor

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"toybox/tests/testenv"
	"toybox/vat/wall/cgroup"
)

// TestStartRemovesLeftoverCgroups: a supervisor killed outright leaves its
// walls' cgroups (a wall removes its own only when the supervisor sees it
// end), with whatever still ran in them. The next supervisor of the state
// dir ends those processes and removes the groups before any vat starts,
// also the group of a vat that will not start again.
func TestStartRemovesLeftoverCgroups(t *testing.T) {
	rnd := make([]byte, 6)
	_, _ = rand.Read(rnd)
	name := "toybox-test-" + hex.EncodeToString(rnd)
	dead := cgroup.Open(cgroup.Config{Name: name})
	t.Cleanup(dead.Close)
	if !dead.Support().Has(cgroup.Tasks) {
		testenv.Unavailable(t, "no cgroups for walls here: "+dead.Support().Missing[cgroup.Tasks])
	}
	g, err := dead.New("gone", cgroup.Limits{Tasks: 16})
	if err != nil {
		t.Fatal(err)
	}
	left := exec.Command("sleep", "600")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() { _ = left.Wait(); close(ended) }()
	t.Cleanup(func() { _ = left.Process.Kill(); <-ended })
	if err := g.Add(left.Process.Pid); err != nil {
		t.Fatal(err)
	}
	dirs := g.Dirs()

	next := cgroup.Open(cgroup.Config{Name: name})
	s, st := testSupervisorWith(t, func(c *Config) { c.Cgroups = next })
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	// Start builds the walls' /etc in the background; the state dir's
	// removal must not race it.
	if err := s.walls.PrepareEtcView(st.StateDir()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Error("a process left in a dead supervisor's wall cgroup still runs after Start")
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the leftover cgroup %s is still there (%v)", d, err)
		}
	}
}
