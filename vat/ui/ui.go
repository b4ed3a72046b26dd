// Package ui is the operator's view of toybox.
//
// The status page (GET /ui/, server-rendered, readable with JavaScript off,
// in English and Spanish), its Fix-it cards, and the metrics (GET /metrics,
// Prometheus text). It serves the admin socket, where the Fix-it buttons
// act, and the --status listener on loopback, which only shows and needs a
// credential.
package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"toybox/labels"
	"toybox/vat/activity"
	"toybox/vat/fixit"
	"toybox/vat/grant"
	"toybox/vat/notices"
	"toybox/vat/supervisor"
	"toybox/vat/switches"
	"toybox/vat/tokens"
	"toybox/vat/words"
)

//go:embed assets
var assets embed.FS

// Config configures a UI.
type Config struct {
	// Supervisor is read for every vat, and acts for the Fix-it
	// buttons. Required.
	Supervisor *supervisor.Supervisor
	// Activity holds the vats' recent decisions. Required.
	Activity *activity.Recorder
	// Notices holds this boot's notices. Required.
	Notices *notices.Center
	// Switches say whether walls are on. Required.
	Switches *switches.Switches
	// Upstream is the supervisor's switchboard connection, asked whether
	// it answers. If nil, the page says there is none.
	Upstream *grant.Upstream
	// Fixit holds the Fix-it cards' failure records. If nil, a new set.
	Fixit *fixit.Records
	// WallTmpBytes is the size of each wall's /tmp (memory), shown for
	// a vat that runs walled. Zero: not shown.
	WallTmpBytes int64
	// Logger receives one record per Fix-it action. If nil, discarded.
	Logger *slog.Logger
	// Now returns the time. If nil, time.Now.
	Now func() time.Time
}

// UI serves the page and the metrics.
type UI struct {
	cfg    Config
	log    *slog.Logger
	tmpl   *template.Template
	secret [32]byte // per process: the CSRF token and the login cookie derive from it
	// wrongSignIns bounds the records of sign-ins with a wrong token:
	// any local user can post them, as fast as the listener answers.
	wrongSignIns *tokens.Records
}

// Sign-ins with a wrong token are logged at most this often (records a
// second, after a burst of as many); past it they are counted, and the
// next record says how many were not logged.
const (
	wrongSignInRate  = 1
	wrongSignInBurst = 10
)

