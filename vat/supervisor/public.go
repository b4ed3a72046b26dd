package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"toybox/vat/doors"
	"toybox/vat/edge"
	"toybox/vat/tokens"
)

// What one vat's app may make the supervisor hold on the public side.
const (
	// MaxVatRequests is how many public requests (WebSockets included)
	// one vat may have in flight; past it a request is answered 503 at
	// once. A vat that never answers holds at most this many of the
	// supervisor's connections, not all its descriptors.
	MaxVatRequests = 512
	// MaxClientVatRequests is how many of one vat's MaxVatRequests one
	// client (an IPv4 address or an IPv6 /64, as MaxClientConns counts
	// them; a loopback client is not counted) may hold: a request that
	// never sends its body, or a stream it opens and keeps, holds its
	// slot for as long as the client likes, and one client with
	// MaxVatRequests of them made the vat busy for everyone else.
	MaxClientVatRequests = MaxVatRequests / 8
	// maxVatHeaderBytes bounds the headers of one answer from a vat.
	maxVatHeaderBytes = 256 << 10
	// vatHeaderTimeout bounds the wait for an answer's headers (a long
	// tool call may take minutes; a streamed answer sends its headers
	// first).
	vatHeaderTimeout = 10 * time.Minute
	// bodyDrainTimeout bounds the wait for the rest of a request body
	// once its answer is written and nobody reads it: a client that is
	// done sends it at once.
	bodyDrainTimeout = 5 * time.Second
	// sendTimeout bounds each write of an answer to a client that reads
	// none of it (nginx's send_timeout). Not the whole answer's: a
	// stream may last as long as it goes on.
	sendTimeout = 60 * time.Second
)

// originWide are answer headers that act on the whole origin, which every
// vat shares on a shared origin (/<vat>/...), or on the whole site, which
// every vat's own origin shares (Clear-Site-Data's "cookies" clears the
// registrable domain's). They go on every origin, for one rule: a vat may
// not clear the others' storage, nor widen a service worker's scope beyond
// its own path, nor set the origin's policies that outlive the answer: NEL
// with Report-To (the browser then reports requests to every vat's pages,
// their URLs, to an endpoint the vat chose, for as long as max_age says,
// even after the vat is gone), Strict-Transport-Security (the whole host,
// its subdomains too with includeSubDomains), Alt-Svc (where the whole
// origin is fetched from) and Accept-CH / Critical-CH (the client hints a
// browser keeps sending to the origin, to every vat's pages). Those are
// the operator's, at the proxy in front.
var originWide = []string{"Clear-Site-Data", "Service-Worker-Allowed", "Nel", "Report-To", "Strict-Transport-Security", "Alt-Svc", "Accept-Ch", "Critical-Ch"}

// frontDirectives are answer headers that a server in front of toybox
// (nginx, Apache, lighttpd, a CDN) may take as orders to itself rather than
// pass on: X-Sendfile and lighttpd's X-Lighttpd-Send-File,
// X-Lighttpd-Send-Tempfile and X-Sendfile2 make it send a file of its own
// choosing, any file it can read. Set-Login (FedCM) sets the browser's
// login status for the whole origin. nginx's X-Accel-* family (Redirect:
// any file or internal location the front can reach; Buffering,
// Limit-Rate, Expires, Charset) goes too, by its prefix (see dropped). A
// vat gives no orders to the front.
var frontDirectives = []string{"X-Sendfile", "X-Sendfile2", "X-Lighttpd-Send-File", "X-Lighttpd-Send-Tempfile", "Set-Login"}

// dropped reports whether a vat's answer header goes before the visitor
// (or the front) sees it: one that acts on the whole origin (originWide)
// or orders the front (frontDirectives, X-Accel-*). Names compare in any
// case.
func dropped(key string) bool {
	if len(key) >= len("X-Accel-") && strings.EqualFold(key[:len("X-Accel-")], "X-Accel-") {
		return true
	}
	for _, list := range [][]string{originWide, frontDirectives} {
		for _, k := range list {
			if strings.EqualFold(k, key) {
				return true
			}
		}
	}
	return false
}

