package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"toybox/labels"
	"toybox/vat/store"
	"toybox/vat/switches"
	"toybox/vat/wall"
)

func newTestSupervisor(t *testing.T) *Supervisor {
	t.Helper()
	s, _ := testSupervisorWith(t, nil)
	return s
}

// noWallSupervisor is testSupervisorWith whose launches all fail ("no wall
// in this test"), each spec given to launched first (if not nil).
func noWallSupervisor(t *testing.T, launched func(wall.Spec)) (*Supervisor, *store.Store) {
	t.Helper()
	return testSupervisorWith(t, func(c *Config) {
		c.Launch = func(_ context.Context, spec wall.Spec, _ *slog.Logger) (Process, error) {
			if launched != nil {
				launched(spec)
			}
			return nil, errors.New("no wall in this test")
		}
	})
}

// testSupervisorWith is a supervisor over a fresh store (which it returns
// too), its Config changed by mod first.
func testSupervisorWith(t *testing.T, mod func(*Config)) (*Supervisor, *store.Store) {
	t.Helper()
	st, err := store.Open(store.Config{StateDir: t.TempDir(), MaxBody: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := switches.New(switches.Config{StateDir: st.StateDir()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: st, Switches: sw, UIDBase: testUIDBase, Hosts: testHosts(t)}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

func TestAdminRefusals(t *testing.T) {
	s := newTestSupervisor(t)
	h := s.AdminHandler()
	tests := []struct {
		name, method, target, body string
		code                       int
		want                       string
	}{
		{"bad id", "PUT", "/Bad_ID", "#!/bin/sh\n", 400, "vat id"},
		{"unknown vat", "GET", "/nobody", "", 404, "no such vat"},
		{"unknown op", "POST", "/nobody/explode", "", 405, "not an admin operation"},
		// A 405 says what there is instead.
		{"unknown op names the ops", "POST", "/alice/stop", "", 405, "POST /alice/stop is not an admin operation: a vat's are GET /<vat>/logs, POST /<vat>/restart, /limits, /walls, GET and POST /<vat>/tokens (docs/manifest.md)"},
		{"wrong method names the method", "GET", "/alice/restart", "", 405, "GET /alice/restart is not an admin operation: /<vat>/restart takes POST"},
		{"wrong method on a vat", "POST", "/alice", "", 405, "POST /alice is not an admin operation: /<vat> takes GET, PUT, PATCH, DELETE"},
		// An answer reads as it is written: curl shows "<", not "\u003c".
		{"unknown op read as written", "POST", "/nobody/a&b", "", 405, `"POST /nobody/a&b is not an admin operation:`},
		{"too deep", "GET", "/a/b/c", "", 404, "no such admin path"},
		{"grant without switchboard", "PUT", `/erin?egress={"host":"example.com"}`, "#!/bin/sh\n", 400, "no switchboard"},
		{"bad grant", "PUT", `/erin?egress={"vat":"x"}`, "#!/bin/sh\n", 400, "egress"},
		{"env twice", "PUT", `/erin?env={"K":"a"}&env={"K":"b"}`, "#!/bin/sh\n", 400, `given 2 times; give it once`},
		{"egress twice", "PUT", `/erin?egress=&egress={"host":"example.com"}`, "#!/bin/sh\n", 400, `given 2 times; give it once`},
		{"body too large", "PUT", "/erin", "#!" + strings.Repeat("x", 1<<16), 400, "larger than"},
		{"bad walls choice", "POST", "/erin/walls?walled=maybe", "", 400, "walled=true"},
		{"list", "GET", "/", "", 200, "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "http://toybox"+tt.target, strings.NewReader(tt.body))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("%s %s = %d %s; want %d mentioning %q", tt.method, tt.target, rec.Code, rec.Body, tt.code, tt.want)
			}
			// Unescaped, it is JSON all the same: no browser reads it as a page.
			if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("%s %s: X-Content-Type-Options = %q; want nosniff", tt.method, tt.target, got)
			}
		})
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://toybox/alice/restart", nil))
	if got := rec.Header().Get("Allow"); got != "POST" {
		t.Errorf("GET /alice/restart: Allow = %q; want POST", got)
	}
	ents, err := os.ReadDir(s.cfg.Store.StateDir() + "/code")
	if err != nil || len(ents) != 0 {
		t.Errorf("code/ after refusals = %v, %v; want empty", ents, err)
	}
}

// TestAdminRefusesBadVatID: the admin API is where a vat id enters. A bad
// one is refused on every path that names a vat, with 400 and the one
// message labels.ParseVatID gives, before any handler runs.
func TestAdminRefusesBadVatID(t *testing.T) {
	s := newTestSupervisor(t)
	h := s.AdminHandler()
	for _, id := range []string{"Bad_ID", "-x", "a.b", "a%20b", strings.Repeat("a", 64)} {
		raw, _ := url.PathUnescape(id)
		_, perr := labels.ParseVatID(raw)
		if perr == nil {
			t.Fatalf("ParseVatID(%q) took it; the test needs a bad id", raw)
		}
		want := fmt.Errorf("%w: %w", ErrBadInput, perr).Error()
		for _, mt := range []struct{ method, path string }{
			{"GET", "/" + id},
			{"PUT", "/" + id},
			{"PATCH", "/" + id + "?egress="},
			{"DELETE", "/" + id},
			{"GET", "/" + id + "/logs"},
			{"POST", "/" + id + "/restart"},
			{"POST", "/" + id + "/limits"},
			{"POST", "/" + id + "/walls?walled=true"},
			{"GET", "/" + id + "/tokens"},
			{"POST", "/" + id + "/tokens"},
			{"DELETE", "/" + id + "/tokens/t1"},
			{"POST", "/" + id + "/explode"},
		} {
			req := httptest.NewRequest(mt.method, "http://toybox"+mt.path, strings.NewReader("#!/bin/sh\n"))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var body struct{ Error string }
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusBadRequest || body.Error != want {
				t.Errorf("%s %s = %d %s; want 400 {\"error\": %q}", mt.method, mt.path, rec.Code, rec.Body, want)
			}
		}
	}
	if got := s.List(); len(got) != 0 {
		t.Errorf("vats after refusals = %+v; want none", got)
	}
}

func TestPublicUnknownVat(t *testing.T) {
	s := newTestSupervisor(t)
	for _, target := range []string{"/", "/nobody/x", "/NOT_AN_ID/"} {
		rec := httptest.NewRecorder()
		s.PublicHandler().ServeHTTP(rec, httptest.NewRequest("GET", "http://x"+target, nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d; want 404", target, rec.Code)
		}
	}
}

// TestLogsAreTextOnly: a vat's log is its own bytes, which may be a page
// it wrote: through a forward of the admin socket, a browser that sniffed
// it as HTML would run it on the origin of the Fix-it buttons.
func TestLogsAreTextOnly(t *testing.T) {
	s, st := noWallSupervisor(t, nil)
	code, err := st.Put(strings.NewReader("#!/bin/sh\necho '<script>alert(1)</script>'\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _ = s.Install(InstallRequest{ID: "page", Code: code})
	rec := httptest.NewRecorder()
	s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "http://toybox/page/logs", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /page/logs = %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Errorf("GET /page/logs: Content-Type %q, X-Content-Type-Options %q; want text/plain, nosniff", rec.Header().Get("Content-Type"), got)
	}
}