// New returns a UI.
func New(cfg Config) (*UI, error) {
	if cfg.Supervisor == nil || cfg.Activity == nil || cfg.Notices == nil || cfg.Switches == nil {
		return nil, errors.New("ui: a supervisor, activity, notices and switches are required")
	}
	if cfg.Fixit == nil {
		cfg.Fixit = &fixit.Records{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t, err := template.New("page.html").Funcs(template.FuncMap{
		"t":        func(p words.Phrase, lang string) string { return p.In(lang) },
		"phrase":   phraseByName,
		"other":    func(lang string) string { return map[bool]string{true: "en", false: "es"}[lang == "es"] },
		"stamp":    func(t time.Time) string { return t.Format("2006-01-02 15:04:05Z") },
		"outcomeP": outcomePhrase,
	}).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, err
	}
	u := &UI{cfg: cfg, log: log, tmpl: t, wrongSignIns: tokens.NewRecords(wrongSignInRate, wrongSignInBurst)}
	_, _ = rand.Read(u.secret[:])
	return u, nil
}

func phraseByName(name, lang string) string {
	p, ok := phraseNames[name]
	if !ok {
		return "?" + name
	}
	return p.In(lang)
}

// phraseNames are the phrases the templates name.
var phraseNames = map[string]words.Phrase{
	"title": words.PageTitle, "notices": words.PageNotices, "nonotices": words.PageNoNotices,
	"vats": words.PageVats, "novats": words.PageNoVats, "host": words.PageHost, "word": words.PageWord,
	"tier": words.PageTier, "code": words.PageCode, "grant": words.PageGrant, "decisions": words.PageDecisions,
	"nodecisions": words.PageNoDecisions, "logtail": words.PageLogTail, "switchboard": words.PageSwitchboard,
	"walls": words.PageWalls, "fixreason": words.PageFixItReason, "fixremedy": words.PageFixItRemedy,
	"unwall": words.PageRunUnwalled, "wallagain": words.PageWallAgain, "byadmin": words.PageFixItByAdmin,
	"login": words.PageLogin, "token": words.PageToken, "asof": words.PageUpdated, "language": words.PageLanguage,
	"target": words.PageTarget, "outcome": words.PageOutcome, "reason": words.PageReason, "when": words.PageWhen,
	"nolog": words.PageNoLog, "delivered": words.PageDelivered, "notdelivered": words.PageNotDelivered,
	"back": words.PageBack, "needsadmin": words.PageCardNeedsAdmin,
}

func outcomePhrase(o, lang string) string {
	switch o {
	case "allowed":
		return words.PageAllowed.In(lang)
	case "refused":
		return words.PageRefused.In(lang)
	}
	return words.PageFailed.In(lang)
}

// langOf is the page's language: ?lang=es, else English.
func langOf(r *http.Request) string {
	if r.URL.Query().Get("lang") == "es" {
		return "es"
	}
	return "en"
}

func (u *UI) csrfToken() string { return u.derive("csrf") }

func (u *UI) derive(what string) string {
	m := hmac.New(sha256.New, u.secret[:])
	m.Write([]byte(what))
	return hex.EncodeToString(m.Sum(nil))
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// Mount adds the admin socket's routes to mux: the page with its Fix-it
// buttons, the metrics, and each vat's reach.
func (u *UI) Mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) { u.page(w, r, true, "") })
	mux.HandleFunc("GET /ui/style.css", u.style)
	mux.HandleFunc("GET /ui/status.json", u.statusJSON)
	mux.HandleFunc("POST /ui/fixit", u.runUnwalled)
	mux.HandleFunc("POST /ui/wall", u.wallAgain)
	mux.HandleFunc("GET /metrics", u.metrics)
	mux.HandleFunc("GET /{vat}/reach", u.reachOf)
	// "ui" and "metrics" name these pages, never a vat.
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	for _, p := range []string{"/ui", "/metrics"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, p+" is the operator's page on the admin socket; no vat can be called "+strings.TrimPrefix(p, "/"), http.StatusBadRequest)
		})
	}
}

func (u *UI) page(w http.ResponseWriter, r *http.Request, actions bool, msg string) {
	p := u.build(r.Context(), langOf(r))
	p.Actions, p.CSRF, p.Message = actions, u.csrfToken(), msg
	u.render(w, http.StatusOK, "page.html", p)
}

func (u *UI) render(w http.ResponseWriter, code int, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// No script runs on the page: everything is server-rendered.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// Same-origin: a form posted from the page then carries its Origin
	// (under no-referrer, Chromium sends "Origin: null").
	w.Header().Set("Referrer-Policy", "same-origin")
	w.WriteHeader(code)
	if err := u.tmpl.ExecuteTemplate(w, name, data); err != nil {
		u.log.Warn("rendering the status page", "error", err.Error())
	}
}

func (u *UI) style(w http.ResponseWriter, _ *http.Request) {
	b, _ := assets.ReadFile("assets/style.css")
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

func (u *UI) statusJSON(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff") // a vat's strings are in it
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(u.build(r.Context(), langOf(r)))
}

// checkForm reads a POSTed form and checks its CSRF token.
func (u *UI) checkForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil || !equal(r.PostForm.Get("csrf"), u.csrfToken()) {
		http.Error(w, "this form did not come from the status page (its CSRF token is missing or wrong)", http.StatusForbidden)
		return false
	}
	return true
}

