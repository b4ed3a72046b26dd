package supervisor

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"toybox/labels"
	"toybox/tests/testenv"
	"toybox/vat/wall"
	"toybox/vat/words"
)

// TestAdminRefusesNULInEnv: an env value holding a NUL byte can reach no
// process. It was accepted: a new vat was recorded with it and stayed off
// ("the value of FOO holds a NUL byte", from the wall), and an upgrade
// stopped the running version, failed, and started it again. It is bad
// input: 400 naming it, nothing recorded, nothing launched.
func TestAdminRefusesNULInEnv(t *testing.T) {
	var launches atomic.Int32
	s, st := noWallSupervisor(t, func(wall.Spec) { launches.Add(1) })
	b := tarBundle(t, map[string]string{
		"manifest.json": `{"command":["./app"],"env":["FOO"]}`,
		"app":           "#!/bin/sh\nexit 0\n",
	})
	target := "http://toybox/nul?env=" + url.QueryEscape(`{"FOO":"a\u0000b"}`)
	rec := httptest.NewRecorder()
	s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("PUT", target, b))
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "NUL") {
		t.Errorf("PUT with a NUL in an env value = %d %s; want 400 naming the NUL", rec.Code, rec.Body)
	}
	if recs, _, err := st.Records(); err != nil || len(recs) != 0 {
		t.Errorf("records = %v, %v; want none", recs, err)
	}
	if n := launches.Load(); n != 0 {
		t.Errorf("%d launches; want none", n)
	}
}

