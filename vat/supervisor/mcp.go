package supervisor

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"toybox/labels"
	"toybox/vat/access"
	"toybox/vat/edge"
	"toybox/vat/manifest"
	"toybox/vat/mcp"
	"toybox/vat/mcp/front"
	"toybox/vat/store"
	"toybox/vat/tokens"
	"toybox/vat/words"
)

// The MCP edge's bounds.
const (
	// MaxMCPBody bounds one MCP request body (R38): 32 MiB, what the
	// bridge takes per message; past it the answer is 413.
	MaxMCPBody = 32 << 20
	// mcpLogRate and mcpLogBurst bound one vat's MCP decision records
	// (records a second, after a burst): every request is a decision, and
	// a busy vat would otherwise push the supervisor's other records past
	// journald's rate limit. Past it they are counted.
	mcpLogRate  = 200
	mcpLogBurst = 1000
	// mcpStatsTimeout bounds the wait for a bridge's counters when a
	// status is asked for.
	mcpStatsTimeout = 500 * time.Millisecond
	// mcpEndpoint is the public endpoint's last segment: /<vat>/mcp.
	mcpEndpoint = "/mcp"
	// mcpPublicURLEnv tells an mcp.auth "vat" server its endpoint's URL
	// (mcp.md R45).
	mcpPublicURLEnv = "MCP_PUBLIC_URL"
	// prmPrefix is where RFC 9728 protected-resource metadata is served,
	// the endpoint's path inserted after it.
	prmPrefix = "/.well-known/oauth-protected-resource"
	// probeBudget bounds a whole probe (each step has front.ProbeTimeout):
	// an install waits for it.
	probeBudget = 15 * time.Second
	// bridgeStatsPath is where toybox-entry's bridge answers its counters
	// (docs/mcp.md).
	bridgeStatsPath = "/toybox/mcp-stats"
)

// Log attribute keys of the MCP edge's records (R59).
const (
	keyPrincipal = "principal"
	keyEra       = "era"
	keySession   = "session"
	keyMethod    = "method"
	keyResult    = "result"
)

// mcpOf is the MCP server config of code installed with rec: its
// manifest's, or, for a single executable, the owner's ?mcp=. Nil when it
// is no MCP server.
func mcpOf(code store.Code, rec store.Record) *manifest.MCP {
	if code.Manifest != nil && code.Manifest.MCP != nil {
		return code.Manifest.MCP
	}
	if !code.Bundle && rec.MCP != "" {
		m, err := manifest.ParseMCPQuery(rec.MCP)
		if err == nil {
			return m
		}
	}
	return nil
}

// mcpPublicURL is what an MCP server that is its own OAuth resource
// server (mcp.auth "vat") is told its endpoint's URL is; "" for any other
// vat, or when toybox knows no public URL (Config.PublicURL).
func (s *Supervisor) mcpPublicURL(id string, code store.Code, rec store.Record) string {
	cfg := mcpOf(code, rec)
	if cfg == nil || cfg.Auth != manifest.AuthVat || s.cfg.PublicURL == "" {
		return ""
	}
	return strings.TrimSuffix(s.cfg.PublicURL, "/") + "/" + id + mcpEndpoint
}

// The values toybox gives an MCP server's MCP_TRANSPORT, and the host an
// http server on a TCP port listens on (as ToolHive sets them, R47).
const (
	mcpTransportStdio = "stdio"
	mcpTransportHTTP  = "streamable-http"
	mcpListenHost     = "127.0.0.1"
)

// mcpEnv is what toybox sets in the environment of the MCP server of code
// installed with rec, as ToolHive does (mcp.md R47): MCP_TRANSPORT, and
// for an http server on a TCP port (listen) MCP_HOST, MCP_PORT and
// FASTMCP_PORT, the port toybox-entry relays $TOYBOX_LISTEN to (the wall
// sets PORT). Nil for a vat that is no MCP server. The manifest may not
// declare these (manifest.MCP.SetsEnv).
func mcpEnv(code store.Code, rec store.Record) map[string]string {
	cfg := mcpOf(code, rec)
	switch {
	case cfg == nil:
		return nil
	case cfg.Transport == manifest.TransportStdio:
		return map[string]string{"MCP_TRANSPORT": mcpTransportStdio}
	}
	env := map[string]string{"MCP_TRANSPORT": mcpTransportHTTP}
	if port := listenOf(code, rec); port != 0 {
		p := strconv.Itoa(port)
		env["MCP_HOST"], env["MCP_PORT"], env["FASTMCP_PORT"] = mcpListenHost, p, p
	}
	return env
}

// mcpCall is what the edge learned of one MCP request, for its proxy and
// its log record.
type mcpCall struct {
	vat       string
	principal string
	era       mcp.Era
	session   string // the client's, checked (legacy); "" for none
	method    string // the JSON-RPC method, or the HTTP one for GET and DELETE
	passAuth  bool   // the vat is its own resource server
	env       string // the principal's secrets for the bridge (mcp.EncodeEnv); "" for none
	status    int
	reason    string
	started   time.Time
}

type mcpCallKey struct{}

// mcpRoute is one instance's MCP endpoint: its proxy and the sessions it
// saw minted.
type mcpRoute struct {
	cfg      manifest.MCP
	proxy    *httputil.ReverseProxy
	sessions *sessionTable
	bridge   *bridgeTransport // a stdio vat's; nil for an http vat
}

