// Command pagevat is a vat for the public edge's tests.
//
// Its pages keep a secret (a random value of this run) in its text, a cookie
// and local storage, and its attack page tries to read another vat's, as a
// hostile vat's script would in a visitor's browser. It also sends the
// headers a proxy in front of toybox would obey, and lists the requests it
// got.
//
//	GET /secret       the secret, as text
//	GET /             a page holding the secret (cookie pagevat_<vat>, local storage)
//	GET /attack?victim=URL&secret=URL
//	                  a page whose script, in window.attack (a promise), tries to
//	                  read the victim page, its cookies and storage, and to fetch
//	                  the secret URL; it resolves to what it got
//	GET /directives   front-proxy directives in a 103, the answer and its trailer
//	GET /seen         the request targets this run has got, one a line
//	GET /cookie       the Cookie header the request carried, as text
package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"html"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
)

// Directives are the front-proxy headers /directives sends.
var directives = []string{"X-Accel-Redirect", "X-Accel-Buffering", "X-Sendfile", "X-Lighttpd-Send-File", "X-Lighttpd-Send-Tempfile", "Set-Login"}

const attackScript = `
window.attack = (async () => {
  const q = new URLSearchParams(location.search);
  const out = {origin: String(self.origin)};
  const tryit = (k, f) => { try { out[k] = String(f()); } catch (e) { out[k] = "error: " + e.name; } };
  const frame = document.createElement("iframe");
  const loaded = new Promise(r => frame.onload = r);
  frame.src = q.get("victim");
  document.body.appendChild(frame);
  await loaded;
  tryit("page", () => frame.contentDocument.body.innerText);
  tryit("frameCookie", () => frame.contentDocument.cookie);
  tryit("frameStorage", () => JSON.stringify(frame.contentWindow.localStorage));
  tryit("cookie", () => document.cookie);
  tryit("storage", () => JSON.stringify(localStorage));
  try {
    const r = await fetch(q.get("secret"), {credentials: "include"});
    out.fetch = await r.text();
  } catch (e) { out.fetch = "error: " + e.name; }
  return JSON.stringify(out);
})();
`

func main() {
	listen, vat := os.Getenv("TOYBOX_LISTEN"), os.Getenv("TOYBOX_VAT")
	if listen == "" || vat == "" {
		log.Fatal("pagevat: TOYBOX_LISTEN and TOYBOX_VAT must be set")
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	secret := "secret-of-" + vat + "-" + hex.EncodeToString(b)
	var mu sync.Mutex
	var seen []string
	mux := http.NewServeMux()
	mux.HandleFunc("/secret", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, secret)
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "pagevat_" + vat, Value: secret, Path: "/"})
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><title>%s</title><body><p id=s>%s</p><script>try { localStorage.setItem(%q, %q) } catch (e) {}</script>",
			vat, secret, "pagevat_"+vat, secret)
	})
	mux.HandleFunc("/attack", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><title>attack by %s</title><body><script>%s</script>", html.EscapeString(vat), attackScript)
	})
	mux.HandleFunc("/directives", func(w http.ResponseWriter, r *http.Request) {
		for _, d := range directives {
			w.Header().Set(d, "/etc/shadow")
		}
		w.Header().Set("X-Kept", "early")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("X-Kept", "final")
		w.Header().Set("Trailer", strings.Join(append([]string{"X-Kept-Late"}, directives...), ", "))
		fmt.Fprint(w, "ok")
		for _, d := range directives {
			w.Header().Set(d, "/etc/shadow")
		}
		w.Header().Set("X-Kept-Late", "late")
	})
	mux.HandleFunc("/cookie", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, r.Header.Get("Cookie"))
	})
	mux.HandleFunc("/seen", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprint(w, strings.Join(seen, "\n"))
	})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/seen" {
			mu.Lock()
			seen = append(seen, r.Method+" "+r.URL.RequestURI())
			mu.Unlock()
		}
		mux.ServeHTTP(w, r)
	})
	_ = os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.Serve(l, h))
}