// scrubAnswer drops the dropped headers from h.
func scrubAnswer(h http.Header) {
	for k := range h {
		if dropped(k) {
			delete(h, k)
		}
	}
}

// confineCookies keeps each cookie a vat sets to itself. Every Domain
// attribute goes, so each cookie is host-only: Domain=localhost set on
// alice.localhost would reach bob.localhost, and a cookie of the shared
// origin would reach every vat's own. On a shared origin (prefix /<vat>)
// each cookie also stays below its vat's path: a Path outside /<vat>
// (Path=/, say, or none on an answer to /<vat>, whose default path is /)
// would set or overwrite another vat's cookies. Every line there gets its
// Path said again at its end (the last Path attribute is the one a
// browser uses): its own when that is below /<vat>, else /<vat>/. Every
// other attribute stays as the vat wrote it. A cookie that cannot be
// parsed is dropped.
func confineCookies(h http.Header, prefix string) {
	set := h.Values("Set-Cookie")
	if len(set) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range set {
		c, err := http.ParseSetCookie(line)
		if err != nil {
			continue
		}
		line = withoutDomain(line)
		if prefix == "" {
			h.Add("Set-Cookie", line)
			continue
		}
		// The Path is always said again, last: browsers take the last
		// Path attribute and trim spaces around its name, Go's parser
		// does not ("Path =/bob/" after "Path=/alice/" reads as /alice/
		// here and /bob/ there).
		p := c.Path
		if p != prefix && !strings.HasPrefix(p, prefix+"/") {
			p = prefix + "/"
		}
		h.Add("Set-Cookie", line+"; Path="+p)
	}
}

// withoutDomain removes every Domain attribute from a Set-Cookie line, as
// a browser splits the line: at each ';', an attribute's name trimmed of
// spaces and tabs and compared in any case.
func withoutDomain(line string) string {
	parts := strings.Split(line, ";")
	kept := parts[:1]
	for _, a := range parts[1:] {
		name, _, _ := strings.Cut(a, "=")
		if !strings.EqualFold(strings.Trim(name, " \t"), "domain") {
			kept = append(kept, a)
		}
	}
	return strings.Join(kept, ";")
}

// A vat's failed answers are logged at most this often (records per
// second, after a burst of as many); past it they are counted, and the next
// record says how many were not logged. A vat that breaks off every answer,
// or a visitor that asks one that fails, made one record per request
// (12,456 in 5 s from one client): past journald's default rate limit for
// the unit, which then drops every other record of the supervisor's.
const (
	proxyLogRate  = 20
	proxyLogBurst = 100
)

// proxyLog rate-limits one vat's proxy records.
type proxyLog struct {
	log     *slog.Logger
	id      string
	records *tokens.Records
}

func newProxyLog(log *slog.Logger, id string) *proxyLog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &proxyLog{log: log, id: id, records: tokens.NewRecords(proxyLogRate, proxyLogBurst)}
}

// warn logs msg with the vat and err, unless the vat is past its rate.
func (l *proxyLog) warn(msg, err string) {
	ok, n := l.records.Admit(time.Now())
	if !ok {
		return
	}
	attrs := []any{keyVat, l.id, keyErr, err}
	if n > 0 {
		attrs = append(attrs, "unlogged", n)
	}
	l.log.Warn(msg, attrs...)
}

// flush writes how many records went unlogged since the last one, if any
// did (when its instance ends: the count would be lost).
func (l *proxyLog) flush() {
	if n := l.records.Drain(); n > 0 {
		l.log.Warn("proxy to vat failed", keyVat, l.id, keyErr, "records not written past the rate", "unlogged", n)
	}
}