// close closes the route's idle connections (its instance ended).
func (rt *mcpRoute) close() {
	if rt.bridge != nil {
		rt.bridge.closeIdle()
	}
}

// newMCPRoute builds the MCP proxy of instance in for cfg. Headers into the
// vat are built afresh (front.RequestHeaders), the vat's answer keeps only
// what MCP uses (front.ResponseHeaders), and answers stream as they come.
func newMCPRoute(in *instance, cfg manifest.MCP) *mcpRoute {
	rt := &mcpRoute{cfg: cfg, sessions: newSessionTable(maxSessions)}
	id := string(in.v.id)
	var transport http.RoundTripper = confined{answering{in}}
	if cfg.Transport == manifest.TransportStdio {
		// The bridge: toybox-entry's own server, on the edge's busiest
		// path.
		rt.bridge = &bridgeTransport{in: in}
		transport = rt.bridge
	}
	rt.proxy = &httputil.ReverseProxy{
		ErrorLog:  in.proxy.ErrorLog,
		Transport: transport,
		// An event stream, or an answer of unknown length, is flushed
		// at each write (httputil does so whatever this says). An answer
		// of known length goes out whole in one write (serveMCP flushes
		// it). A negative interval would start a timer per answer whose
		// goroutine wakes another thread and flushes the headers alone.
		FlushInterval: 0,
		BufferPool:    copyBuffers,
		Rewrite: func(pr *httputil.ProxyRequest) {
			c := pr.In.Context().Value(mcpCallKey{}).(*mcpCall)
			pr.Out.Header = front.RequestHeaders(pr.In.Header, c.passAuth)
			for _, k := range cfg.Headers {
				// The vat's declared extras (R46), canonical in the
				// manifest.
				if v, ok := pr.In.Header[k]; ok {
					pr.Out.Header[k] = v
				}
			}
			if c.era == mcp.Modern {
				// A modern request's session id is ignored (2026-07-28);
				// a dual-era vat must not read it as a legacy session.
				pr.Out.Header.Del(mcp.HeaderSession)
			}
			pr.Out.Header.Set(mcp.HeaderPrincipal, c.principal)
			if c.env != "" {
				pr.Out.Header.Set(mcp.HeaderPrincipalEnv, c.env)
			}
			if cfg.CacheToolsList {
				pr.Out.Header.Set(mcp.HeaderCache, mcp.CacheToolsList) // R48: the bridge may answer from its cache
			}
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = id
			pr.Out.URL.Path, pr.Out.URL.RawPath = cfg.Path, ""
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			if rt := routeOf(pr.In, id); rt.Prefix != "" {
				pr.Out.Header.Set("X-Forwarded-Prefix", rt.Prefix)
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			c := resp.Request.Context().Value(mcpCallKey{}).(*mcpCall)
			c.status = resp.StatusCode
			front.ResponseHeaders(resp.Header, c.passAuth)
			if c.era == mcp.Modern {
				resp.Header.Del(mcp.HeaderSession)
			}
			if err := rt.learn(c, resp); err != nil {
				return err
			}
			// Trailers are not MCP's: none reaches the client.
			resp.Body = &trailerDropper{ReadCloser: resp.Body, trailer: &resp.Trailer}
			for k := range resp.Trailer {
				delete(resp.Trailer, k)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			c := r.Context().Value(mcpCallKey{}).(*mcpCall)
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				c.status, c.reason = http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d MiB", MaxMCPBody>>20)
				front.WriteError(w, c.status, nil, mcp.CodeInvalidRequest, c.reason, nil)
				return
			}
			if r.Context().Err() != nil {
				// The client went away: nobody reads an answer.
				c.status, c.reason = 499, "the client went away"
				return
			}
			in.plog.warn("proxy to vat failed", err.Error())
			c.status, c.reason = http.StatusBadGateway, "vat "+id+" gave no usable answer: "+proxyWhy(err)
			in.v.setMCPError(c.reason)
			front.WriteError(w, c.status, nil, mcp.CodeInternal, c.reason+" (its logs say more)", nil)
		},
	}
	return rt
}

// peekSize is how much of a POST body of length n (-1: unknown) the edge
// reads before it forwards it: front.PeekBytes, or the whole body and
// one byte more when that is less (most messages are a few hundred bytes).
func peekSize(n int64) int {
	if n >= 0 && n < front.PeekBytes {
		return int(n) + 1
	}
	return front.PeekBytes
}

// copyBuffers are the MCP proxy's buffers for copying answers: without
// them each answer would take a new 32 KiB buffer.
var copyBuffers = &bufferPool{}

// bufferPool is a sync.Pool of 32 KiB buffers (httputil.BufferPool).
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// learn keeps the vat's answer's session id with the principal that
// opened it, and forgets a session the vat ended or no longer knows. An
// id it would not keep (validSessionID) is errSessionID.
func (rt *mcpRoute) learn(c *mcpCall, resp *http.Response) error {
	if c.era == mcp.Modern {
		return nil
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if sid := resp.Header.Get(mcp.HeaderSession); ok && sid != "" && sid != c.session {
		if !validSessionID(sid) {
			return errSessionID
		}
		if c.method == "initialize" && refusedInitialize(resp) {
			// The vat refused it: no session was made, so none is
			// kept or handed out, and a request naming it is 404.
			resp.Header.Del(mcp.HeaderSession)
			return nil
		}
		if evicted, principal := rt.sessions.bind(sid, c.principal); evicted != "" {
			go rt.endSession(evicted, principal)
		}
		c.session = sid
	}
	switch {
	case c.session == "":
	case resp.Request.Method == http.MethodDelete && ok, resp.StatusCode == http.StatusNotFound:
		rt.sessions.drop(c.session)
	}
	return nil
}

// maxInitAnswer bounds the JSON answer to an initialize the edge reads
// to learn whether it is an error: an answer past it (icons as data:
// URIs) is taken as a result.
const maxInitAnswer = 1 << 20

// refusedInitialize reports whether resp, a 2xx JSON answer to
// initialize, is a JSON-RPC error. It reads the body (up to
// maxInitAnswer) and puts what it read back in front of the rest. An
// event stream is not read: the vat's later 404 forgets its id.
func refusedInitialize(resp *http.Response) bool {
	if !strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "application/json") {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, maxInitAnswer+1))
	rest := io.Reader(bytes.NewReader(head))
	if err != nil || len(head) > maxInitAnswer {
		// Not read to its end: the rest follows (a body read to
		// its end may be closed, and is read no more).
		rest = io.MultiReader(rest, resp.Body)
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{rest, resp.Body}
	if err != nil || len(head) > maxInitAnswer {
		return false
	}
	m, err := mcp.Parse(bytes.TrimSpace(head))
	return err == nil && m.Kind == mcp.KindResponse && m.Result() == nil
}

// endSession ends a session the edge no longer keeps (the least recently
// used, past maxSessions) at the vat too, so its process goes.
func (rt *mcpRoute) endSession(sid, principal string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, "http://vat"+rt.cfg.Path, nil)
	if err != nil {
		return
	}
	req.Header.Set(mcp.HeaderSession, sid)
	req.Header.Set(mcp.HeaderPrincipal, principal)
	req.Host = "localhost"
	if resp, err := rt.proxy.Transport.RoundTrip(req); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}
}

