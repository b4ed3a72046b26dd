package owner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
)

// dockerViewPath is what DockerView lets through: the ping, the version and
// the container list, versioned or not.
var dockerViewPath = regexp.MustCompile(`^(/v[0-9]{1,2}\.[0-9]{1,3})?/(_ping|version|containers/json)$`)

// DockerView returns an HTTP handler that forwards to the Docker Engine on
// the unix socket upstream only what the listener-owner check asks:
// GET/HEAD /_ping, GET /version and GET /containers/json (each also under
// /vX.Y/). Everything else — creating, starting, inspecting a container
// (whose environment holds secrets), exec, images, volumes — is answered
// 403 with a message saying why.
//
// Access to the Docker socket is root's in all but name, so the process that
// asks (the switchboard) should not hold it: run DockerView in a small
// process that may open the socket, serve it on a unix socket only the
// switchboard's user can open, and point Config.DockerHost there. Each
// refusal is logged on log (nil = discard).
func DockerView(upstream string, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: "docker"})
			r.Out.Host = "docker"
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", upstream)
			},
			DisableCompression: true,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("docker view: upstream", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
			dockerViewError(w, http.StatusBadGateway, fmt.Sprintf("docker view: docker engine unreachable: %v", err))
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		ok := dockerViewPath.MatchString(path) && r.URL.RawPath == "" &&
			(r.Method == http.MethodGet || (r.Method == http.MethodHead && strings.HasSuffix(path, "/_ping")))
		if !ok {
			log.Warn("docker view: refused", slog.String("method", r.Method), slog.String("path", path))
			dockerViewError(w, http.StatusForbidden, fmt.Sprintf("docker view: %s %s is not allowed: only the container list is readable here", r.Method, path))
			return
		}
		r.Body = http.NoBody
		r.ContentLength = 0
		proxy.ServeHTTP(w, r)
	})
}

// dockerViewError answers the way the Engine does, so the docker client shows
// the message.
func dockerViewError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}
