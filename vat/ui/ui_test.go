package ui

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toybox/vat/activity"
	"toybox/vat/notices"
	"toybox/vat/store"
	"toybox/vat/supervisor"
	"toybox/vat/switches"
)

// newUI is a UI over a supervisor with no vats (nothing is launched).
func newUI(t *testing.T) *UI {
	t.Helper()
	return newUIWith(t, nil)
}

// newUIWith is newUI with its records to log.
func newUIWith(t *testing.T, log *slog.Logger) *UI {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(store.Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := switches.New(switches.Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(supervisor.Config{Store: st, Switches: sw})
	if err != nil {
		t.Fatal(err)
	}
	u, err := New(Config{Supervisor: sup, Activity: activity.New(), Notices: notices.New(notices.Config{Switches: sw}), Switches: sw, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func do(h http.Handler, method, target string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Host = "toybox" // as toybox's CLI and curl --unix-socket http://toybox/ send
	for k, v := range hdr {
		if k == "Host" {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	if body != "" {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func adminHandler(u *UI) http.Handler {
	mux := http.NewServeMux()
	u.Mount(mux)
	mux.Handle("/", http.NotFoundHandler())
	return AdminGuard(mux)
}

func TestAdminGuard(t *testing.T) {
	h := adminHandler(newUI(t))
	tests := []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"curl on the socket", map[string]string{"Host": "toybox"}, http.StatusOK},
		{"a forward on localhost", map[string]string{"Host": "localhost:8788", "Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"a loopback address", map[string]string{"Host": "127.0.0.1:8788"}, http.StatusOK},
		{"typed in the address bar", map[string]string{"Host": "[::1]:8788", "Sec-Fetch-Site": "none"}, http.StatusOK},
		{"a rebound name", map[string]string{"Host": "evil.example:8788"}, http.StatusForbidden},
		{"another site's page", map[string]string{"Host": "localhost:8788", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"a sibling site", map[string]string{"Host": "localhost:8788", "Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"another origin", map[string]string{"Host": "localhost:8788", "Origin": "http://evil.example"}, http.StatusForbidden},
		{"an opaque origin", map[string]string{"Host": "localhost:8788", "Origin": "null"}, http.StatusForbidden},
		{"its own origin", map[string]string{"Host": "localhost:8788", "Origin": "http://localhost:8788"}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := do(h, "GET", "/ui/", tt.hdr, "").Code; got != tt.want {
				t.Errorf("GET /ui/ with %v = %d; want %d", tt.hdr, got, tt.want)
			}
		})
	}
}

func TestFixItPostsNeedTheirToken(t *testing.T) {
	u := newUI(t)
	h := adminHandler(u)
	form := url.Values{"ref": {strings.Repeat("a", 32)}}
	if got := do(h, "POST", "/ui/fixit", nil, form.Encode()).Code; got != http.StatusForbidden {
		t.Errorf("a card without the CSRF token = %d; want 403", got)
	}
	form.Set("csrf", u.csrfToken())
	w := do(h, "POST", "/ui/fixit", nil, form.Encode())
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "out of date") {
		t.Errorf("a forged card = %d %q; want 409, out of date", w.Code, w.Body.String())
	}
	form.Set("lang", "es")
	if w := do(h, "POST", "/ui/fixit", nil, form.Encode()); !strings.Contains(w.Body.String(), "desactualizada") {
		t.Errorf("a forged card, in Spanish: %q", w.Body.String())
	}
	if got := do(h, "POST", "/ui/wall", nil, url.Values{"vat": {"nobody"}, "csrf": {u.csrfToken()}}.Encode()).Code; got != http.StatusNotFound {
		t.Errorf("Wall it again for no vat = %d; want 404", got)
	}
}

func TestPageNamesAreNoVats(t *testing.T) {
	h := adminHandler(newUI(t))
	if got := do(h, "PUT", "/ui", nil, "").Code; got != http.StatusBadRequest {
		t.Errorf("PUT /ui = %d; want 400", got)
	}
	if got := do(h, "GET", "/ui", nil, "").Code; got != http.StatusMovedPermanently {
		t.Errorf("GET /ui = %d; want a redirect to /ui/", got)
	}
	if w := do(h, "GET", "/ui/?lang=es", nil, ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `lang="es"`) || !strings.Contains(w.Body.String(), "No hay ningún vat instalado.") {
		t.Errorf("GET /ui/?lang=es = %d %s", w.Code, w.Body.String())
	}
}

func TestStatusHandler(t *testing.T) {
	u := newUI(t)
	const addr = "127.0.0.1:8788"
	token := strings.Repeat("7", 64)
	h := u.StatusHandler(addr, token)
	host := map[string]string{"Host": addr}
	if got := do(h, "GET", "/metrics", host, "").Code; got != http.StatusUnauthorized {
		t.Errorf("no token = %d; want 401", got)
	}
	// The cookie is sent to /ui/ only: / sends a browser there.
	if w := do(h, "GET", "/", map[string]string{"Host": addr, "Accept": "text/html"}, ""); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/" {
		t.Errorf("GET / = %d to %q; want a redirect to /ui/", w.Code, w.Header().Get("Location"))
	}
	bearer := map[string]string{"Host": addr, "Authorization": "Bearer " + token}
	// Every answer that shows a vat's strings is read as its type only.
	for _, path := range []string{"/metrics", "/ui/status.json", "/ui/"} {
		if w := do(h, "GET", path, bearer, ""); w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s = %d with X-Content-Type-Options %q; want nosniff", path, w.Code, w.Header().Get("X-Content-Type-Options"))
		}
	}
	if w := do(h, "GET", "/metrics", bearer, ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "toybox_vats") {
		t.Errorf("the bearer token = %d", w.Code)
	} else if b := w.Body.String(); !strings.Contains(b, "toybox_package_installs{state=\"preparing\"} 0\n") || !strings.Contains(b, "toybox_package_installs{state=\"waiting\"} 0\n") {
		t.Errorf("the metrics give no package installs preparing and waiting:\n%s", b)
	}
	if got := do(h, "GET", "/metrics", map[string]string{"Host": "evil.example:8788", "Authorization": "Bearer " + token}, "").Code; got != http.StatusMisdirectedRequest {
		t.Errorf("a foreign Host = %d; want 421", got)
	}
	if got := do(h, "POST", "/ui/fixit", bearer, "").Code; got == http.StatusOK || got == http.StatusSeeOther {
		t.Errorf("a Fix-it post on the --status listener = %d; want refused (it only shows)", got)
	}
	w := do(h, "POST", "/ui/login", host, url.Values{"token": {token}}.Encode())
	cookies := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Value == token || cookies[0].Path != "/ui/" {
		t.Fatalf("sign-in = %d %+v; want a redirect and an HttpOnly, SameSite=Strict cookie for /ui/ that is not the token", w.Code, cookies)
	}
	r := httptest.NewRequest("GET", "/ui/", nil)
	r.Host = addr
	r.AddCookie(cookies[0])
	rw := httptest.NewRecorder()
	h.ServeHTTP(rw, r)
	if rw.Code != http.StatusOK || !strings.Contains(rw.Body.String(), "toybox status") {
		t.Errorf("the page with the cookie = %d", rw.Code)
	}
	if got := do(h, "POST", "/ui/login", host, url.Values{"token": {"wrong"}}.Encode()); got.Code != http.StatusUnauthorized || len(got.Result().Cookies()) != 0 {
		t.Errorf("a wrong token = %d; want 401 and no cookie", got.Code)
	}
}

// TestWrongSignInsAreBounded: any local user can post wrong tokens to the
// --status listener as fast as it answers; each one was a record, enough
// to push the supervisor's own past journald's rate limit for the unit.
func TestWrongSignInsAreBounded(t *testing.T) {
	var out bytes.Buffer
	u := newUIWith(t, slog.New(slog.NewJSONHandler(&out, nil)))
	const addr = "127.0.0.1:8788"
	h := u.StatusHandler(addr, strings.Repeat("7", 64))
	const tries = 500
	for range tries {
		if got := do(h, "POST", "/ui/login", map[string]string{"Host": addr}, url.Values{"token": {"wrong"}}.Encode()).Code; got != http.StatusUnauthorized {
			t.Fatalf("a wrong token = %d; want 401", got)
		}
	}
	records := strings.Count(out.String(), "a sign-in with a wrong token")
	if records == 0 || records > wrongSignInBurst+5 {
		t.Errorf("%d wrong sign-ins made %d records; want some, at most about %d", tries, records, wrongSignInBurst)
	}
	time.Sleep(1100 * time.Millisecond / wrongSignInRate)
	out.Reset()
	do(h, "POST", "/ui/login", map[string]string{"Host": addr}, url.Values{"token": {"wrong"}}.Encode())
	if !strings.Contains(out.String(), `"unlogged":`) {
		t.Errorf("the record after the flood = %s; want it to count those not logged", out.String())
	}
}

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	tok, err := LoadToken(dir)
	if err != nil || len(tok) != 64 {
		t.Fatalf("LoadToken = %q, %v", tok, err)
	}
	fi, _ := os.Stat(filepath.Join(dir, TokenFile))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", fi.Mode().Perm())
	}
	if again, _ := LoadToken(dir); again != tok {
		t.Error("a second load made a new token")
	}
	_ = os.Chmod(filepath.Join(dir, TokenFile), 0o644)
	if _, err := LoadToken(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a token others may read: %v; want refused", err)
	}
	for _, bad := range []string{"0.0.0.0:1", "10.0.0.5:1", "localhost:1", "127.0.0.1"} {
		if CheckStatusAddr(bad) == nil {
			t.Errorf("CheckStatusAddr(%q) accepted", bad)
		}
	}
	if err := CheckStatusAddr("[::1]:8788"); err != nil {
		t.Error(err)
	}
}

func TestRemedy(t *testing.T) {
	got := remedy("bad", "its wall could not be built: execvp /x/toybox-entry: Permission denied (its mode -rw------- does not let uid 7 execute it (fix: chmod a+x))", "en")
	if !strings.HasPrefix(got, "chmod a+x. ") || !strings.Contains(got, "POST /bad/restart") {
		t.Errorf("remedy = %q", got)
	}
	if got := remedy("bad", "no fix named", "es"); !strings.Contains(got, "POST /bad/restart") {
		t.Errorf("remedy (es) = %q", got)
	}
}

// TestLimitsCPUWords: one CPU reads "1 CPU" (every vat's default), more
// or less than one reads "CPUs".
func TestLimitsCPUWords(t *testing.T) {
	u := &UI{}
	tests := []struct {
		name, lang string
		cpus       float64
		want       string
	}{
		{"one", "en", 1, "1 CPU"},
		{"two", "en", 2, "2 CPUs"},
		{"half", "en", 0.5, "0.5 CPUs"},
		{"one es", "es", 1, "1 CPU"},
		{"two es", "es", 2, "2 CPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := supervisor.Status{PID: 1, Limits: &supervisor.InForce{CPUs: tt.cpus}}
			if got := u.limits(st, tt.lang); len(got) != 1 || got[0] != tt.want {
				t.Errorf("limits(cpus %g, %s) = %q; want [%q]", tt.cpus, tt.lang, got, tt.want)
			}
		})
	}
}