// trailerDropper empties the answer's trailer once its body has been read:
// the transport fills it in just before the body's end.
type trailerDropper struct {
	io.ReadCloser
	trailer *http.Header
}

func (d *trailerDropper) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	if err != nil {
		clear(*d.trailer)
	}
	return n, err
}

func (d *trailerDropper) Close() error {
	err := d.ReadCloser.Close()
	clear(*d.trailer)
	return err
}

// proxyWhy says in a few words why a vat gave no usable answer, without the
// supervisor's paths (the log has the whole error).
func proxyWhy(err error) string {
	var ae *appSocketError
	switch {
	case errors.As(err, &ae):
		return fmt.Sprintf("its app.sock is %s, not a socket", ae.what)
	case errors.Is(err, errMany1xx):
		return errMany1xx.Error()
	case errors.Is(err, errSessionID):
		return errSessionID.Error()
	case strings.Contains(err.Error(), "response headers exceeded"):
		return fmt.Sprintf("its answer's headers are over %d KiB", maxVatHeaderBytes>>10)
	case strings.Contains(err.Error(), "timeout awaiting response headers"):
		return fmt.Sprintf("no answer's headers within %s", vatHeaderTimeout)
	}
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return fmt.Sprintf("its app.sock: %s: %v", pe.Op, pe.Err)
	}
	return "no answer"
}

// mcpWriter records the status an answer went out with.
type mcpWriter struct {
	http.ResponseWriter
	status int
}