// Write takes ReverseProxy's own lines (ErrorLog: a body that broke off,
// say), which otherwise went to the standard logger, once per answer and
// without the vat's name.
func (l *proxyLog) Write(p []byte) (int, error) {
	l.warn("proxy to vat failed", strings.TrimSpace(string(p)))
	return len(p), nil
}

func newProxy(id string, t http.RoundTripper, log *slog.Logger) *httputil.ReverseProxy {
	return proxyLogged(id, t, newProxyLog(log, id))
}

// proxyLogged is newProxy with its records going through plog. Each
// request carries its edge.Route in its context (routed); one without is
// taken as /<id>/... on a shared origin.
func proxyLogged(id string, t http.RoundTripper, plog *proxyLog) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		ErrorLog:      stdlog.New(plog, "", 0),
		Transport:     confined{t},
		FlushInterval: -1, // stream every write
		ModifyResponse: func(r *http.Response) error {
			scrubAnswer(r.Header)
			rt, _ := RouteOf(r.Request) // Rewrite put it there
			confineCookies(r.Header, rt.Prefix)
			// Always: a trailer the answer never announced is read
			// into r.Trailer at the body's end all the same. (Not an
			// upgrade: its body is the connection, kept as it is.)
			scrubTrailer(r.Trailer)
			if r.StatusCode != http.StatusSwitchingProtocols {
				r.Body = &trailerScrubber{ReadCloser: r.Body, trailer: &r.Trailer}
			}
			return nil
		},
		Rewrite: func(pr *httputil.ProxyRequest) {
			rt := routeOf(pr.In, id)
			pr.Out = withRoute(pr.Out, rt)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = id
			pr.Out.URL.Path = rt.Path
			pr.Out.URL.RawPath = rt.RawPath
			pr.Out.Host = pr.In.Host
			// A visitor's word on who it is (X-Real-Ip, a CDN's or an
			// authenticating proxy's header, X_Forwarded_For that CGI
			// reads as X-Forwarded-For) is not passed on: the vat learns
			// the visitor's address from X-Forwarded-For, set here.
			for k := range pr.Out.Header {
				if doors.ForgedIdentity(http.CanonicalHeaderKey(k)) {
					delete(pr.Out.Header, k)
				}
			}
			pr.SetXForwarded()
			if rt.Prefix != "" {
				pr.Out.Header.Set("X-Forwarded-Prefix", rt.Prefix)
			}
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The visitor learns that the vat gave no usable answer, not the
			// supervisor's paths; the log has the whole error.
			plog.warn("proxy to vat failed", err.Error())
			http.Error(w, fmt.Sprintf("vat %s gave no usable answer: %s (its logs say more)", id, proxyWhy(err)), http.StatusBadGateway)
		},
	}
}

// confined is the transport to a vat's app: an informational (1xx) answer
// loses the headers that would act on other vats or order the front
// (dropped, Set-Cookie) before the proxy passes it on, and past max1xx of
// them the request fails (Go's transport counts none once a trace reads
// them). ReverseProxy passes 1xx answers on from its own client trace,
// which this hook wraps in place: one composed with it by
// httptrace.WithClientTrace would run first, but its error would be
// dropped.
type confined struct{ http.RoundTripper }

// errMany1xx ends a request whose app sent more than max1xx
// informational answers.
var errMany1xx = fmt.Errorf("more than %d informational answers", max1xx)

func (c confined) RoundTrip(r *http.Request) (*http.Response, error) {
	n := 0
	bounded := func(pass func(int, textproto.MIMEHeader) error) func(int, textproto.MIMEHeader) error {
		return func(code int, h textproto.MIMEHeader) error {
			if n++; n > max1xx {
				return errMany1xx
			}
			scrubPassing(http.Header(h))
			if pass == nil {
				return nil
			}
			return pass(code, h)
		}
	}
	if t := httptrace.ContextClientTrace(r.Context()); t != nil {
		t.Got1xxResponse = bounded(t.Got1xxResponse) // this request's own trace
		return c.RoundTripper.RoundTrip(r)
	}
	trace := &httptrace.ClientTrace{Got1xxResponse: bounded(nil)}
	return c.RoundTripper.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
}

