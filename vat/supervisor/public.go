package supervisor

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"

	"toybox/labels"
)

func newProxy(id string, t http.RoundTripper, log *slog.Logger) *httputil.ReverseProxy {
	prefix := "/" + id
	return &httputil.ReverseProxy{
		Transport:     t,
		FlushInterval: -1, // stream every write
		Rewrite: func(pr *httputil.ProxyRequest) {
			rest := strings.TrimPrefix(pr.In.URL.Path, prefix)
			rawRest := strings.TrimPrefix(pr.In.URL.EscapedPath(), prefix)
			if rest == "" || rest[0] != '/' {
				rest, rawRest = "/"+rest, "/"+rawRest
			}
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = id
			pr.Out.URL.Path = rest
			pr.Out.URL.RawPath = ""
			if rawRest != rest {
				pr.Out.URL.RawPath = rawRest
			}
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("proxy to vat failed", keyVat, id, keyErr, err)
			http.Error(w, fmt.Sprintf("vat %s did not answer: %v", id, err), http.StatusBadGateway)
		},
	}
}

// PublicHandler serves ANY /<vat>/<rest>: the vat's app, with the prefix
// stripped, X-Forwarded-* set, bodies streamed and WebSocket upgrades passed
// through. An unknown vat is 404; a vat that is not serving is 503 with its
// status word.
func (s *Supervisor) PublicHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, "/")
		id, _, _ := strings.Cut(p, "/")
		if id == "" {
			http.Error(w, "no vat named: ask for /<vat>/...", http.StatusNotFound)
			return
		}
		if !labels.ValidVatID(id) {
			http.Error(w, fmt.Sprintf("no vat %q: not a vat id", id), http.StatusNotFound)
			return
		}
		in, word, ok := s.serving(id)
		if !ok {
			http.Error(w, fmt.Sprintf("no vat %q", id), http.StatusNotFound)
			return
		}
		if in == nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("vat %s is %s", id, word), http.StatusServiceUnavailable)
			return
		}
		duplex(in.proxy).ServeHTTP(w, r)
	})
}

// duplex lets h write the response while the request body is still being
// read (HTTP/1.1 servers are half duplex by default), so a request and its
// answer can both stream.
func duplex(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		h.ServeHTTP(w, r)
	})
}