// tarBundle is a bundle of files (name: content, each mode 0755).
func tarBundle(t *testing.T, files map[string]string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

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
		st, err := s.Status(labels.VatID(id))
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

// TestFailedNewInstallRetiresItsFolders: a new vat whose record could not
// be saved was forgotten, but its data folder stayed with the uid it had
// been given, free again for the next vat installed, until the supervisor
// restarted. Its folders are retired, as at a removal: data to root, run
// folder gone.
func TestFailedNewInstallRetiresItsFolders(t *testing.T) {
	testenv.RequireRoot(t)
	s, st := noWallSupervisor(t, nil)
	code, err := st.Put(strings.NewReader("#!/bin/sh\nexit 0\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	noRecords(t, st)
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

// TestUpgradeWhoseRecordCannotBeSavedIs500: an upgrade whose record the
// host could not save rolls back, as one whose new version does not come
// up does, but the admin API blamed the request for it (400 "upgrade
// refused"): it is the host's failure, a 500 "upgrade failed".
func TestUpgradeWhoseRecordCannotBeSavedIs500(t *testing.T) {
	s, st, _ := unwalledSupervisor(t, time.Second)
	code := storeFile(t, st, shellScriptApp(t))
	if _, _, err := s.Install(InstallRequest{ID: "keep", Code: code}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(shellScriptApp(t))
	if err != nil {
		t.Fatal(err)
	}
	noRecords(t, st)
	w := httptest.NewRecorder()
	body := append(b, []byte("# v2\n")...)
	s.AdminHandler().ServeHTTP(w, httptest.NewRequest("PUT", "/keep", bytes.NewReader(body)))
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "upgrade failed") || !strings.Contains(w.Body.String(), "saving the vat record") {
		t.Errorf("PUT of an upgrade whose record cannot be saved = %d %s; want 500 naming why", w.Code, w.Body)
	}
	if st, err := s.Status("keep"); err != nil || st.Code != code.Ref() {
		t.Errorf("after the failed upgrade: %v, code %s; want the old version (%s)", err, st.Code, code.Ref())
	}
}

// TestConcurrentInstallsGetTheirOwnUID: two new vats installed at the same
// moment never get the same host uid (the choice is reserved before the
// record says so).
func TestConcurrentInstallsGetTheirOwnUID(t *testing.T) {
	testenv.RequireRoot(t) // a uid per vat is root mode's
	s, st := noWallSupervisor(t, nil)
	code, err := st.Put(strings.NewReader("#!/bin/sh\nexit 0\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 200 {
		ids := []string{fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, _, _ = s.Install(InstallRequest{ID: labels.VatID(id), Code: code})
			}()
		}
		close(start)
		wg.Wait()
	}
	owners := map[int][]string{}
	for _, st := range s.List() {
		owners[st.UID] = append(owners[st.UID], string(st.ID))
	}
	for uid, ids := range owners {
		if len(ids) > 1 {
			t.Errorf("uid %d is held by %v", uid, ids)
		}
	}
	if len(owners) != 400 {
		t.Errorf("%d distinct uids for 400 vats", len(owners))
	}
}

// TestInstallOnlyNew: toybox import asked GET /<vat>, then installed with
// PUT /<vat> when it was not found. Another import or install of the same
// id between the two (a package install prepares for minutes first) was
// then upgraded by this one's code, and this one's rollback removed it,
// with its data. A PUT with If-None-Match: * installs only a vat that
// is not there, checked where installs of one id are serialized: one of
// two such PUTs at once installs, the other is refused with 412 and
// changes nothing (no launch, the first's code kept). Any other
// If-None-Match is refused.
func TestInstallOnlyNew(t *testing.T) {
	var launches atomic.Int32
	s, st := noWallSupervisor(t, func(wall.Spec) { launches.Add(1) })
	h := s.AdminHandler()
	put := func(body *bytes.Buffer, inm string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("PUT", "http://toybox/twice", body)
		if inm != "" {
			req.Header.Set("If-None-Match", inm)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	bundle := func(n int) *bytes.Buffer {
		return tarBundle(t, map[string]string{
			"manifest.json": `{"command":["./app"]}`,
			"app":           fmt.Sprintf("#!/bin/sh\n# %d\nexit 0\n", n),
		})
	}
	if rec := put(bundle(0), "W/\"x\""); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "If-None-Match") {
		t.Errorf("PUT with If-None-Match: W/\"x\" = %d %s; want 400 naming the header", rec.Code, rec.Body)
	}
	const n = 4
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		b := bundle(i)
		wg.Go(func() { codes[i] = put(b, "*").Code })
	}
	wg.Wait()
	installed, refused := 0, 0
	for _, c := range codes {
		switch c {
		case http.StatusServiceUnavailable: // installed, off: no wall here
			installed++
		case http.StatusPreconditionFailed:
			refused++
		}
	}
	if installed != 1 || refused != n-1 {
		t.Fatalf("%d PUTs with If-None-Match: * at once = %v; want one installed (503: no wall here), the others 412", n, codes)
	}
	recs, _, err := st.Records()
	if err != nil || len(recs) != 1 {
		t.Fatalf("records = %v, %v; want one", recs, err)
	}
	first, launched := recs[0].Code, launches.Load()
	rec := put(bundle(9), "*")
	if rec.Code != http.StatusPreconditionFailed || !strings.Contains(rec.Body.String(), "already") {
		t.Errorf("PUT with If-None-Match: * of a vat that is there = %d %s; want 412 saying it is already there", rec.Code, rec.Body)
	}
	if recs, _, _ := st.Records(); len(recs) != 1 || recs[0].Code != first {
		t.Errorf("records after a refused PUT = %v; want the first's code %s kept", recs, first)
	}
	if got := launches.Load(); got != launched {
		t.Errorf("a refused PUT launched %d times; want none", got-launched)
	}
	// Without the header a PUT is an upgrade, as before.
	if rec := put(bundle(10), ""); rec.Code == http.StatusPreconditionFailed {
		t.Errorf("PUT without If-None-Match of a vat that is there = %d %s; want an upgrade", rec.Code, rec.Body)
	}
}

// TestRollbackSaysWhetherTheOldCameBack: an upgrade whose new version
// does not come up starts the old version again; when that one does not
// come up either, the error said "the old version runs again" all the
// same. It says what happened.
func TestRollbackSaysWhetherTheOldCameBack(t *testing.T) {
	s, st, _ := unwalledSupervisor(t, 2*time.Second)
	app, err := os.ReadFile(shellScriptApp(t))
	if err != nil {
		t.Fatal(err)
	}
	// The old version comes up once: its second start finds its mark.
	once := strings.Replace(string(app), "set -eu\n", "set -eu\nif [ \"${1:-}\" != handle ]; then\n\t[ -e \"$TOYBOX_DATA/started\" ] && { echo 'started before: failing now' >&2; exit 1; }\n\ttouch \"$TOYBOX_DATA/started\"\nfi\n", 1)
	old, err := st.Put(strings.NewReader(once), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Install(InstallRequest{ID: "once", Code: old}); err != nil {
		t.Fatal(err)
	}
	broken, err := st.Put(strings.NewReader("#!/bin/sh\necho 'v2 fails' >&2\nexit 3\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Install(InstallRequest{ID: "once", Code: broken})
	if !errors.Is(err, ErrUpgradeRefused) {
		t.Fatalf("upgrade to a version that exits = %v; want %v", err, ErrUpgradeRefused)
	}
	if strings.Contains(err.Error(), "runs again") {
		t.Errorf("the old version did not come up, but the upgrade's error says %q", err)
	}
	if n := strings.Count(err.Error(), "(exit status 3)"); n != 1 {
		t.Errorf("upgrade error = %q; want the new version's exit said once, not %d times", err, n)
	}
	if !strings.Contains(err.Error(), "did not come up either") {
		t.Errorf("upgrade error = %q; want it to say the old version did not come up either", err)
	}
	if got, _ := s.Status("once"); got.Code != old.Ref() {
		t.Errorf("after the rollback the vat's code is %s; want the old %s", got.Code, old.Ref())
	}
}
