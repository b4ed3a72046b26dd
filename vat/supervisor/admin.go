package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"toybox/labels"
	"toybox/vat/access"
	"toybox/vat/manifest"
	"toybox/vat/store"
	"toybox/vat/strictjson"
)

// AdminHandler serves the admin API (see docs/manifest.md and the README):
//
//	PUT    /<vat>[?egress=<grant>][&env=<JSON object>][&sha256=<hex>][&mcp=stdio|http][&listen=PORT][&memory_mib=N][&cpus=X][&disk_mib=N]  install or upgrade
//	PATCH  /<vat>?egress=<grant> change its grant while it runs (so does PUT with only ?egress= and no body)
//	GET    /                     every vat's status
//	GET    /<vat>                one vat's status
//	GET    /<vat>/logs           the tail of its output
//	POST   /<vat>/restart        restart it (also revives an off vat)
//	POST   /<vat>/walls?walled=false|true   the owner's choice, then restart
//	POST   /<vat>/limits[?memory_mib=N][&cpus=X][&disk_mib=N]   the owner's limits, then restart
//	POST   /<vat>/tokens         mint a bearer token for its MCP endpoint (shown once);
//	                             body {"env": {...}}: its own secrets (docs/mcp.md)
//	GET    /<vat>/tokens         its tokens' ids
//	DELETE /<vat>/tokens/<id>    revoke one
//	DELETE /<vat>[?purge=1]      stop and remove it (data kept unless purge)
//
// Answers are JSON; errors are {"error": "..."} with 400 for bad input.
// Slashes at either end of the path are ignored. The checks run in order:
//  1. a path of more than three segments, or of three not under tokens: 404;
//  2. a vat id that is not valid: 400;
//  3. a method the path does not take: 405.
func (s *Supervisor) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	// A GET pattern takes HEAD too; the admin API answers HEAD nowhere.
	get := func(pattern string, h http.Handler) {
		mux.Handle("GET "+pattern, h)
		mux.Handle("HEAD "+pattern, notAdmin(pattern))
	}
	get("/{$}", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.List())
	}))
	mux.Handle("/{$}", notAdmin("/{$}"))
	mux.Handle("PUT /{vat}", withVat(func(w http.ResponseWriter, r *http.Request, id labels.VatID) {
		if onlyEgress(r) {
			s.handleRegrant(w, r, id)
			return
		}
		s.handleInstall(w, r, id)
	}))
	mux.Handle("PATCH /{vat}", withVat(s.handleRegrant))
	get("/{vat}", withVat(s.handleStatus))
	mux.Handle("DELETE /{vat}", withVat(s.handleRemove))
	get("/{vat}/logs", withVat(s.handleLogs))
	mux.Handle("POST /{vat}/restart", withVat(s.handleRestart))
	mux.Handle("POST /{vat}/limits", withVat(s.handleLimits))
	mux.Handle("POST /{vat}/walls", withVat(s.handleWalls))
	mux.Handle("POST /{vat}/tokens", withVat(s.handleMint))
	get("/{vat}/tokens", withVat(s.handleTokens))
	mux.Handle("DELETE /{vat}/tokens/{token}", withVat(s.handleRevoke))
	for _, p := range []string{"/{vat}", "/{vat}/{op}", "/{vat}/tokens/{token}"} {
		mux.Handle(p, notAdmin(p))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		if len(parts) > 3 || len(parts) == 3 && parts[1] != "tokens" {
			writeErr(w, http.StatusNotFound, fmt.Errorf("no such admin path %q", r.URL.Path))
			return
		}
		mux.ServeHTTP(w, adminRequest(r, parts))
	})
}

// adminPathKey is the context key of the path an admin request came with
// (the mux sees its canonical form, adminRequest).
type adminPathKey struct{}

// adminRequest is r with its path the canonical form of parts: one slash
// before each, every segment escaped. So the mux matches what the owner
// sent and never redirects (a segment "." or ".." included).
func adminRequest(r *http.Request, parts []string) *http.Request {
	raw := make([]string, len(parts))
	for i, p := range parts {
		raw[i] = url.PathEscape(p)
		if p == "." || p == ".." {
			raw[i] = strings.Repeat("%2E", len(p))
		}
	}
	r2 := r.WithContext(context.WithValue(r.Context(), adminPathKey{}, r.URL.Path))
	u := *r.URL
	u.Path, u.RawPath = "/"+strings.Join(parts, "/"), "/"+strings.Join(raw, "/")
	r2.URL = &u
	r2.RequestURI = u.RequestURI()
	return r2
}

