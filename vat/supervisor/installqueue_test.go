package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"toybox/tests/testenv"
	"toybox/vat/grant"
	"toybox/vat/wall"
)

// TestInstallQueue: package installs prepared at once without bound,
// each with a prepare image of up to 2872 MiB of the state disk, a wall
// of the memory limit and npm's processes, so many PUT /<vat>?package=
// at once multiplied all of it. Here a supervisor prepares one at a time
// and lets one wait, its prepare step held until the end:
//   - a second install waits its turn; a third is refused at once with
//     429, Retry-After and the reason, and makes no prepare folder;
//   - a waiting install whose client gives up leaves the queue, so the
//     next one waits instead of being refused;
//   - the supervisor stopping ends a wait with 503 "the supervisor is
//     stopping";
//   - the status of a vat answers while installs wait (no lock held).
//
// Only the first install ever prepared.
func TestInstallQueue(t *testing.T) {
	s, p := gatedPrepares(t, 1, 1)
	h := s.AdminHandler()
	put := func(ctx context.Context, id string) *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(ctx, "PUT", "http://toybox/"+id+"?package=npm:tb-mcp-hello@1.0.0", nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	async := func(ctx context.Context, id string) <-chan *httptest.ResponseRecorder {
		ch := make(chan *httptest.ResponseRecorder, 1)
		go func() { ch <- put(ctx, id) }()
		return ch
	}
	waiting := func(want int) {
		t.Helper()
		testenv.WaitFor(t, time.Minute, func() error {
			l := p.count()
			if pr, w := s.Installs(); w != want || pr != 1 || l != 1 {
				return fmt.Errorf("%d installs preparing and %d waiting, %d prepare steps launched; want 1 preparing, %d waiting, 1 launched", pr, w, l, want)
			}
			return nil
		})
	}
	folders := func() int {
		ents, _ := os.ReadDir(s.prepareBase())
		return len(ents)
	}

	first := async(context.Background(), "first")
	testenv.WaitFor(t, time.Minute, func() error {
		if n := p.count(); n != 1 {
			return fmt.Errorf("%d prepare steps launched; want the first install's", n)
		}
		return nil
	})
	ctx, giveUp := context.WithCancel(context.Background())
	second := async(ctx, "second")
	waiting(1)
	rec := put(context.Background(), "third")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "too many package installs at once: 1 preparing and 1 waiting their turn") {
		t.Errorf("an install past the queue = %d %s (Retry-After %q); want 429 naming 1 preparing and 1 waiting, with Retry-After", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	if n := folders(); n != 1 {
		t.Errorf("%d prepare folders with one install preparing; want 1", n)
	}
	list := httptest.NewRecorder()
	h.ServeHTTP(list, httptest.NewRequest("GET", "http://toybox/", nil))
	if list.Code != http.StatusOK {
		t.Errorf("GET / while installs wait = %d %s; want 200", list.Code, list.Body)
	}

	// The second's client gives up: it leaves the queue, and the fourth
	// waits in its place.
	giveUp()
	<-second
	if _, w := s.installs.counts(); w != 0 {
		t.Errorf("%d installs waiting after the waiting one's client gave up; want 0", w)
	}
	fourth := async(context.Background(), "fourth")
	waiting(1)

	// The supervisor stops: the wait ends with its usual 503.
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if rec := <-fourth; rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "the supervisor is stopping") {
		t.Errorf("a waiting install when the supervisor stops = %d %s; want 503 the supervisor is stopping", rec.Code, rec.Body)
	}
	p.open()
	if rec := <-first; !strings.Contains(rec.Body.String(), "no wall in this test") {
		t.Errorf("the first install = %d %s; want its prepare wall's failure", rec.Code, rec.Body)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if n := p.count(); n != 1 {
		t.Errorf("%d prepare steps launched; want only the first install's", n)
	}
	if n := folders(); n != 0 {
		t.Errorf("%d prepare folders left; want none", n)
	}
}

// TestInstallQueueOnlyNew: an install with If-None-Match: * is checked
// before it waits its turn, and again when its turn comes. A vat of its
// id installed meanwhile refuses it with 412 then, before any prepare
// step: not after minutes of preparing.
func TestInstallQueueOnlyNew(t *testing.T) {
	s, p := gatedPrepares(t, 1, 0)
	h := s.AdminHandler()
	serve := func(req *http.Request) <-chan *httptest.ResponseRecorder {
		ch := make(chan *httptest.ResponseRecorder, 1)
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			ch <- rec
		}()
		return ch
	}
	first := serve(httptest.NewRequest("PUT", "http://toybox/first?package=npm:tb-mcp-hello@1.0.0", nil))
	testenv.WaitFor(t, time.Minute, func() error {
		if n := p.count(); n != 1 {
			return fmt.Errorf("%d prepare steps launched; want the first install's", n)
		}
		return nil
	})
	req := httptest.NewRequest("PUT", "http://toybox/late?package=npm:tb-mcp-hello@1.0.0", nil)
	req.Header.Set("If-None-Match", "*")
	late := serve(req)
	testenv.WaitFor(t, time.Minute, func() error {
		if _, w := s.installs.counts(); w != 1 {
			return fmt.Errorf("%d installs waiting; want the If-None-Match one", w)
		}
		return nil
	})
	// Meanwhile a bundle of the same id is installed (off: no wall here).
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("PUT", "http://toybox/late", tarBundle(t, map[string]string{
		"manifest.json": `{"command":["./app"]}`,
		"app":           "#!/bin/sh\nexit 0\n",
	})))
	if rec.Code != http.StatusCreated && rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("installing a bundle as late = %d %s; want it installed", rec.Code, rec.Body)
	}
	p.open()
	<-first
	if rec := <-late; rec.Code != http.StatusPreconditionFailed || !strings.Contains(rec.Body.String(), "already installed") {
		t.Errorf("the If-None-Match install after its turn = %d %s; want 412 already installed", rec.Code, rec.Body)
	}
	if n := p.count(); n != 1 {
		t.Errorf("%d prepare steps launched; want only the first install's", n)
	}
}