// scrubPassing drops from a 1xx answer's headers or a trailer what would
// act on other vats or order the front: a browser may not read trailers,
// but nothing in between is bound not to.
func scrubPassing(h http.Header) {
	scrubAnswer(h)
	delete(h, "Set-Cookie")
}

// scrubTrailer scrubs a trailer, which may be nil.
func scrubTrailer(t http.Header) {
	if t != nil {
		scrubPassing(t)
	}
}

// trailerScrubber scrubs the trailer once the body has been read: the
// transport fills it in just before the body's end.
type trailerScrubber struct {
	io.ReadCloser
	trailer *http.Header
}

func (s *trailerScrubber) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if err != nil {
		scrubTrailer(*s.trailer)
	}
	return n, err
}

// Close scrubs once more: the proxy closes the body before it copies the
// trailer, however the body's end was reached.
func (s *trailerScrubber) Close() error {
	err := s.ReadCloser.Close()
	scrubTrailer(*s.trailer)
	return err
}

// PublicHandler serves the vats' apps: ANY /<vat>/<rest> on a shared
// origin (a public name, localhost, a loopback address) and ANY <rest> on
// a vat's own, <vat>.<public name> (edge.Hosts.Route decides, from
// Config.Hosts). The app sees <rest>, with X-Forwarded-* set, bodies
// streamed and WebSocket upgrades passed through. A host that is none of
// these is 403 before any vat is named; an unknown vat is 404; a vat that
// is not serving is 503 with its status word, and so is one with
// MaxVatRequests in flight. Every answer on a shared origin carries
// edge.SandboxCSP (an opaque origin), and a vat's answers lose what would
// act on other vats or order a proxy in front (see dropped and
// confineCookies). A request whose framing is in doubt (edge.Framing)
// closes its connection after its answer.
func (s *Supervisor) PublicHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt := s.cfg.Hosts.Route(r.Host, r.URL)
		aw := s.answerWriter(w, r, rt)
		defer aw.bound()
		w, r = aw, aw.req
		if rt.Origin == edge.Refused {
			if rt.Status != http.StatusForbidden && strings.HasPrefix(r.URL.Path, prmPrefix+"/") {
				// A shared origin's protected-resource metadata:
				// /.well-known/oauth-protected-resource/<vat>/mcp.
				id, tail, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, prmPrefix+"/"), "/")
				s.servePRM(w, r, id, "/"+tail)
				return
			}
			http.Error(w, rt.Reason, rt.Status)
			return
		}
		id := rt.Vat
		if rt.Origin == edge.Own && strings.HasPrefix(rt.Path, prmPrefix+"/") {
			// A vat's own origin: /.well-known/oauth-protected-resource/mcp.
			s.servePRM(w, withRoute(r, rt), id, strings.TrimPrefix(rt.Path, prmPrefix))
			return
		}
		if cfg := s.mcpConfig(id); cfg != nil {
			s.serveMCPVat(w, withRoute(r, rt), id, rt.Path, cfg)
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
		release, why := in.admit(id, requestClient(r))
		if why != "" {
			w.Header().Set("Retry-After", "1")
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		defer release()
		duplex(in.proxy).ServeHTTP(w, withRoute(r, rt))
	})
}

type routeKey struct{}

// withRoute returns r carrying rt, for the vat's proxy.
func withRoute(r *http.Request, rt edge.Route) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), routeKey{}, rt))
}

// RouteOf returns the route PublicHandler decided for r (a request it
// handed on, or its outgoing copy), and false for any other request.
func RouteOf(r *http.Request) (edge.Route, bool) {
	rt, ok := r.Context().Value(routeKey{}).(edge.Route)
	return rt, ok
}

