package ui

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"toybox/vat/atomicfile"
)

// TokenFile is the --status listener's credential, in the state folder.
const TokenFile = "status.token"

// cookieName is the login cookie of the --status listener.
const cookieName = "toybox_status"

// cookiePath is the cookie's path: the page and its JSON, no vat's.
const cookiePath = "/ui/"

// LoadToken returns the --status listener's token from <state>/status.token,
// making one (256 random bits, mode 0600) when there is none. A file that
// others may read is refused: whoever reads it reads every vat's status.
func LoadToken(stateDir string) (string, error) {
	path := filepath.Join(stateDir, TokenFile)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		var b [32]byte
		_, _ = rand.Read(b[:])
		tok := hex.EncodeToString(b[:])
		if err := atomicfile.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("making the status token: %w", err)
		}
		return tok, nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the status token: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s may be read by others (mode %v): chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the status token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 32 {
		return "", fmt.Errorf("%s holds a token of %d characters; want at least 32 (delete it to have one made)", path, len(tok))
	}
	return tok, nil
}

// CheckStatusAddr refuses a --status address that is not a loopback
// address and port: the page shows every vat's grant and output, so it is
// never served beyond this computer.
func CheckStatusAddr(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("--status %q: want a loopback address and port, such as 127.0.0.1:8788", addr)
	}
	if !ap.Addr().Unmap().IsLoopback() {
		return fmt.Errorf("--status %q: %s is not a loopback address; the status page is served on loopback only", addr, ap.Addr())
	}
	return nil
}

// StatusHandler serves the page and the metrics read-only on the --status
// listener, whose address is addr. Every request needs the token: as
// "Authorization: Bearer <token>" (curl, Prometheus' bearer_token_file),
// or the cookie the login form sets for a browser. Why not HTTP basic
// authentication: a browser keeps basic credentials and sends them with
// every request to the origin, those another site's page makes included,
// and has no way to forget them. The cookie is SameSite=Strict and
// HttpOnly, so another site's requests carry nothing and no script reads
// it; its path is /ui/, so a vat on the public listener at the same host
// never gets it (a browser sends a host's cookies to every port). A Host other than the listener's own is refused (a DNS name rebound
// to 127.0.0.1 is another site).
func (u *UI) StatusHandler(addr, token string) http.Handler {
	mux := http.NewServeMux()
	cookie := u.derive("cookie:" + token)
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) { u.page(w, r, false, "") })
	mux.HandleFunc("GET /ui/style.css", u.style)
	mux.HandleFunc("GET /ui/status.json", u.statusJSON)
	mux.HandleFunc("GET /metrics", u.metrics)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusSeeOther) })
	hosts := statusHosts(addr)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hosts[strings.ToLower(r.Host)] {
			http.Error(w, "this listener answers only to its own address, not "+r.Host, http.StatusMisdirectedRequest)
			return
		}
		if why := crossSite(r); why != "" {
			http.Error(w, why, http.StatusForbidden)
			return
		}
		if r.URL.Path == "/ui/login" {
			u.login(w, r, token, cookie)
			return
		}
		if r.URL.Path == "/ui/style.css" || r.URL.Path == "/" {
			mux.ServeHTTP(w, r) // the login form needs it; / only sends to /ui/, where the cookie is sent
			return
		}
		if !authorized(r, token, cookie) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toybox status"`)
			// The sign-in form only where its cookie is sent.
			if strings.Contains(r.Header.Get("Accept"), "text/html") && strings.HasPrefix(r.URL.Path, cookiePath) {
				u.render(w, http.StatusUnauthorized, "login.html", map[string]string{"Lang": langOf(r)})
				return
			}
			http.Error(w, "a token is needed: Authorization: Bearer <the token in "+TokenFile+" of toybox's state folder>", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func authorized(r *http.Request, token, cookie string) bool {
	if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
		return equal(strings.TrimPrefix(a, "Bearer "), token)
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return equal(c.Value, cookie)
	}
	return false
}

func (u *UI) login(w http.ResponseWriter, r *http.Request, token, cookie string) {
	lang := langOf(r)
	switch r.Method {
	case http.MethodGet:
		u.render(w, http.StatusOK, "login.html", map[string]string{"Lang": lang})
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		if err := r.ParseForm(); err != nil || !equal(strings.TrimSpace(r.PostForm.Get("token")), token) {
			if ok, n := u.wrongSignIns.Admit(time.Now()); ok {
				attrs := []any{}
				if n > 0 {
					attrs = append(attrs, "unlogged", n)
				}
				u.log.Warn("status page: a sign-in with a wrong token", attrs...)
			}
			u.render(w, http.StatusUnauthorized, "login.html", map[string]string{"Lang": lang, "Wrong": "1"})
			return
		}
		// Path /ui/: a browser sends a host's cookies to each of its
		// ports, the public listener's too, where /<vat>/ is a vat's
		// and "ui" is never a vat.
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: cookie, Path: cookiePath, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		target := "/ui/"
		if r.PostForm.Get("lang") == "es" {
			target += "?lang=es"
		}
		http.Redirect(w, r, target, http.StatusSeeOther)
	default:
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
	}
}

// statusHosts are the Host values the listener on addr answers to.
func statusHosts(addr string) map[string]bool {
	ap := netip.MustParseAddrPort(addr)
	port := fmt.Sprint(ap.Port())
	m := map[string]bool{strings.ToLower(net.JoinHostPort(ap.Addr().String(), port)): true, "localhost:" + port: true}
	if ap.Addr().Is4() {
		m["127.0.0.1:"+port] = true
	} else {
		m["[::1]:"+port] = true
	}
	return m
}
