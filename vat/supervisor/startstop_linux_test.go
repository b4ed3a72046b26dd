package supervisor

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toybox/tests/testenv"
	"toybox/vat/wall/cgroup"
)

// TestStartEndsLeftoverWalls: bubblewrap's --die-with-parent is racy
// (containers/bubblewrap#633), so a supervisor killed while a wall was
// being set up left that wall running, reparented to init (about one kill
// in two during a start, with toybox serve): the next supervisor started
// the vat again beside it, two copies on one data folder. Start ends every
// wall of its own state dir before starting any, and leaves another state
// dir's walls alone.
func TestStartEndsLeftoverWalls(t *testing.T) {
	bwrap := testenv.RequireBwrap(t)
	s, st := testSupervisorWith(t, nil)
	code, err := st.Put(strings.NewReader("#!/bin/sh\nexit 0\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Release(code.Digest)
	other := filepath.Join(t.TempDir(), "code", strings.Repeat("ab", 32))
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	leftover := fakeWall(t, bwrap, "--ro-bind", code.Dir, code.Dir)
	// A sandbox process whose parent died before it was set up: bubblewrap
	// holding the install folder's descriptor, not yet its mount, waiting.
	// (A copy of sleep named bwrap holds it here.)
	waiting := fakeWall(t, bwrap, "--setenv", "DIR", code.Dir, "--setenv", "SLEEP", sleepAsBwrap(t))
	bystander := fakeWall(t, bwrap, "--ro-bind", other, other)
	// Any other program holding an install folder open from another mount
	// namespace (an operator's, say) is not a wall.
	reader := fakeWall(t, bwrap, "--setenv", "DIR", code.Dir)

	started(t, s, st)
	sweptOnly(t, map[string]<-chan struct{}{"a wall": leftover, "a sandbox being set up": waiting},
		map[string]<-chan struct{}{"a wall of another state dir": bystander, "a program that is not bubblewrap, for holding an install folder": reader})
}

// TestStartEndsLeftoverPrepareWalls: a package install runs npm in prepare
// walls of its own, which bind <state>/prepare/<vat>-*/code, not an
// install folder of the code store. EndLeftovers looked for install
// folders alone: a prepare wall that outlived a killed supervisor (the
// same --die-with-parent race as a vat's), or its sandbox process waiting
// before its block, ran on after the next start, which then removed the
// folders under it. Start ends those too, and leaves another state dir's
// alone.
func TestStartEndsLeftoverPrepareWalls(t *testing.T) {
	bwrap := testenv.RequireBwrap(t)
	s, st := testSupervisorWith(t, nil)
	code := filepath.Join(st.StateDir(), "prepare", "pkg-123456", "code")
	if err := os.MkdirAll(code, 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "prepare", "pkg-654321", "code")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	leftover := fakeWall(t, bwrap, "--ro-bind", code, code)
	waiting := fakeWall(t, bwrap, "--setenv", "DIR", code, "--setenv", "SLEEP", sleepAsBwrap(t))
	bystander := fakeWall(t, bwrap, "--ro-bind", other, other)

	started(t, s, st)
	sweptOnly(t, map[string]<-chan struct{}{"a prepare wall": leftover, "a prepare sandbox being set up": waiting},
		map[string]<-chan struct{}{"a prepare wall of another state dir": bystander})
}

// sweptOnly checks that Start ended each process of ended (each done
// closes when it exits) and none of spared.
func sweptOnly(t *testing.T, ended, spared map[string]<-chan struct{}) {
	t.Helper()
	for what, done := range ended {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("%s of this state dir left by an earlier supervisor still runs after Start", what)
		}
	}
	time.Sleep(200 * time.Millisecond) // long enough for the sweep to have ended them too
	for what, done := range spared {
		select {
		case <-done:
			t.Errorf("Start ended %s", what)
		default:
		}
	}
}

// sleepAsBwrap is a copy of sleep named bwrap, as a sandbox process
// waiting to be set up shows.
func sleepAsBwrap(t *testing.T) string {
	t.Helper()
	asBwrap := filepath.Join(t.TempDir(), "bwrap")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(asBwrap, b, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(filepath.Dir(asBwrap), 0o755)
	return asBwrap
}

// fakeWall starts a sandbox with the host's root and opts (a bind of an
// install folder at its own path, as a wall makes; or $DIR, which it holds
// open, running $SLEEP if set), and returns once it runs; the channel closes when it has ended.
// It is killed when the test ends.
func fakeWall(t *testing.T, bwrap string, opts ...string) <-chan struct{} {
	t.Helper()
	args := append([]string{"--unshare-user", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc"}, opts...)
	args = append(args, "--", "/bin/sh", "-c", `if [ -n "$DIR" ]; then exec 7<"$DIR"; fi; echo up; exec ${SLEEP:-sleep} 600`)
	cmd := exec.Command(bwrap, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "up\n" {
		t.Fatalf("the sandbox did not start: %q, %v", line, err)
	}
	return done
}

// TestStartRemovesLeftoverCgroups: a supervisor killed outright leaves its
// walls' cgroups (a wall removes its own only when the supervisor sees it
// end), with whatever still ran in them. The next supervisor of the state
// dir ends those processes and removes the groups before any vat starts,
// also the group of a vat that will not start again, and a prepare wall's.
func TestStartRemovesLeftoverCgroups(t *testing.T) {
	rnd := make([]byte, 6)
	_, _ = rand.Read(rnd)
	name := "toybox-test-" + hex.EncodeToString(rnd)
	dead := cgroup.Open(cgroup.Config{Name: name})
	t.Cleanup(dead.Close)
	if !dead.Support().Has(cgroup.Tasks) {
		testenv.Unavailable(t, "no cgroups for walls here: "+dead.Support().Missing[cgroup.Tasks])
	}
	var (
		dirs  []string
		ended []<-chan struct{}
	)
	// A vat's wall, and a package install's prepare wall (its id, as
	// the supervisor makes it).
	for _, id := range []string{"gone", "prepare-0123abcd"} {
		g, err := dead.New(id, cgroup.Limits{Tasks: 16})
		if err != nil {
			t.Fatal(err)
		}
		left := exec.Command("sleep", "600")
		if err := left.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = left.Wait(); close(done) }()
		t.Cleanup(func() { _ = left.Process.Kill(); <-done })
		if err := g.Add(left.Process.Pid); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, g.Dirs()...)
		ended = append(ended, done)
	}

	next := cgroup.Open(cgroup.Config{Name: name})
	s, st := testSupervisorWith(t, func(c *Config) { c.Cgroups = next })
	started(t, s, st)
	for i, done := range ended {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("a process left in a dead supervisor's wall cgroup (%d) still runs after Start", i)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the leftover cgroup %s is still there (%v)", d, err)
		}
	}
}
