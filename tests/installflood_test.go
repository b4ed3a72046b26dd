//go:build linux

package tests

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/vat/packages/npmtest"
)

// TestAttackInstallFlood: package installs ran at once without bound.
// Each held a prepare folder of up to 2872 MiB of the state disk, a wall
// of the memory limit and npm's processes, so an owner firing many PUT
// /<vat>?package= at once multiplied all of it. Here toybox serve
// prepares two at a time (--installs 2) and lets one wait
// (--install-queue 1), and four installs come at once. The loopback
// registry holds every request for the package's document until the
// fourth install has its answer, so each install preparing holds its
// prepare folder meanwhile. Never more than two ask the registry at
// once, there are never more than two prepare folders, the fourth is
// refused with 429 and Retry-After, and the three others install.
func TestAttackInstallFlood(t *testing.T) {
	const (
		n      = 4
		bound  = 2
		queued = 1
	)
	reg := startHoldingRegistry(t)
	s := newStack(t, stackOpts{extra: []string{"--npm-registry", reg.URL, "--installs", fmt.Sprint(bound), "--install-queue", fmt.Sprint(queued)}})
	client := s.adminClient()
	client.Timeout = 10 * time.Minute // two turns of installs, each some npm steps in walls

	type answer struct {
		i, code    int
		retryAfter string
		body       string
	}
	answers := make(chan answer, n)
	for i := range n {
		go func() {
			a := answer{i: i}
			req, err := http.NewRequestWithContext(context.Background(), "PUT", fmt.Sprintf("http://toybox/flood%d?package=npm:tb-mcp-hello@1.0.0", i), nil)
			if err != nil {
				a.body = err.Error()
				answers <- a
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				a.body = err.Error()
				answers <- a
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			a.code, a.retryAfter, a.body = resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
			answers <- a
		}()
	}
	// Until more than the bound ask the registry, or the bound do and one
	// install has its answer.
	var got []answer
	folders := 0
	waitFor(t, "the installs to prepare or be answered", 3*time.Minute, func() bool {
		select {
		case a := <-answers:
			got = append(got, a)
		default:
		}
		h, _ := reg.counts()
		if h > bound || (h == bound && len(got) > 0) {
			ents, _ := os.ReadDir(filepath.Join(s.state, "prepare"))
			folders = len(ents)
			return true
		}
		return false
	})
	reg.open()
	for len(got) < n {
		got = append(got, <-answers)
	}
	_, m := reg.counts()
	if m > bound || folders > bound {
		t.Errorf("%d installs at once: %d asked the registry at once, %d prepare folders; want at most %d", n, m, folders, bound)
	}
	refused, installed := 0, 0
	for _, a := range got {
		switch {
		case a.code == http.StatusTooManyRequests && a.retryAfter != "" && strings.Contains(a.body, "too many package installs at once"):
			refused++
		case a.code == http.StatusCreated || a.code == http.StatusServiceUnavailable: // installed; 503: installed, off
			installed++
		default:
			t.Errorf("install flood%d = %d %s (Retry-After %q)", a.i, a.code, a.body, a.retryAfter)
		}
	}
	if refused != n-bound-queued || installed != bound+queued {
		t.Errorf("%d installs at once: %d refused with 429 and Retry-After, %d installed; want %d and %d: %+v", n, refused, installed, n-bound-queued, bound+queued, got)
	}
	if ents, err := os.ReadDir(filepath.Join(s.state, "prepare")); err != nil || len(ents) != 0 {
		t.Errorf("%d prepare folders after the installs (%v); want none", len(ents), err)
	}
}

// TestShutdownDuringPackageInstall: toybox gets SIGTERM while a package
// install prepares (npm in its prepare wall, its registry request held).
// Shutdown did not wait for the prepare: the client's connection was cut
// without an answer, and the prepare folder (its loop-mounted image, its
// run tmpfs) was left behind for the next start. Here the prepare is
// cancelled: the client gets 503 saying nothing of the install is kept,
// toybox stops with no mount or prepare folder left, the prepare wall's
// registry request ends with it, and after a restart the vat is not
// there.
func TestShutdownDuringPackageInstall(t *testing.T) {
	reg := startHoldingRegistry(t)
	s := newStack(t, stackOpts{extra: []string{"--npm-registry", reg.URL}})
	client := s.adminClient()
	client.Timeout = 2 * time.Minute
	type answer struct {
		code int
		body string
	}
	answers := make(chan answer, 1)
	go func() {
		req, err := http.NewRequestWithContext(context.Background(), "PUT", "http://toybox/alice?package=npm:tb-mcp-hello@1.0.0", nil)
		if err != nil {
			answers <- answer{body: err.Error()}
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			answers <- answer{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answers <- answer{resp.StatusCode, string(b)}
	}()
	waitFor(t, "the install's prepare wall asking the registry", 3*time.Minute, func() bool {
		held, _ := reg.counts()
		return held == 1
	})

	s.stopToybox()
	select {
	case a := <-answers:
		if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "nothing of it is kept") {
			t.Errorf("the install toybox stopped during = %d %s; want 503 saying nothing of it is kept", a.code, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Error("the install toybox stopped during had no answer 10s after toybox stopped")
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(b), s.state+"/") {
		var left []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, s.state+"/") {
				left = append(left, line)
			}
		}
		t.Errorf("toybox stopped leaving mounts in its state dir:\n%s", strings.Join(left, "\n"))
	}
	if ents, _ := os.ReadDir(filepath.Join(s.state, "prepare")); len(ents) != 0 {
		t.Errorf("toybox stopped leaving %d prepare folders", len(ents))
	}
	waitFor(t, "the prepare wall's registry request to end", 10*time.Second, func() bool {
		held, _ := reg.counts()
		return held == 0
	})

	s.startToybox()
	if code, body := s.adminDo("GET", "/alice", nil); code != http.StatusNotFound {
		t.Errorf("GET /alice after a restart = %d %s; want 404 (the install was not kept)", code, body)
	}
}

// holdingRegistry is a loopback npm registry (npmtest's, with the
// fixtures tb-greeting 1.0.0 and 1.1.0 and tb-mcp-hello published) that
// holds each request for tb-mcp-hello's document until open is called or
// the test ends.
type holdingRegistry struct {
	*npmtest.Registry
	gate chan struct{}
	once sync.Once

	mu         sync.Mutex
	held, most int // requests held now, and the most at once
}

func startHoldingRegistry(t *testing.T) *holdingRegistry {
	t.Helper()
	h := &holdingRegistry{Registry: npmtest.Start(t), gate: make(chan struct{})}
	t.Cleanup(h.open)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tb-mcp-hello" {
			h.mu.Lock()
			h.held++
			h.most = max(h.most, h.held)
			h.mu.Unlock()
			select {
			case <-h.gate:
			case <-r.Context().Done():
			}
			h.mu.Lock()
			h.held--
			h.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	h.URL = "http://" + l.Addr().String() + "/" // the tarballs' addresses: this holding registry's
	for _, f := range []string{"tb-greeting-1.0.0", "tb-greeting-1.1.0", "tb-mcp-hello"} {
		h.Publish(t, npmtest.Pack(t, npmtest.Fixture(f)))
	}
	return h
}

// open lets every request held go, and every later one through.
func (h *holdingRegistry) open() { h.once.Do(func() { close(h.gate) }) }

// counts returns the requests held now, and the most held at once.
func (h *holdingRegistry) counts() (held, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held, h.most
}