// routeOf is RouteOf, where a request without a route (one handed to a
// vat's proxy directly) is /<id>/... on a shared origin.
func routeOf(r *http.Request, id string) edge.Route {
	if rt, ok := RouteOf(r); ok {
		return rt
	}
	rt := edge.Hosts{}.Route("localhost", r.URL)
	if rt.Vat != id {
		rt = edge.Route{Origin: edge.Shared, Vat: id, Prefix: "/" + id, Path: "/"}
	}
	return rt
}

// answerWriter wraps w so that the final answer to r says what the edge
// must: edge.SandboxCSP on any origin but a vat's own, and Connection:
// close when r's framing is in doubt (or cannot be known: a connection
// not from edge.Listener) or r's body was not read to its end. Its req is
// r with its body watched, for the handler to use.
func (s *Supervisor) answerWriter(w http.ResponseWriter, r *http.Request, rt edge.Route) *answer {
	aw := &answer{ResponseWriter: w, sandbox: rt.Origin != edge.Own, req: r, rc: http.NewResponseController(w), send: sendTimeout}
	if s.sendWait > 0 {
		aw.send = s.sendWait
	}
	// The connection's last answer left its deadline: none until this
	// one writes (a 100 Continue, say, is the server's own).
	_ = aw.rc.SetWriteDeadline(time.Time{})
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		aw.body = newWatchedBody(r.Body, w)
		aw.req = r.WithContext(r.Context())
		aw.req.Body = aw.body
	}
	if r.ProtoMajor == 1 {
		if f := edge.FramingOf(r.Context()); f == nil {
			aw.close = true
		} else if c, why := f.Next(); c {
			aw.close = true
			s.log.Debug("closing a public connection after this answer", keyReason, why, "remote", r.RemoteAddr)
		}
	}
	return aw
}

// answer sets the edge's headers on the final answer, however it is
// written: by the proxy (which clears the header map after passing on a
// 1xx answer, so headers set before it would be lost), by http.Error, or
// by a first Write.
type answer struct {
	http.ResponseWriter
	sandbox, close, final bool
	req                   *http.Request
	body                  *watchedBody // nil: the request has none
	rc                    *http.ResponseController
	send                  time.Duration // sendTimeout
}

// sending gives the next write (and the flush after it) a.send to make
// progress. A client that pipelined requests and read none of the
// answers otherwise held its connection, active, for as long as it liked
// once the socket's buffers were full.
func (a *answer) sending() { _ = a.rc.SetWriteDeadline(time.Now().Add(a.send)) }

func (a *answer) WriteHeader(code int) {
	if code < 200 {
		// Written and flushed at once. No deadline stays behind: a
		// connection hijacked later (an upgrade) must not keep one.
		a.sending()
		a.ResponseWriter.WriteHeader(code)
		_ = a.rc.SetWriteDeadline(time.Time{})
		return
	}
	if !a.final {
		a.final = true
		h := a.Header()
		if a.sandbox {
			// Added beside any policy of the vat's: every policy is
			// enforced, so the vat cannot loosen it.
			h.Add("Content-Security-Policy", edge.SandboxCSP)
		}
		if a.close || a.body != nil && !a.body.ended() {
			// A body not read to its end: Go's server would read the
			// rest before this answer (or after it, to keep the
			// connection), however long the client takes. The
			// connection closes after it instead, and watchedBody
			// bounds the wait for the rest.
			h.Set("Connection", "close")
		}
	}
	a.sending()
	a.ResponseWriter.WriteHeader(code)
}

// bound is called as the handler returns: the body is nobody's now, and
// the server flushes what is left of the answer.
func (a *answer) bound() {
	if a.body != nil {
		a.body.abandon()
	}
	a.sending() // ErrHijacked after an upgrade: nothing is flushed
}

