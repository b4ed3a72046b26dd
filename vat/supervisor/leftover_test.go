package supervisor

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := leftovers(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscallKill(pid)
			}
			t.Fatalf("%d processes the vat started outlived it: %v", len(left), left)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
		stat, _, err := s.Install(InstallRequest{ID: id, Code: storeFile(t, st, shellScriptApp(t))})
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
