package bridge

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"toybox/vat/mcp"
)

// modernOwner holds a process serving stateless (2026-07-28) requests:
// one per principal (one for all in ModeSingle). Each request is its own
// call; nothing else is routed to it but what names it.
type modernOwner struct {
	b   *Bridge
	key string
	p   *proc
	// init is set when the vat speaks only the 2025 revisions: toybox
	// initialized p itself and bridges (its InitializeResult).
	init []byte

	mu      sync.Mutex
	tools   map[string][]mcp.ParamBinding // the x-mcp-header bindings by tool; nil: not known yet
	pending map[string]*suspended         // calls waiting for their client's input, by inputRequests key
	nextKey int64
}

// toolsList is the part of a tools/list result the header checks need.
type toolsList struct {
	Tools []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"inputSchema"`
	} `json:"tools"`
}

// noteTools records the bindings of a tools/list result's tools; first
// is the answer to a request with no cursor (a new list).
func (o *modernOwner) noteTools(result []byte, first bool) {
	var tl toolsList
	if json.Unmarshal(result, &tl) != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if first || o.tools == nil {
		o.tools = map[string][]mcp.ParamBinding{}
	}
	for _, t := range tl.Tools {
		o.tools[t.Name] = mcp.ParamBindings(t.InputSchema)
	}
}

// bindings returns a tool's x-mcp-header bindings, asking the vat for its
// tools once when none are known.
func (o *modernOwner) bindings(name string) []mcp.ParamBinding {
	o.mu.Lock()
	known := o.tools != nil
	o.mu.Unlock()
	if !known {
		m, _ := mcp.Parse(mcp.Request([]byte("0"), "tools/list", discoverParams))
		if resp, err := o.b.callSelf(o.p, m, discoverTimeout); err == nil && resp.Result() != nil {
			o.noteTools(resp.Result(), true)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.tools[name]
}

func (o *modernOwner) fromVat(p *proc, m mcp.Msg) {
	// A stateless server sends no requests, and its notifications relate
	// to a request: the only call in flight, when there is one.
	if m.Kind == mcp.KindRequest {
		o.ask(p, m)
		return
	}
	p.mu.Lock()
	var only *call
	if len(p.calls) == 1 {
		for _, c := range p.calls {
			only = c
		}
	}
	p.mu.Unlock()
	if only != nil && m.Kind == mcp.KindNotification {
		only.st.push(m.Raw, false)
		return
	}
	o.b.logVat(p, "dropped", "a "+m.Kind.String()+" ("+m.Method+") that relates to no one request")
}

func (o *modernOwner) exited(*proc) {}

// modernFor returns the stateless process for principal, starting one.
// For a vat that speaks only the 2025 revisions it is one toybox
// initialized itself, and its requests are bridged.
func (b *Bridge) modernFor(principal string, env []string) (*modernOwner, error) {
	key := principal
	if b.cfg.Mode == ModeSingle {
		key, env = "", nil // one process for everyone holds no one's secrets
	}
	b.mu.Lock()
	if o := b.modern[key]; o != nil {
		b.mu.Unlock()
		return o, nil
	}
	b.mu.Unlock()
	o := &modernOwner{b: b, key: key}
	p, err := b.acquire(o, env)
	if err != nil {
		return nil, err
	}
	o.p = p
	if b.eraOf() == "" && !b.probe(p) {
		// The probe's process had a request before any initialize:
		// a fresh one is initialized instead.
		go p.stop()
		if p, err = b.acquire(o, env); err != nil {
			return nil, err
		}
		o.p = p
	}
	if b.eraOf() == mcp.Legacy {
		if o.init, _, err = b.handshake(p, bridgedCapabilities); err != nil {
			go p.stop()
			return nil, err
		}
	}
	b.mu.Lock()
	if other := b.modern[key]; other != nil {
		// Another request started one first: use it, give this one back.
		b.mu.Unlock()
		go p.stop()
		return other, nil
	}
	b.modern[key] = o
	b.mu.Unlock()
	return o, nil
}

// removed are the 2025 methods the 2026-07-28 revision has no more; a
// stateless client of a bridged vat gets 404 for them, as from a modern
// vat.
var removed = map[string]bool{
	"initialize": true, "ping": true, "logging/setLevel": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
	"subscriptions/listen": true, // a 2025 vat has no such stream
}

// bridged answers what a stateless request to a 2025-only vat needs
// from toybox: server/discover from the vat's InitializeResult, the
// methods the revision removed with 404. It reports whether it answered.
func (o *modernOwner) bridged(w http.ResponseWriter, r *http.Request, principal string, m mcp.Msg) bool {
	switch {
	case m.Method == "server/discover":
		var init struct {
			Capabilities json.RawMessage `json:"capabilities"`
			ServerInfo   json.RawMessage `json:"serverInfo"`
			Instructions string          `json:"instructions,omitempty"`
		}
		_ = json.Unmarshal(o.init, &init)
		res := map[string]any{
			"resultType":        "complete",
			"supportedVersions": mcp.ModernVersions,
			"capabilities":      init.Capabilities,
			"_meta":             map[string]any{"io.modelcontextprotocol/serverInfo": init.ServerInfo},
		}
		if init.Instructions != "" {
			res["instructions"] = init.Instructions
		}
		rj, _ := json.Marshal(res)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(mcp.ResultResponse(m.ID, rj))
		o.b.decide(r, principal, mcp.Modern, "", m.Method, http.StatusOK, "answered by toybox from the 2025 vat's initialize")
		return true
	case removed[m.Method]:
		o.b.decide(r, principal, mcp.Modern, "", m.Method, http.StatusNotFound, "a method 2026-07-28 removed")
		writeError(w, http.StatusNotFound, m.ID, mcp.CodeMethodNotFound, "method not found: "+m.Method, nil)
		return true
	}
	return false
}

// bridgedResult adds to a 2025 vat's result what a stateless client
// reads: resultType "complete", and on a list no caching (ttlMs 0, a
// private scope: toybox cannot know more).
func bridgedResult(method string) func([]byte) []byte {
	return func(resp []byte) []byte {
		resp, _ = mcp.Insert(resp, []string{"result"}, "resultType", []byte(`"complete"`))
		if strings.HasSuffix(method, "/list") {
			resp, _ = mcp.Insert(resp, []string{"result"}, "cacheScope", []byte(`"private"`))
			resp, _ = mcp.Insert(resp, []string{"result"}, "ttlMs", []byte(`0`))
		}
		return resp
	}
}

// modernStatus is the HTTP status of a stateless error answer (the
// 2026-07-28 transport): 404 for an unknown method, 400 for what the
// request got wrong.
func modernStatus(data []byte) int {
	m, err := mcp.Parse(data)
	if err != nil {
		return 0
	}
	code, ok := m.ErrorCode()
	if !ok {
		return 0
	}
	switch code {
	case mcp.CodeMethodNotFound:
		return http.StatusNotFound
	case mcp.CodeInvalidParams, mcp.CodeUnsupportedVer, mcp.CodeMissingCapability, mcp.CodeHeaderMismatch:
		return http.StatusBadRequest
	}
	return 0
}

// postModern serves one stateless request.
func (b *Bridge) postModern(w http.ResponseWriter, r *http.Request, principal string, m mcp.Msg) {
	if d := mcp.CheckModern(r.Header.Get, m); !d.Allowed() {
		b.decide(r, principal, mcp.Modern, "", m.Method, d.Status, d.Message)
		writeError(w, d.Status, m.ID, d.Code, d.Message, d.Data)
		return
	}
	switch m.Kind {
	case mcp.KindResponse:
		b.decide(r, principal, mcp.Modern, "", "", http.StatusBadRequest, "a stateless client sent a response")
		writeError(w, http.StatusBadRequest, nil, mcp.CodeInvalidRequest, "a stateless server sends no requests to answer", nil)
		return
	case mcp.KindNotification:
		// Cancellation is closing the response stream; nothing else a
		// stateless client sends has a receiver.
		b.decide(r, principal, mcp.Modern, "", m.Method, http.StatusAccepted, "dropped")
		w.WriteHeader(http.StatusAccepted)
		return
	}
	version, _ := m.GetString("params", "_meta", mcp.MetaProtocolVersion)
	hit, keep := b.cached(r, m, version)
	if hit != nil {
		b.serveCached(w, r, hit, writeOpts{lazy: true, sseUnlessError: prefersSSE(r), jsonOnly: !acceptsSSE(r), status: modernStatus, lazyWait: b.cfg.LazyWait})
		b.decide(r, principal, mcp.Modern, "", m.Method, http.StatusOK, "answered from the cache")
		return
	}
	o, err := b.modernFor(principal, principalEnv(r))
	if err != nil {
		b.unavailable(w, r, principal, mcp.Modern, m, err)
		return
	}
	p := o.p
	if o.init != nil && (o.bridged(w, r, principal, m) || o.resume(w, r, principal, m)) {
		return
	}
	if m.Method == "tools/call" {
		name, _ := m.GetString("params", "name")
		if err := mcp.CheckParams(r.Header.Get, o.bindings(name), m); err != nil {
			b.decide(r, principal, mcp.Modern, "", m.Method, http.StatusBadRequest, err.Error())
			writeError(w, http.StatusBadRequest, m.ID, mcp.CodeHeaderMismatch, err.Error(), nil)
			return
		}
	}
	st := newStream("", false)
	if o.init != nil {
		st.filter = bridgedResult(m.Method)
	}
	c := &call{st: st}
	c.caps, _ = m.Get("params", "_meta", mcp.MetaClientCapabilities)
	if m.Method == "tools/list" {
		_, cursor := m.Get("params", "cursor")
		c.onDone = func(resp mcp.Msg, ok bool) {
			if ok && resp.Result() != nil {
				o.noteTools(resp.Result(), !cursor)
			}
		}
	}
	if o.init == nil {
		c.onDone = both(c.onDone, keep) // a bridged 2025 vat's lists are private (bridgedResult)
	}
	if m.Method == "server/discover" {
		c.onDone = func(resp mcp.Msg, ok bool) {
			if info, has := resp.Get("result", "_meta", "io.modelcontextprotocol/serverInfo"); ok && has {
				b.noteServer(mcp.Modern, info)
			}
		}
	}
	if err := p.send(m, c); err != nil {
		b.decide(r, principal, mcp.Modern, "", m.Method, http.StatusServiceUnavailable, err.Error())
		writeError(w, http.StatusServiceUnavailable, m.ID, mcp.CodeInternal, err.Error(), nil)
		return
	}
	var once sync.Once
	gone := func() {
		// Closing the stream is the stateless client's cancellation.
		once.Do(func() { p.cancel(c, "the client closed its stream") })
	}
	done := b.serve(w, r, st, writeOpts{lazy: true, sseUnlessError: prefersSSE(r), jsonOnly: !acceptsSSE(r), status: modernStatus, lazyWait: b.cfg.LazyWait, onGone: gone})
	reason := "answered"
	if !done {
		reason = "cancelled: the client closed its stream"
	}
	b.decide(r, principal, mcp.Modern, "", m.Method, http.StatusOK, reason+" (process "+strconv.Itoa(p.n)+")")
}

// eraOf is the vat's era as far as known: the install probe's, else
// what its answers showed; "" while it has shown nothing.
func (b *Bridge) eraOf() mcp.Era {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eraLocked()
}

func (b *Bridge) eraLocked() mcp.Era {
	switch {
	case b.cfg.Era != "":
		return b.cfg.Era
	case b.modernOK < 0:
		return mcp.Legacy
	case b.modernOK > 0 && b.legacyOK:
		return mcp.Dual
	case b.modernOK > 0:
		return mcp.Modern
	}
	return ""
}

// probe asks a new stateless process whether the vat speaks 2026-07-28
// (server/discover; any other answer, or none in time, means no: the
// fallback is not keyed on one error code).
func (b *Bridge) probe(p *proc) bool {
	m, _ := mcp.Parse(mcp.Request([]byte("0"), "server/discover", discoverParams))
	resp, err := b.callSelf(p, m, discoverTimeout)
	ok := err == nil && resp.Result() != nil
	b.mu.Lock()
	if ok {
		b.modernOK = 1
	} else {
		b.modernOK = -1
	}
	b.mu.Unlock()
	if ok {
		if info, has := resp.Get("result", "_meta", "io.modelcontextprotocol/serverInfo"); has {
			b.noteServer(mcp.Modern, info)
		}
	}
	return ok
}

// discoverTimeout bounds the era probe.
const discoverTimeout = 5 * time.Second

// discoverParams is what the era probe sends.
var discoverParams = json.RawMessage(`{"_meta":{"` + mcp.MetaProtocolVersion + `":"` + mcp.ModernVersion + `","` + mcp.MetaClientCapabilities + `":{},"` + mcp.MetaClientInfo + `":{"name":"toybox","version":"1"}}}`)