func (w *mcpWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *mcpWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *mcpWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// mcpConfig is vat id's MCP config; nil when it is not an installed MCP
// server.
func (s *Supervisor) mcpConfig(id string) *manifest.MCP {
	v, ok := s.find(id)
	if !ok {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return mcpOf(v.code, v.rec)
}

// serveMCPVat serves a request for MCP vat id: /<vat>/mcp is its
// endpoint; every other path is refused, so no path of it bypasses the
// edge's checks (an http vat's own endpoint, for one).
func (s *Supervisor) serveMCPVat(w http.ResponseWriter, r *http.Request, id, rest string, cfg *manifest.MCP) {
	c := &mcpCall{vat: id, era: mcp.Legacy, method: r.Method, started: time.Now()}
	mw := &mcpWriter{ResponseWriter: w}
	defer func() { s.logMCP(id, c, mw.status) }()
	if d := s.mcpRules.Check(front.AskOf(r)); !d.Allow {
		c.reason = d.Reason
		front.WriteError(mw, d.Status, nil, mcp.CodeInvalidRequest, d.Reason, nil)
		return
	}
	if rest != mcpEndpoint {
		c.reason = "not the MCP endpoint"
		front.WriteError(mw, http.StatusNotFound, nil, mcp.CodeInvalidRequest,
			fmt.Sprintf("vat %s is an MCP server: its endpoint is /%s/mcp, and it serves nothing else here", id, id), nil)
		return
	}
	s.serveMCP(mw, r, id, cfg, c)
}

// serveMCP is the edge (docs/mcp.md): a vat not ready is said at once, the
// principal comes from the vat's token or the client's address, a
// legacy session is only its principal's, and the request goes to the vat
// with headers built afresh.
func (s *Supervisor) serveMCP(w *mcpWriter, r *http.Request, id string, cfg *manifest.MCP, c *mcpCall) {
	switch r.Method {
	case http.MethodPost, http.MethodGet, http.MethodDelete:
	case http.MethodOptions:
		c.reason = "preflight"
		s.mcpPreflight(w, r)
		return
	default:
		c.reason = "method not allowed"
		w.Header().Set("Allow", "GET, POST, DELETE, OPTIONS")
		front.WriteError(w, http.StatusMethodNotAllowed, nil, mcp.CodeInvalidRequest, r.Method+" is not an MCP method (POST, GET or DELETE)", nil)
		return
	}
	s.mcpCORS(w, r)
	in, word, _ := s.serving(id)
	if in == nil || in.mcp == nil {
		c.reason = "vat " + word.String()
		writeNotReady(w, id, word)
		return
	}
	principal, passAuth, ok := s.mcpAuthorize(w, r, id, cfg, c)
	if !ok {
		return
	}
	c.principal, c.passAuth = principal, passAuth
	if cfg.Transport == manifest.TransportStdio && cfg.Mode != manifest.ModeSingle {
		var env map[string]string
		if len(cfg.HeaderEnv) > 0 {
			var why string
			if env, why = headerEnv(r.Header, cfg.HeaderEnv); why != "" {
				c.reason = why
				front.WriteError(w, http.StatusBadRequest, nil, mcp.CodeInvalidRequest, why, nil)
				return
			}
			if len(env) > 0 {
				// A client's own values make it another principal: its
				// processes and sessions are its own, never those of
				// another client behind its address (R46, R21).
				c.principal += envPrincipal(env)
			}
		}
		if tid, ok := strings.CutPrefix(principal, "token:"); ok {
			// The token's own secrets (R22) win over its headers.
			if secrets := s.tokens.Secrets(id, tid); len(env) == 0 {
				env = secrets
			} else {
				maps.Copy(env, secrets)
			}
		}
		// For the bridge to set in that principal's processes alone.
		c.env = mcp.EncodeEnv(env)
	}
	release, why := in.admit(id, requestClient(r))
	if why != "" {
		c.reason = why
		w.Header().Set("Retry-After", "1")
		front.WriteError(w, http.StatusServiceUnavailable, nil, front.CodeUnavailable, why, nil)
		return
	}
	defer release()
	if r.ContentLength > MaxMCPBody {
		// Said before any of it comes: refused before any of it is read.
		c.status, c.reason = http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d MiB", MaxMCPBody>>20)
		front.WriteError(w, c.status, nil, mcp.CodeInvalidRequest, c.reason, nil)
		return
	}

	var req front.Request
	if r.Method == http.MethodPost {
		body := http.MaxBytesReader(w, r.Body, MaxMCPBody)
		head := make([]byte, peekSize(r.ContentLength))
		n, err := io.ReadFull(body, head)
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			head = head[:n]
			r.Body = io.NopCloser(bytes.NewReader(head))
			r.ContentLength = int64(n)
		case err != nil:
			c.status, c.reason = 0, "reading the request: "+err.Error()
			front.WriteError(w, http.StatusBadRequest, nil, mcp.CodeInvalidRequest, c.reason, nil)
			return
		default:
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(head), body), body}
		}
		req = front.Peek(head)
		c.method = req.Method
	}
	c.era = front.EraOf(r.Header, req)
	if sids := r.Header.Values(mcp.HeaderSession); len(sids) > 1 && c.era == mcp.Legacy {
		// The edge checks one; a vat that reads another (the last, or
		// all joined) would serve a session whose owner went unchecked.
		c.reason = fmt.Sprintf("%d Mcp-Session-Id headers", len(sids))
		front.WriteError(w, http.StatusBadRequest, req.ID, mcp.CodeInvalidRequest,
			fmt.Sprintf("the request has %d Mcp-Session-Id headers; a session is named by one", len(sids)), nil)
		return
	}
	if sid := r.Header.Get(mcp.HeaderSession); sid != "" && c.era == mcp.Legacy {
		c.session = sid
		if owner, ok := in.mcp.sessions.owner(sid); !ok || owner != c.principal {
			// Another principal's session is one this principal never
			// opened: as if it did not exist (R6).
			c.reason = "no such session for this principal"
			front.WriteError(w, http.StatusNotFound, req.ID, mcp.CodeSessionNotFound, "Session not found", nil)
			return
		}
	}
	ctx := context.WithValue(r.Context(), mcpCallKey{}, c)
	duplex(in.mcp.proxy).ServeHTTP(w, r.WithContext(ctx))
	if w.status != 0 && w.Header().Get("Content-Length") != "" {
		// An answer of known length is whole: it goes out now, before
		// its decision record is written. (Flushing one of unknown
		// length would chunk it.)
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
	if c.reason == "" {
		c.reason = "proxied"
	}
}

// maxHeaderEnvValue bounds one header's value that mcp.headerEnv sets in
// a process's environment; the whole goes to the bridge in one header
// (mcp.MaxEnvHeader).
const maxHeaderEnvValue = 4 << 10

// headerEnv is the environment a client's headers give its processes by
// the manifest's mcp.headerEnv (R46); a reason when they cannot.
func headerEnv(h http.Header, mapping []manifest.HeaderEnv) (map[string]string, string) {
	env := map[string]string{}
	for _, he := range mapping {
		v, ok := h[he.Header]
		switch {
		case !ok:
			continue
		case len(v) > 1:
			return nil, fmt.Sprintf("%s is sent %d times; it sets %s, which holds one value", he.Header, len(v), he.Env)
		case len(v[0]) > maxHeaderEnvValue:
			return nil, fmt.Sprintf("%s is over %d bytes", he.Header, maxHeaderEnvValue)
		case strings.ContainsRune(v[0], 0):
			return nil, he.Header + " holds a NUL byte"
		}
		env[he.Env] = v[0]
	}
	return env, ""
}