// gatedPrepare counts the prepare steps a test supervisor launched, each
// held until open.
type gatedPrepare struct {
	mu       sync.Mutex
	launched int
	gate     chan struct{}
	once     sync.Once
}

func (g *gatedPrepare) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.launched
}

func (g *gatedPrepare) open() { g.once.Do(func() { close(g.gate) }) }

// gatedPrepares returns a supervisor whose package installs prepare
// installs at once with queue waiting (0: the default), each prepare step
// held at its launch until the gate opens (it then fails: no wall here).
func gatedPrepares(t *testing.T, installs, queue int) (*Supervisor, *gatedPrepare) {
	t.Helper()
	g := &gatedPrepare{gate: make(chan struct{})}
	t.Cleanup(g.open)
	s, _ := testSupervisorWith(t, func(c *Config) {
		c.Launch = func(_ context.Context, spec wall.Spec, _ *slog.Logger) (Process, error) {
			if strings.HasPrefix(string(spec.ID), "prepare-") {
				g.mu.Lock()
				g.launched++
				g.mu.Unlock()
				<-g.gate
			}
			return nil, errors.New("no wall in this test")
		}
		c.Upstream = grant.NewUpstream(grant.UpstreamConfig{Path: filepath.Join(t.TempDir(), "switchboard.sock")})
		c.Packages = PackagesConfig{
			Registry: "http://127.0.0.1:9/", Node: "/usr/bin/node", NodeVersion: "20.0.0", NPM: "/usr/lib/node_modules/npm/bin/npm-cli.js",
			Installs: installs, InstallQueue: queue,
		}
	})
	return s, g
}