// adminPath is the path admin request r came with.
func adminPath(r *http.Request) string {
	if p, ok := r.Context().Value(adminPathKey{}).(string); ok {
		return p
	}
	return r.URL.Path
}

// withVat serves a request for one vat, {vat} in the pattern, once its id
// parses. The admin API is where an id enters: the handlers and the
// Supervisor's methods take the parsed labels.VatID.
func withVat(h func(w http.ResponseWriter, r *http.Request, id labels.VatID)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := labels.ParseVatID(r.PathValue("vat"))
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: %w", ErrBadInput, err))
			return
		}
		h(w, r, id)
	})
}

// notAdmin answers a method that the path of pattern does not take: 405,
// after the vat id is checked.
func notAdmin(pattern string) http.Handler {
	if pattern == "/{$}" {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeErr(w, http.StatusMethodNotAllowed, fmt.Errorf("%s / is not allowed (GET lists the vats)", r.Method))
		})
	}
	return withVat(func(w http.ResponseWriter, r *http.Request, _ labels.VatID) {
		hint := ": a vat's are GET /<vat>/logs, POST /<vat>/restart, /limits, /walls, GET and POST /<vat>/tokens (docs/manifest.md)"
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		path := "/<vat>"
		switch {
		case len(parts) == 3:
			path = "/<vat>/tokens/<id>"
		case len(parts) == 2:
			path = "/<vat>/" + parts[1]
		}
		if methods, ok := adminMethods[path]; ok {
			w.Header().Set("Allow", methods)
			hint = ": " + path + " takes " + methods
		}
		writeErr(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s is not an admin operation%s", r.Method, adminPath(r), hint))
	})
}

// adminMethods are the methods each admin path takes, as AdminHandler
// serves them: a 405 names them.
var adminMethods = map[string]string{
	"/<vat>":             "GET, PUT, PATCH, DELETE",
	"/<vat>/logs":        "GET",
	"/<vat>/restart":     "POST",
	"/<vat>/limits":      "POST",
	"/<vat>/walls":       "POST",
	"/<vat>/tokens":      "GET, POST",
	"/<vat>/tokens/<id>": "DELETE",
}

