package supervisor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/labels"
	"toybox/vat/edge"
	"toybox/vat/store"
	"toybox/vat/switches"
	"toybox/vat/words"
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
		_, _, err = s.Install(InstallRequest{ID: labels.VatID(id), Code: code})
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
					_, _ = s.Restart(labels.VatID(id)) // may be absent: ErrNoVat is fine
				case 2:
					_ = s.Remove(labels.VatID(id), false)
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
		if !strings.Contains(string(b), "TOYBOX_VAT="+string(v.ID)) {
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
	shutdownAtEnd(t, s)
	return s, st, dir
}

// shutdownAtEnd shuts s down when the test ends and waits for its vats to
// end. Not with t.Context(): that is cancelled before cleanups run, so
// Shutdown returned at once with its vats still stopping. An unwalled vat
// that ended then killed every process of its uid, the uid the next test's
// first vat was given too (TestMCPNotReady's 503 while "restarting").
func shutdownAtEnd(t *testing.T, s *Supervisor) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown at the test's end: %v", err)
		}
	})
}

// started starts s for the test and shuts it down at the test's end. Start
// builds the walls' /etc in the background; started waits for that build,
// which the state dir's removal must not race.
func started(t *testing.T, s *Supervisor, st *store.Store) {
	t.Helper()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, s)
	if err := s.walls.PrepareEtcView(st.StateDir()); err != nil {
		t.Fatal(err)
	}
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