// envKey keys envPrincipal's digests: made at start, so a digest in a log
// record tells nothing of a value, and no one outside can make one.
var envKey = func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // it never returns an error (Go 1.24)
	return k
}()

// envPrincipal is the suffix of the principal of a client whose headers
// set env: a keyed digest of the values, so each set of values has its own
// processes and sessions.
func envPrincipal(env map[string]string) string {
	mac := hmac.New(sha256.New, envKey)
	mac.Write([]byte(mcp.EncodeEnv(env)))
	return mcp.EnvMark + hex.EncodeToString(mac.Sum(nil)[:8])
}

// writeNotReady answers a request to a vat that does not serve now: at
// once, 503 with Retry-After and a JSON-RPC error naming its status word
// (R57), never a handshake held open.
func writeNotReady(w http.ResponseWriter, id string, word words.Word) {
	retry := "1"
	if word.Off() {
		retry = "30" // it comes back only when its owner acts
	}
	w.Header().Set("Retry-After", retry)
	front.WriteError(w, http.StatusServiceUnavailable, nil, front.CodeUnavailable,
		fmt.Sprintf("vat %s is not serving: %s", id, word.String()),
		map[string]string{"vat": id, "status": word.String(), "status_es": word.In("es")})
}

// mcpAuthorize returns the request's principal: its token's id when the
// vat holds tokens (ok is false, and the answer written, without a good
// one), else the client's address. passAuth is set for a vat that is its
// own resource server.
func (s *Supervisor) mcpAuthorize(w http.ResponseWriter, r *http.Request, id string, cfg *manifest.MCP, c *mcpCall) (principal string, passAuth, ok bool) {
	if cfg.Auth == manifest.AuthVat {
		return openPrincipal(r), true, true
	}
	if !s.tokens.Has(id) {
		return openPrincipal(r), false, true
	}
	auth := r.Header.Values("Authorization")
	challenge := fmt.Sprintf(`Bearer resource_metadata=%q`, prmURL(r, id))
	token, bearer := "", false
	if len(auth) == 1 {
		scheme, rest, _ := strings.Cut(auth[0], " ")
		token, bearer = strings.TrimSpace(rest), strings.EqualFold(scheme, "Bearer")
	}
	switch {
	case len(auth) == 0:
		c.reason = "no token"
		w.Header().Set("WWW-Authenticate", challenge)
		front.WriteError(w, http.StatusUnauthorized, nil, front.CodeUnauthorized,
			fmt.Sprintf("vat %s needs a bearer token (Authorization: Bearer <token>); its owner mints one with POST /%s/tokens on the admin socket", id, id), nil)
		return "", false, false
	case len(auth) > 1 || !bearer || token == "":
		c.reason = "not one bearer token"
		w.Header().Set("WWW-Authenticate", challenge+`, error="invalid_request"`)
		front.WriteError(w, http.StatusBadRequest, nil, front.CodeUnauthorized, "want one Authorization: Bearer <token> header", nil)
		return "", false, false
	}
	tid, good := s.tokens.Check(id, token)
	if !good {
		c.reason = "a token that is not this vat's"
		w.Header().Set("WWW-Authenticate", challenge+`, error="invalid_token", error_description="not a token of this vat"`)
		front.WriteError(w, http.StatusUnauthorized, nil, front.CodeUnauthorized,
			fmt.Sprintf("that token does not open vat %s (revoked, or another vat's)", id), nil)
		return "", false, false
	}
	return "token:" + tid, false, true
}

// openPrincipal names the client of an open vat (no token): its address
// (an IPv4 address or an IPv6 /64, as the per-client limits count them),
// or, for a client on loopback (this host's own reverse proxy), the last
// address its X-Forwarded-For names. It is stable across a client's
// sessions, so a shared-mode vat gives each client one process, and
// needs nothing the client must hold.
func openPrincipal(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "client:local" // a unix socket: this host's own
	}
	a := ap.Addr().Unmap()
	if a.IsLoopback() {
		xff := r.Header.Values("X-Forwarded-For")
		if len(xff) > 0 {
			parts := strings.Split(xff[len(xff)-1], ",")
			if fa, err := netip.ParseAddr(strings.TrimSpace(parts[len(parts)-1])); err == nil {
				return "client:" + clientKey(fa.Unmap())
			}
		}
		return "client:local"
	}
	return "client:" + clientKey(a)
}