// watchedBody is a request body that says whether it was read to its end.
// Once its handler is done, what is left of it has bodyDrainTimeout to
// come: Go's server reads up to 256 KiB of it, before the answer or after
// it, with no deadline of its own. A client that sent a request's headers
// alone kept its connection active, past ReadHeaderTimeout, IdleTimeout
// and ConnGuard's idle shedding, for as long as it liked.
type watchedBody struct {
	io.ReadCloser
	w http.ResponseWriter // the server's, for its read deadline

	mu        sync.Mutex
	idle      sync.Cond // signalled when reading drops to 0
	reading   int       // Reads in flight
	eof       bool      // read to its end
	abandoned bool      // the handler is done: Read fails
}

// errAbandoned is a Read of a body after its handler is done.
var errAbandoned = errors.New("the request body was read after its handler was done")

func newWatchedBody(body io.ReadCloser, w http.ResponseWriter) *watchedBody {
	b := &watchedBody{ReadCloser: body, w: w}
	b.idle.L = &b.mu
	return b
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.abandoned {
		b.mu.Unlock()
		return 0, errAbandoned
	}
	b.reading++
	b.mu.Unlock()
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	if b.reading--; b.reading == 0 {
		b.idle.Broadcast()
	}
	return n, err
}

// ended reports whether the body was read to its end.
func (b *watchedBody) ended() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// abandon ends the body's reading as its handler returns. Unless it was
// read to its end, the connection's read deadline is bodyDrainTimeout
// away, and abandon waits for any Read in flight (a proxy's transport may
// still be in one) to end by then: Go's server, finding a read in flight
// when the handler is done, ends it and clears the deadline, then reads
// the rest with none.
func (b *watchedBody) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.abandoned = true
	if b.eof {
		return
	}
	if err := http.NewResponseController(b.w).SetReadDeadline(time.Now().Add(bodyDrainTimeout)); err != nil {
		return // hijacked: the server reads no more of it
	}
	for b.reading > 0 {
		b.idle.Wait()
	}
}

func (a *answer) Write(p []byte) (int, error) {
	if !a.final {
		a.WriteHeader(http.StatusOK)
	}
	a.sending()
	return a.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController (flushes, hijacks, full duplex,
// deadlines) reach the server's writer.
func (a *answer) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// admit takes one of the instance's MaxVatRequests for client, and of the
// client's MaxClientVatRequests; why says which is full when it cannot.
func (in *instance) admit(id, client string) (release func(), why string) {
	if !in.takeClient(client) {
		return nil, fmt.Sprintf("vat %s is busy: this client has %d requests in flight to it (limit %d)", id, MaxClientVatRequests, MaxClientVatRequests)
	}
	select {
	case in.requests <- struct{}{}:
		return func() { <-in.requests; in.releaseClient(client) }, ""
	default:
		in.releaseClient(client)
		return nil, fmt.Sprintf("vat %s is busy: %d requests in flight (limit %d)", id, MaxVatRequests, MaxVatRequests)
	}
}

// requestClient names the client of r for MaxClientVatRequests, as
// clientKey does; "" (not counted) for a loopback client, which is this
// host's own (a reverse proxy in front limits its visitors itself).
func requestClient(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || ap.Addr().Unmap().IsLoopback() {
		return ""
	}
	return clientKey(ap.Addr())
}

// takeClient counts one more request of client in, or reports that it
// holds MaxClientVatRequests of this vat's already.
func (in *instance) takeClient(client string) bool {
	if client == "" {
		return true
	}
	in.clientsMu.Lock()
	defer in.clientsMu.Unlock()
	if in.clients[client] >= MaxClientVatRequests {
		return false
	}
	if in.clients == nil {
		in.clients = map[string]int{}
	}
	in.clients[client]++
	return true
}

func (in *instance) releaseClient(client string) {
	if client == "" {
		return
	}
	in.clientsMu.Lock()
	defer in.clientsMu.Unlock()
	if in.clients[client]--; in.clients[client] <= 0 {
		delete(in.clients, client)
	}
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