// TestShutdownDuringPrepare: toybox stops (SIGTERM: Supervisor.Shutdown)
// while a package install prepares (npm in its prepare wall). Shutdown
// returned at once, the prepare step running on, its prepare folder (and
// its file systems) in place, and the client not yet answered: after
// Shutdown nothing of toybox may run, and the install must be either
// whole or not there, the client told which. Here the prepare step is
// cancelled, Shutdown waits for it, the client gets 503 saying the
// install was cancelled and nothing of it is kept, and no prepare folder,
// record or code is left.
func TestShutdownDuringPrepare(t *testing.T) {
	var running sync.WaitGroup
	var launched, live int
	var mu sync.Mutex
	s, st := testSupervisorWith(t, func(c *Config) {
		c.Launch = func(ctx context.Context, spec wall.Spec, _ *slog.Logger) (Process, error) {
			if !strings.HasPrefix(string(spec.ID), "prepare-") {
				return nil, errors.New("no wall in this test")
			}
			running.Add(1)
			defer running.Done()
			mu.Lock()
			launched++
			live++
			mu.Unlock()
			defer func() { mu.Lock(); live--; mu.Unlock() }()
			// A prepare step that runs until it is stopped (npm fetching).
			<-ctx.Done()
			return nil, ctx.Err()
		}
		c.Upstream = grant.NewUpstream(grant.UpstreamConfig{Path: filepath.Join(t.TempDir(), "switchboard.sock")})
		c.Packages = PackagesConfig{
			Registry: "http://127.0.0.1:9/", Node: "/usr/bin/node", NodeVersion: "20.0.0", NPM: "/usr/lib/node_modules/npm/bin/npm-cli.js",
		}
	})
	t.Cleanup(running.Wait)
	// Cancelled at the end (before running.Wait): a prepare step
	// Shutdown left running ends with its client.
	reqCtx, giveUp := context.WithCancel(context.Background())
	t.Cleanup(giveUp)
	h := s.AdminHandler()
	answer := make(chan *httptest.ResponseRecorder, 1)
	var answered atomic.Bool // the handler has written its answer
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(&markedWriter{ResponseRecorder: rec, wrote: &answered}, httptest.NewRequestWithContext(reqCtx, "PUT", "http://toybox/alice?package=npm:tb-mcp-hello@1.0.0", nil))
		answer <- rec
	}()
	testenv.WaitFor(t, time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		if launched != 1 {
			return fmt.Errorf("%d prepare steps launched; want the install's", launched)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	mu.Lock()
	n := live
	mu.Unlock()
	if n != 0 {
		t.Errorf("Shutdown returned with %d prepare steps still running; want none", n)
	}
	if ents, _ := os.ReadDir(s.prepareBase()); len(ents) != 0 {
		t.Errorf("Shutdown returned with %d prepare folders left; want none", len(ents))
	}
	if !answered.Load() {
		t.Error("Shutdown returned before the install preparing was answered")
		giveUp()
	}
	// Written by now; the handler's goroutine passes it on.
	rec := <-answer
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "the supervisor is stopping") || !strings.Contains(rec.Body.String(), "nothing of it is kept") {
		t.Errorf("the install cut short by Shutdown = %d %s; want 503 saying the supervisor is stopping and nothing of it is kept", rec.Code, rec.Body)
	}
	if _, ok := s.get("alice"); ok {
		t.Error("the install cut short left a vat alice")
	}
	if _, err := os.Stat(filepath.Join(st.StateDir(), "vats", "alice.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the install cut short left a record: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(st.StateDir(), "code")); len(ents) != 0 {
		t.Errorf("the install cut short left %d code entries; want none", len(ents))
	}
}

// neverListens is a Process whose app runs until it is stopped and never
// listens.
type neverListens struct{ gone chan struct{} }

func (p *neverListens) Pid() int     { return 0 }
func (p *neverListens) Tier() string { return "walled" }
func (p *neverListens) Wait() error  { <-p.gone; return errors.New("signal: terminated") }
func (p *neverListens) Stop(time.Duration) error {
	select {
	case <-p.gone:
	default:
		close(p.gone)
	}
	return nil
}

// TestShutdownDuringInstallWaitingReady: an install whose app has not yet
// listened holds its vat's operation lock for up to ReadyTimeout, and
// Shutdown waits for that lock. Shutdown gave up at its deadline with the
// install still running, then unmounted the data folders under it: whether
// its record was saved was left to chance. The wait for the app now ends
// when the supervisor stops.
func TestShutdownDuringInstallWaitingReady(t *testing.T) {
	launched := make(chan struct{}, 1)
	s, st := testSupervisorWith(t, func(c *Config) {
		c.ReadyTimeout = time.Hour
		c.Launch = func(context.Context, wall.Spec, *slog.Logger) (Process, error) {
			select {
			case launched <- struct{}{}:
			default:
			}
			return &neverListens{gone: make(chan struct{})}, nil
		}
	})
	code, err := st.Put(strings.NewReader("#!/bin/sh\nexit 0\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		out Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, out, err := s.Install(InstallRequest{ID: "slow", Code: code})
		done <- result{out, err}
	}()
	select {
	case <-launched:
	case <-time.After(10 * time.Second):
		t.Fatal("the supervisor never launched the wall")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v after %s; want the install's wait ended by it", err, time.Since(start).Round(time.Millisecond))
	}
	// Shutdown took the vat's lock after the install let it go; the
	// install returns just after.
	select {
	case r := <-done:
		if r.err != nil || r.out != InstalledOff {
			t.Errorf("the install = outcome %v, %v; want it recorded, off", r.out, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the install was still under way 5 s after Shutdown returned")
	}
	if _, err := os.Stat(st.RecordPath("slow")); err != nil {
		t.Errorf("the install's record after Shutdown: %v; want it saved", err)
	}
}

// markedWriter is a ResponseRecorder that marks wrote once the handler has
// written its body.
type markedWriter struct {
	*httptest.ResponseRecorder
	wrote *atomic.Bool
}

func (m *markedWriter) Write(b []byte) (int, error) {
	n, err := m.ResponseRecorder.Write(b)
	m.wrote.Store(true)
	return n, err
}