// publicBase is the scheme and host a client reached the edge by: https
// when a proxy on this host says so (X-Forwarded-Proto from loopback).
func publicBase(r *http.Request) string {
	scheme := "http"
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && ap.Addr().Unmap().IsLoopback() && r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// endpointPath is vat id's MCP endpoint's path on the origin r came by:
// /<vat>/mcp on a shared one, /mcp on the vat's own.
func endpointPath(r *http.Request, id string) string {
	if rt, ok := RouteOf(r); ok && rt.Origin == edge.Own {
		return mcpEndpoint
	}
	return "/" + id + mcpEndpoint
}

// resourceURL is vat id's MCP endpoint as a client names it (RFC 8707
// style: the audience its tokens are for).
func resourceURL(r *http.Request, id string) string { return publicBase(r) + endpointPath(r, id) }

// prmURL is where the vat's protected-resource metadata is (RFC 9728, the
// endpoint's path inserted after the well-known prefix).
func prmURL(r *http.Request, id string) string {
	return publicBase(r) + prmPrefix + endpointPath(r, id)
}

// servePRM answers GET /.well-known/oauth-protected-resource/<vat>/mcp:
// the vat's resource (its public endpoint, RFC 9728 §3.3) and that it
// takes bearer tokens in the Authorization header. The tokens are its
// owner's (POST /<vat>/tokens), so no authorization server is named. A
// vat that is its own resource server answers for itself.
func (s *Supervisor) servePRM(w http.ResponseWriter, r *http.Request, id, endpoint string) {
	c := &mcpCall{vat: id, era: mcp.Legacy, method: "prm", started: time.Now()}
	mw := &mcpWriter{ResponseWriter: w}
	defer func() { s.logMCP(id, c, mw.status) }()
	if d := s.mcpRules.Check(front.AskOf(r)); !d.Allow {
		c.reason = d.Reason
		http.Error(mw, d.Reason, d.Status)
		return
	}
	cfg := s.mcpConfig(id)
	if cfg == nil || endpoint != mcpEndpoint {
		c.reason = "no such resource"
		http.Error(mw, "no MCP endpoint here: protected-resource metadata is at "+prmPrefix+"/<vat>/mcp", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		c.reason = "method not allowed"
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(mw, "GET only", http.StatusMethodNotAllowed)
		return
	}
	if cfg.Auth == manifest.AuthVat {
		s.proxyOwnPRM(mw, r, id, cfg, c)
		return
	}
	c.reason = "metadata"
	s.mcpCORS(mw, r)
	mw.Header().Set("Content-Type", "application/json")
	mw.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(mw).Encode(map[string]any{
		"resource":                 resourceURL(r, id),
		"resource_name":            "toybox vat " + id,
		"bearer_methods_supported": []string{"header"},
	})
}

// proxyOwnPRM passes a metadata request to a vat that is its own OAuth
// resource server, at its endpoint's well-known path.
func (s *Supervisor) proxyOwnPRM(w *mcpWriter, r *http.Request, id string, cfg *manifest.MCP, c *mcpCall) {
	in, word, _ := s.serving(id)
	if in == nil || in.mcp == nil {
		c.reason = "vat " + word.String()
		writeNotReady(w, id, word)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+id+prmPrefix+strings.TrimSuffix(cfg.Path, "/"), nil)
	if err != nil {
		c.reason = err.Error()
		http.Error(w, "bad metadata path", http.StatusInternalServerError)
		return
	}
	out.Host = r.Host
	out.Header.Set("Accept", "application/json")
	out.Header.Set(mcp.HeaderPrincipal, openPrincipal(r))
	resp, err := in.mcp.proxy.Transport.RoundTrip(out)
	if err != nil {
		c.reason = "vat " + id + " gave no usable answer: " + proxyWhy(err)
		http.Error(w, c.reason, http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	c.reason = "the vat's own metadata"
	s.mcpCORS(w, r)
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 1<<20))
}

// mcpCORS adds CORS answers for a listed browser origin (R9); a request
// of the endpoint's own origin needs none, any other was refused.
func (s *Supervisor) mcpCORS(w http.ResponseWriter, r *http.Request) {
	o := r.Header.Get("Origin")
	if o == "" || !s.mcpRules.Listed(o) {
		return
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", o)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", "Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate")
}

// corsHeaders are the request headers a listed origin may send.
const corsHeaders = "Content-Type, Authorization, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name"

// mcpPreflight answers a CORS preflight: the methods and headers MCP uses,
// plus any Mcp-Param-* the page asks for.
func (s *Supervisor) mcpPreflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Allow", "GET, POST, DELETE, OPTIONS")
	o := r.Header.Get("Origin")
	if o != "" && s.mcpRules.Listed(o) {
		s.mcpCORS(w, r)
		allowed := corsHeaders
		for _, f := range strings.Split(r.Header.Get("Access-Control-Request-Headers"), ",") {
			f = strings.TrimSpace(f)
			if len(f) > len(mcp.HeaderParam) && len(f) <= 128 && strings.EqualFold(f[:len(mcp.HeaderParam)], mcp.HeaderParam) && headerToken(f) {
				allowed += ", " + f
			}
		}
		h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
		h.Set("Access-Control-Allow-Headers", allowed)
		h.Set("Access-Control-Max-Age", "600")
	}
	w.WriteHeader(http.StatusNoContent)
}

// headerToken reports whether s is a header name of letters, digits and
// dashes.
func headerToken(s string) bool {
	for _, c := range s {
		if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// logMCP writes one record per edge decision (R59), within the vat's
// rate.
func (s *Supervisor) logMCP(id string, c *mcpCall, status int) {
	if status == 0 {
		status = c.status
	}
	records := s.mcpRecords(id)
	ok, unlogged := records.Admit(time.Now())
	if !ok {
		return
	}
	// Attrs, not key-value pairs: one record a call, so each pair's
	// boxing and the era's reflection (a named string type) show.
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs, slog.String(keyVat, id), slog.String(keyPrincipal, c.principal), slog.String(keyEra, string(c.era)),
		slog.String(keySession, clipRecord(c.session)), slog.String(keyMethod, clipRecord(c.method)), slog.Int(keyResult, status),
		slog.String(keyReason, c.reason), slog.Int64("ms", time.Since(c.started).Milliseconds()))
	if unlogged > 0 {
		attrs = append(attrs, slog.Int("unlogged", unlogged))
	}
	level := slog.LevelInfo
	if status >= 400 {
		level = slog.LevelWarn
	}
	s.edgeLog.LogAttrs(context.Background(), level, "mcp", attrs...)
}

// maxRecordText bounds a text a client chose (its session id, its
// method) in an edge record: a header may be 1 MiB, and up to mcpLogRate
// records a second are written per vat.
const maxRecordText = 256

// clipRecord returns s cut to maxRecordText, saying how many bytes it
// dropped.
func clipRecord(s string) string {
	if len(s) <= maxRecordText {
		return s
	}
	return fmt.Sprintf("%s... (%d more bytes not logged)", strings.ToValidUTF8(s[:maxRecordText], ""), len(s)-maxRecordText)
}

// mcpRecords is vat id's limiter of MCP records. Ids nobody installed,
// which any visitor may name, share one: a limiter each would let a
// visitor grow the map, and bounding it by clearing it gave every vat
// its burst again.
func (s *Supervisor) mcpRecords(id string) *tokens.Records {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, installed := s.vats[labels.VatID(id)]; !installed {
		id = ""
	}
	r, ok := s.mcpLogs[id]
	if !ok {
		r = tokens.NewRecords(mcpLogRate, mcpLogBurst)
		s.mcpLogs[id] = r
	}
	return r
}

func (v *vat) setMCPError(why string) {
	v.mu.Lock()
	v.mcpErr = why
	v.mu.Unlock()
}

// MCPStatus is what GET /<vat> says of an MCP vat.
type MCPStatus struct {
	// Endpoint is its public path.
	Endpoint  string `json:"endpoint"`
	Transport string `json:"transport"`
	Path      string `json:"path"`
	Mode      string `json:"mode,omitempty"`
	Auth      string `json:"auth"`
	// Tokens is how many tokens open it; with none it is open to
	// whoever reaches the public socket.
	Tokens int `json:"tokens"`
	// Access says who may call it, in words.
	Access string `json:"access"`
	// Probe is what the install-time probe learned.
	Probe *front.Snapshot `json:"probe,omitempty"`
	// Sessions is how many sessions the edge routes now (those it saw
	// the vat mint, per principal).
	Sessions int `json:"sessions"`
	// Bridge is the stdio bridge's own counters (processes, sessions,
	// stdout lines dropped, its last error), when it answers.
	Bridge json.RawMessage `json:"bridge,omitempty"`
	// PublicURL is the URL a vat with mcp.auth "vat" is told it is
	// reached at ($MCP_PUBLIC_URL).
	PublicURL string `json:"public_url,omitempty"`
	// Cache says what toybox answers from its cache (R48), in words:
	// what the edge running the vat asks of its bridge.
	Cache string `json:"cache"`
	// LastError is the edge's last failure to reach the vat.
	LastError string `json:"last_error,omitempty"`
}

// mcpStatus fills st.MCP for vat v (v.mu held): everything but the
// bridge's counters, which take a request.
func (s *Supervisor) mcpStatus(v *vat) *MCPStatus {
	cfg := mcpOf(v.code, v.rec)
	if cfg == nil {
		return nil
	}
	ms := &MCPStatus{
		Endpoint: "/" + string(v.id) + mcpEndpoint, Transport: cfg.Transport, Path: cfg.Path, Mode: cfg.Mode, Auth: cfg.Auth,
		LastError: v.mcpErr,
	}
	if p := v.rec.MCPProbe; p != nil && p.Code == v.rec.Code {
		ms.Probe = p
	}
	if s.tokens != nil {
		ms.Tokens = len(s.tokens.List(string(v.id)))
	}
	switch {
	case cfg.Auth == manifest.AuthVat:
		ms.Access = "toybox does not authenticate this vat: it is its own OAuth resource server (mcp.auth: vat)"
		if ms.PublicURL = s.mcpPublicURL(string(v.id), v.code, v.rec); ms.PublicURL == "" {
			ms.Access += "; it is told no public URL (toybox serve --public-url)"
		}
	case ms.Tokens > 0:
		ms.Access = fmt.Sprintf("a bearer token of this vat (%d)", ms.Tokens)
	default:
		ms.Access = "open: whoever reaches the public socket (POST /" + string(v.id) + "/tokens closes it)"
	}
	ms.Cache = cacheWords(*cfg)
	if v.run != nil && v.run.mcp != nil {
		ms.Sessions = v.run.mcp.sessions.len()
		ms.Cache = cacheWords(v.run.mcp.cfg) // the running edge's, during an upgrade too
	}
	return ms
}

// bridgeStats asks a stdio vat's bridge for its counters; nil when it does
// not answer them.
func bridgeStats(ctx context.Context, in *instance) json.RawMessage {
	ctx, cancel := context.WithTimeout(ctx, mcpStatsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://vat"+bridgeStatsPath, nil)
	if err != nil {
		return nil
	}
	req.Host = "localhost"
	resp, err := in.transport.RoundTrip(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil || resp.StatusCode != http.StatusOK || !json.Valid(b) {
		return nil
	}
	return json.RawMessage(bytes.TrimSpace(b))
}

// probeMCP asks the running instance's MCP server what it is (R4, R55).
func (s *Supervisor) probeMCP(ctx context.Context, in *instance, code string) *front.Snapshot {
	if in.mcp == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, probeBudget)
	defer cancel()
	client := &http.Client{Transport: in.transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	snap := front.Prober{Client: client, URL: "http://" + string(in.v.id) + in.mcp.cfg.Path, Host: "localhost"}.Probe(ctx)
	snap.Code = code
	if in.mcp.cfg.Transport == manifest.TransportStdio {
		// The bridge answers server/discover itself for a legacy server
		// (it bridges modern clients): the server's own era is what the
		// bridge learned of it, asking its process.
		var st struct {
			Era mcp.Era `json:"era"`
		}
		if b := bridgeStats(ctx, in); b != nil && json.Unmarshal(b, &st) == nil && st.Era != "" && st.Era != snap.Era {
			snap.Served, snap.Era = snap.Era, st.Era
		}
	}
	s.log.Info("mcp probe", keyVat, in.v.id, keyCode, code, keyEra, snap.Era, "tools", snap.ToolCount, keyErr, snap.Error)
	return &snap
}

// Bounds of a token's own environment (R22): it is passed to the bridge
// in a header of each of its requests.
const (
	maxSecrets      = 64       // variables per token
	maxSecretsBytes = 32 << 10 // names and values together
)

// MintToken mints a bearer token for MCP vat id. From then on every
// request to its endpoint needs one of its tokens. secrets (nil: none) are
// set only in the processes that serve this token (R22): each name must be
// one the vat's manifest declares in "env", and the vat a stdio server
// whose processes are never shared between principals.
func (s *Supervisor) MintToken(id labels.VatID, secrets map[string]string) (string, access.Info, error) {
	v, err := s.lockVat(id, false)
	if err != nil {
		return "", access.Info{}, err
	}
	defer v.op.Unlock()
	v.mu.Lock()
	cfg := mcpOf(v.code, v.rec)
	var declared []string
	if v.code.Manifest != nil {
		declared = v.code.Manifest.Env
	}
	v.mu.Unlock()
	switch {
	case cfg == nil:
		return "", access.Info{}, fmt.Errorf("%w: vat %s is not an MCP server (its manifest has no \"mcp\"; a single executable takes ?mcp=stdio): a token would open nothing", ErrBadInput, id)
	case cfg.Auth == manifest.AuthVat:
		return "", access.Info{}, fmt.Errorf("%w: vat %s authenticates its own clients (mcp.auth: vat): toybox would never check a token of its own", ErrBadInput, id)
	}
	if err := checkSecrets(string(id), cfg, declared, secrets); err != nil {
		return "", access.Info{}, err
	}
	token, info, err := s.tokens.Mint(string(id), secrets)
	if err != nil {
		return "", access.Info{}, err
	}
	s.log.Info("token minted", keyVat, id, "token", info.ID)
	return token, info, nil
}

// checkSecrets says why a token of vat id (cfg, declaring the env names
// declared) may not carry secrets; nil when it may.
func checkSecrets(id string, cfg *manifest.MCP, declared []string, secrets map[string]string) error {
	if len(secrets) == 0 {
		return nil
	}
	switch {
	case cfg.Transport != manifest.TransportStdio:
		return fmt.Errorf("%w: vat %s is an http MCP server: its one process serves every client, so a token's secrets would reach them all (per-token secrets need mcp.transport \"stdio\")", ErrBadInput, id)
	case cfg.Mode == manifest.ModeSingle:
		return fmt.Errorf("%w: vat %s runs one process for everyone (mcp.mode \"single\"): a token's secrets would reach every client", ErrBadInput, id)
	case len(secrets) > maxSecrets:
		return fmt.Errorf("%w: %d secrets; a token takes at most %d", ErrBadInput, len(secrets), maxSecrets)
	}
	size := 0
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		val := secrets[k]
		switch {
		case !slices.Contains(declared, k):
			return fmt.Errorf("%w: secret %q is not one of the variables vat %s's manifest declares in \"env\" (%s)", ErrBadInput, k, id, strings.Join(declared, ", "))
		case strings.ContainsRune(val, 0):
			return fmt.Errorf("%w: secret %q holds a NUL byte", ErrBadInput, k)
		}
		size += len(k) + len(val)
	}
	if size > maxSecretsBytes {
		return fmt.Errorf("%w: the secrets are %d bytes; a token takes at most %d", ErrBadInput, size, maxSecretsBytes)
	}
	return nil
}

// Tokens lists what is kept of vat id's tokens.
func (s *Supervisor) Tokens(id labels.VatID) ([]access.Info, error) {
	if _, ok := s.get(id); !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoVat, id)
	}
	return s.tokens.List(string(id)), nil
}

// RevokeToken revokes vat id's token ref (its id, or the token itself). A
// vat whose last token goes is open again. The token opens nothing from
// then on even where the tokens file cannot hold that: the error is then
// access.ErrNotStored, with the token's Info.
func (s *Supervisor) RevokeToken(id labels.VatID, ref string) (access.Info, error) {
	if _, ok := s.get(id); !ok {
		return access.Info{}, fmt.Errorf("%w: %q", ErrNoVat, id)
	}
	info, err := s.tokens.Revoke(string(id), ref)
	if errors.Is(err, access.ErrNotStored) {
		s.log.Error("token revoked, not stored", keyVat, id, "token", info.ID, keyErr, err)
		return info, err
	}
	if err != nil {
		return access.Info{}, err
	}
	s.log.Info("token revoked", keyVat, id, "token", info.ID, "left", len(s.tokens.List(string(id))))
	return info, nil
}

// cacheWords says what the edge of a vat of cfg lets its bridge answer
// from its cache.
func cacheWords(cfg manifest.MCP) string {
	if cfg.CacheToolsList {
		return "tools/list: answers the server marks public, for their ttlMs, until it says the list changed"
	}
	return "off: every request reaches the server"
}