func (u *UI) back(w http.ResponseWriter, r *http.Request, id string) {
	q := url.Values{}
	if lang := r.PostForm.Get("lang"); lang == "es" {
		q.Set("lang", "es")
	}
	target := "/ui/"
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	http.Redirect(w, r, target+"#vat-"+id, http.StatusSeeOther)
}

// runUnwalled is the card's "Run without the wall": the vat is read from
// the failure record the card's ref names. A ref no record has (forged,
// used, replaced, from before a restart) changes nothing; so does one
// whose vat no longer fails that way.
func (u *UI) runUnwalled(w http.ResponseWriter, r *http.Request) {
	if !u.checkForm(w, r) {
		return
	}
	lang := r.PostForm.Get("lang")
	rec, ok := u.cfg.Fixit.Take(r.PostForm.Get("ref"))
	if ok {
		st, err := u.cfg.Supervisor.Status(rec.Vat)
		ok = err == nil && st.Word() == words.OffWall && st.Code == rec.Code
	}
	if !ok {
		u.log.Warn("fix-it card refused: no current failure record for its ref")
		u.renderStale(w, lang)
		return
	}
	u.log.Warn("fix-it: run without the wall", "vat", rec.Vat, "reason", rec.Reason)
	if _, err := u.cfg.Supervisor.SetWalled(rec.Vat, false); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	u.back(w, r, string(rec.Vat))
}

func (u *UI) renderStale(w http.ResponseWriter, lang string) {
	if lang != "es" {
		lang = "en"
	}
	u.render(w, http.StatusConflict, "stale.html", map[string]string{"Lang": lang, "Message": words.PageFixItStale.In(lang)})
}

// wallAgain is "Wall it again": it can only ever set walled.
func (u *UI) wallAgain(w http.ResponseWriter, r *http.Request) {
	if !u.checkForm(w, r) {
		return
	}
	id, err := labels.ParseVatID(r.PostForm.Get("vat")) // the form is where the id enters
	if err != nil {
		http.Error(w, fmt.Errorf("%w: %w", supervisor.ErrBadInput, err).Error(), http.StatusNotFound)
		return
	}
	u.log.Info("fix-it: wall it again", "vat", id)
	if _, err := u.cfg.Supervisor.SetWalled(id, true); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, supervisor.ErrNoVat) || errors.Is(err, supervisor.ErrBadInput) {
			code = http.StatusNotFound
		}
		http.Error(w, err.Error(), code)
		return
	}
	u.back(w, r, string(id))
}

// AdminGuard wraps the whole admin API: a request a browser makes on
// another site's behalf is refused, and so is one for a Host that is not a
// local name. A browser reaches the admin socket only through a forward
// the operator made (ssh -L, socat), and then any page it shows could POST
// there (a cross-site request), or a DNS name could be rebound to the
// forward's address (a foreign Host): neither is the operator.
func AdminGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !localHost(r.Host) {
			http.Error(w, "the admin API answers only to a local name (localhost, a loopback address, or a name without dots such as toybox), not "+r.Host, http.StatusForbidden)
			return
		}
		if why := crossSite(r); why != "" {
			http.Error(w, why, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// localHost reports whether host (with its port, if any) is a name only
// this computer gives: localhost, a loopback address, or a single label.
func localHost(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.Trim(h, "[]"), ".")
	if h == "" || strings.EqualFold(h, "localhost") {
		return true
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().IsLoopback()
	}
	return !strings.Contains(h, ".")
}

// crossSite says why r was made on another site's behalf, or "".
func crossSite(r *http.Request) string {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return "refused: a request from another site (Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site") + ")"
	}
	if o := r.Header.Get("Origin"); o != "" {
		if o == "null" && r.Header.Get("Sec-Fetch-Site") == "same-origin" {
			return "" // the browser says it is this origin's own (a no-referrer page)
		}
		ou, err := url.Parse(o)
		if err != nil || o == "null" || !strings.EqualFold(ou.Host, r.Host) {
			return "refused: a request from another origin (" + o + ")"
		}
	}
	return ""
}