func (s *Supervisor) handleStatus(w http.ResponseWriter, _ *http.Request, id labels.VatID) {
	st, err := s.Status(id)
	if err != nil {
		writeErr(w, http.StatusNotFound, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Supervisor) handleRemove(w http.ResponseWriter, r *http.Request, id labels.VatID) {
	purge := r.URL.Query().Get("purge") == "1"
	if err := s.Remove(id, purge); err != nil {
		writeErr(w, statusFor(err), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "removed": true, "purged": purge})
}

func (s *Supervisor) handleLogs(w http.ResponseWriter, _ *http.Request, id labels.VatID) {
	b, err := s.Logs(id)
	if err != nil {
		writeErr(w, http.StatusNotFound, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff") // the vat's own bytes: never read as a page
	_, _ = w.Write(b)
}

func (s *Supervisor) handleRestart(w http.ResponseWriter, _ *http.Request, id labels.VatID) {
	st, err := s.Restart(id)
	if err != nil {
		writeErr(w, statusFor(err), err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Supervisor) handleLimits(w http.ResponseWriter, r *http.Request, id labels.VatID) {
	q := r.URL.Query()
	if err := onlyParams(q, limitParams...); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	l, _, err := parseLimits(q)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	st, err := s.SetLimits(id, l)
	if err != nil {
		writeErr(w, statusFor(err), err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Supervisor) handleWalls(w http.ResponseWriter, r *http.Request, id labels.VatID) {
	var walled bool
	switch r.URL.Query().Get("walled") {
	case "true", "1":
		walled = true
	case "false", "0":
	default:
		writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: want ?walled=true or ?walled=false", ErrBadInput))
		return
	}
	st, err := s.SetWalled(id, walled)
	if err != nil {
		writeErr(w, statusFor(err), err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Supervisor) handleTokens(w http.ResponseWriter, _ *http.Request, id labels.VatID) {
	infos, err := s.Tokens(id)
	if err != nil {
		writeErr(w, statusFor(err), err)
		return
	}
	out := map[string]any{"id": id, "tokens": infos}
	if ids := s.tokens.Unstored(string(id)); len(ids) > 0 {
		// Revoked, opening nothing, but a restart now would open them.
		out["revoked_not_stored"] = ids
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Supervisor) handleRevoke(w http.ResponseWriter, r *http.Request, id labels.VatID) {
	info, err := s.RevokeToken(id, r.PathValue("token"))
	if errors.Is(err, access.ErrNotStored) {
		// In effect, not stored: a failure all the same, for a restart
		// now would open the token again.
		writeJSON(w, http.StatusInternalServerError, map[string]any{"id": id, "revoked": info.ID, "stored": false, "error": err.Error()})
		return
	}
	if err != nil {
		writeErr(w, statusFor(err), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "revoked": info.ID})
}

// InstallResult is what PUT /<vat> answers.
type InstallResult struct {
	Status
	Upgraded bool `json:"upgraded"`
}

func (s *Supervisor) handleInstall(w http.ResponseWriter, r *http.Request, id labels.VatID) {
	start := time.Now()
	q := r.URL.Query()
	if q.Has("package") {
		s.handlePackage(w, r, id, start) // docs/packages.md
		return
	}
	if err := onlyParams(q, append([]string{"egress", "env", "sha256", "mcp", "listen"}, limitParams...)...); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	onlyNew, err := onlyNewVat(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	lim, limSent, err := parseLimits(q)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	egress := q.Get("egress")
	if egress != "" {
		// Refuse a bad grant before reading the body.
		if _, err := labels.ParseGrant(egress); err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: %w: egress: %w", ErrBadInput, manifest.ErrBadGrant, err))
			return
		}
	}
	var env map[string]string
	if q.Has("env") {
		dec := json.NewDecoder(strings.NewReader(q.Get("env")))
		if err := dec.Decode(&env); err != nil || env == nil || dec.More() {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: env must be a JSON object of strings, such as {\"API_KEY\":\"...\"}", ErrBadInput))
			return
		}
		// A key twice would run with the last value, unlike a manifest.
		if err := strictjson.Keys([]byte(q.Get("env")), nil); err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: env: %w", ErrBadInput, err))
			return
		}
	}
	if q.Has("mcp") {
		// Refuse a bad value before reading the body.
		if _, err := manifest.ParseMCPQuery(q.Get("mcp")); err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: %w", ErrBadInput, err))
			return
		}
	}
	req := InstallRequest{ID: id, Egress: egress, EgressSent: q.Has("egress"), Env: env, Limits: lim, LimitsSent: limSent, MCP: q.Get("mcp"), MCPSent: q.Has("mcp"), OnlyNew: onlyNew}
	if q.Has("listen") {
		// Refuse a bad value before reading the body.
		l, err := manifest.ParseListenQuery(q.Get("listen"))
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: %w", ErrBadInput, err))
			return
		}
		req.Listen, req.ListenSent = l.Port, true
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.Store.MaxBody())
	code, err := s.cfg.Store.Put(body, q.Get("sha256"), func(c store.Code) error {
		req.Code = c
		return s.Check(req)
	})
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			err = fmt.Errorf("%w: the body is larger than %d bytes", store.ErrTooLarge, s.cfg.Store.MaxBody())
		}
		writeErr(w, statusFor(err), err)
		return
	}
	req.Code = code
	s.installAndAnswer(w, req, start)
}

// installAndAnswer installs req (its code stored), counts the install
// from start, and answers: 201 installed, 200 upgraded, 503 installed off.
func (s *Supervisor) installAndAnswer(w http.ResponseWriter, req InstallRequest, start time.Time) {
	st, outcome, err := s.Install(req)
	s.observer().Installed(string(req.ID), time.Since(start), err == nil && outcome != InstalledOff)
	if err != nil {
		writeErr(w, statusFor(err), err)
		return
	}
	res := InstallResult{Status: st, Upgraded: outcome == Upgraded}
	switch outcome {
	case Installed:
		writeJSON(w, http.StatusCreated, res)
	case Upgraded:
		writeJSON(w, http.StatusOK, res)
	default:
		writeJSON(w, http.StatusServiceUnavailable, res)
	}
}

// onlyNewVat reads PUT /<vat>'s If-None-Match: "*" installs only a vat
// that is not there (RFC 9110, 13.1.2); 412 if one is. A vat has no
// entity tag, so any other value is refused rather than guessed at.
func onlyNewVat(r *http.Request) (bool, error) {
	vs := r.Header.Values("If-None-Match")
	switch {
	case len(vs) == 0:
		return false, nil
	case len(vs) == 1 && strings.TrimSpace(vs[0]) == "*":
		return true, nil
	}
	return false, fmt.Errorf("%w: If-None-Match: only * is understood (install only a vat that is not there)", ErrBadInput)
}

// onlyParams refuses a parameter not in allowed, and one given twice:
// which one would count is a guess the owner should not have to make (Go
// takes the first; other readers the last).
func onlyParams(q url.Values, allowed ...string) error {
	for k, vs := range q {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("%w: unknown parameter %q (want %s)", ErrBadInput, k, strings.Join(allowed, ", "))
		}
		if len(vs) > 1 {
			return fmt.Errorf("%w: parameter %q given %d times; give it once", ErrBadInput, k, len(vs))
		}
	}
	return nil
}

// MintResult is what POST /<vat>/tokens answers: the token, once.
type MintResult struct {
	Token string `json:"token"`
	access.Info
	Vat string `json:"vat"`
	// Use says how a client sends it.
	Use string `json:"use"`
}

// MintRequest is the optional body of POST /<vat>/tokens.
type MintRequest struct {
	// Env is the token's own environment (R22): set only in the processes
	// that serve it, each name one the vat's manifest declares.
	Env map[string]string `json:"env,omitempty"`
}

// maxMintBody bounds POST /<vat>/tokens' body: the secrets' bound and room
// for JSON's escapes.
const maxMintBody = 4 * maxSecretsBytes

func (s *Supervisor) handleMint(w http.ResponseWriter, r *http.Request, id labels.VatID) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxMintBody+1))
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err))
		return
	}
	var req MintRequest
	if len(bytes.TrimSpace(body)) > 0 {
		switch {
		case len(body) > maxMintBody:
			writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: the body is over %d bytes", ErrBadInput, maxMintBody))
			return
		case strictjson.Keys(body, []string{"env"}) != nil:
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: the body: %w", ErrBadInput, strictjson.Keys(body, []string{"env"})))
			return
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: the body: want {\"env\": {\"NAME\": \"value\"}}: %w", ErrBadInput, err))
			return
		}
	}
	token, info, err := s.MintToken(id, req.Env)
	if err != nil {
		writeErr(w, statusFor(err), err)
		return
	}
	writeJSON(w, http.StatusCreated, MintResult{
		Token: token, Info: info, Vat: string(id),
		Use: "Authorization: Bearer <token> on every request to /" + string(id) + "/mcp; shown once, only its hash is kept",
	})
}

func statusFor(err error) int {
	switch {
	case errors.Is(err, ErrNoVat), errors.Is(err, access.ErrNoToken):
		return http.StatusNotFound
	case errors.Is(err, access.ErrTooMany):
		return http.StatusConflict
	case errors.Is(err, ErrExists):
		return http.StatusPreconditionFailed
	case errors.Is(err, ErrShutdown):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrBusy):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrBadInput), errors.Is(err, ErrNotReady),
		errors.Is(err, store.ErrBadBundle), errors.Is(err, store.ErrTooLarge),
		errors.Is(err, store.ErrDigestMismatch), errors.Is(err, store.ErrBadID),
		errors.Is(err, manifest.ErrBadManifest), errors.Is(err, manifest.ErrBadGrant):
		return http.StatusBadRequest
	}
	if errors.Is(err, ErrUpgradeRefused) {
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff") // a vat's or a package's strings may be in it
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// An operator reads these with curl: "<token>" reads as written, not
	// "\u003ctoken\u003e". No answer is served as HTML (application/json).
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
