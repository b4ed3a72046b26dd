package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/vat/edge"
	"toybox/vat/store"
	"toybox/vat/switches"
)

// TestConcurrentOperations runs real (unwalled, by the kill switch) vats
// and races installs, restarts and removals of the same ids against each
// other: every operation ends, the listed state is consistent, and no
// process outlives the vat that owned it. Run it with -race.
func TestConcurrentOperations(t *testing.T) {
	s, st, _ := unwalledSupervisor(t, time.Second)
	script := shellScriptApp(t)
	put := func(id string) error {
		f, err := os.Open(script)
		if err != nil {
			return err
		}
		defer f.Close()
		code, err := st.Put(f, "", nil)
		if err != nil {
			return err
		}
		_, _, err = s.Install(InstallRequest{ID: id, Code: code})
		return err
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				id := fmt.Sprintf("v%d", i%2)
				switch (w + i) % 3 {
				case 0:
					if err := put(id); err != nil {
						t.Errorf("install %s: %v", id, err)
					}
				case 1:
					_, _ = s.Restart(id) // may be absent: ErrNoVat is fine
				case 2:
					_ = s.Remove(id, false)
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range []string{"v0", "v1"} {
		if err := put(id); err != nil {
			t.Fatalf("final install %s: %v", id, err)
		}
	}
	list := s.List()
	if len(list) != 2 {
		t.Fatalf("List = %+v; want v0 and v1", list)
	}
	for _, v := range list {
		if !v.Word().Serving() || v.PID == 0 {
			t.Errorf("%s: %s pid %d; want serving", v.ID, v.Status, v.PID)
		}
	}
	recs, _, err := st.Records()
	if err != nil || len(recs) != 2 {
		t.Errorf("records = %+v, %v; want two", recs, err)
	}
	// Each listed pid is that vat's app.
	for _, v := range list {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", v.PID))
		if err != nil {
			t.Errorf("%s: pid %d is not running: %v", v.ID, v.PID, err)
			continue
		}
		if !strings.Contains(string(b), "TOYBOX_VAT="+v.ID) {
			t.Errorf("%s: pid %d is not that vat's app", v.ID, v.PID)
		}
	}
	if err := s.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	// No app of this state dir is left anywhere (orphans of raced
	// operations included).
	time.Sleep(200 * time.Millisecond)
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if strings.Contains(string(b), "TOYBOX_DATA="+st.StateDir()+"/") {
			stat, _ := os.ReadFile(strings.TrimSuffix(p, "environ") + "stat")
			if !strings.Contains(string(stat), ") Z ") {
				t.Errorf("%s belongs to a vat of this supervisor and outlived Shutdown", p)
			}
		}
	}
}

// unwalledSupervisor is a supervisor whose vats run unwalled (the kill
// switch), in a state folder of its own (dir holds it), stopped when the
// test ends.
func unwalledSupervisor(t *testing.T, grace time.Duration) (*Supervisor, *store.Store, string) {
	t.Helper()
	return unwalledWith(t, Config{StopGrace: grace, ReadyTimeout: 10 * time.Second})
}

// unwalledWith is unwalledSupervisor with cfg (its Store, Switches and
// UIDBase are set here).
func unwalledWith(t *testing.T, cfg Config) (*Supervisor, *store.Store, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "tbx-sup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Config{StateDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := switches.New(switches.Config{Kill: "off", StateDir: st.StateDir()})
	if err != nil {
		t.Fatal(err)
	}
	// Its vats' uids are not the ones the end-to-end tests' supervisors
	// (tests/, run alongside) give theirs: an unwalled vat's processes are
	// killed by uid when it ends.
	cfg.Store, cfg.Switches, cfg.UIDBase, cfg.Hosts = st, sw, testUIDBase, testHosts(t)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	return s, st, dir
}

// testHosts are the public names the tests' requests use (httptest's
// example.com, and x).
func testHosts(t testing.TB) edge.Hosts {
	t.Helper()
	h, err := edge.ParseHosts([]string{"example.com", "x"})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// shellScriptApp is examples/shell-script's app: a tiny vat, a shell script
// serving its socket with perl.
func shellScriptApp(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(strings.TrimSpace(string(root))), "examples", "shell-script", "app.sh")
}

// storeFile stores the file at path (a bundle or a single executable) as
// code.
func storeFile(t *testing.T, st *store.Store, path string) store.Code {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code, err := st.Put(f, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// testUIDBase is this package's vats' first uid under root: a range of
// this test process's own, so that test runs side by side (other clones,
// tests/) never stop each other's vats by uid.
var testUIDBase = 1300000 + (os.Getpid()%1024)*VatIDSpan
