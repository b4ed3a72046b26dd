package bridge

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"toybox/vat/mcp"
)

// A stateless (2026-07-28) client of a vat that speaks only the 2025
// revisions cannot take the vat's requests (sampling, elicitation,
// roots): that revision has none. It has multi round-trip requests
// instead (2026-07-28 "patterns/mrtr"): a call that needs input ends with
// an InputRequiredResult, and the client retries it, with a new id, the
// answers and the result's requestState. toybox bridges the two: the
// vat's request suspends its call, the client gets the result, and its
// retry answers the vat's request and takes the call's answer.

// inputCapability names the client capability each request the vat may
// send needs; toybox declares them all to the vat, since it can route
// each to a client that declared it.
var inputCapability = map[string]string{
	"sampling/createMessage": "sampling",
	"elicitation/create":     "elicitation",
	"roots/list":             "roots",
}

// bridgedCapabilities is what toybox declares to a 2025 vat it bridges
// for stateless clients: each input a client may be asked for.
const bridgedCapabilities = `{"sampling":{},"elicitation":{},"roots":{}}`

// suspended is a call of the vat's waiting for its client's input.
type suspended struct {
	c     *call
	p     *proc
	vatID []byte // the vat's request's id
	timer *time.Timer
}

// stateSep separates a requestState's payload from its MAC.
const stateSep = "."

// seal returns the requestState naming key for the owner ownerKey until
// expires: the payload and an HMAC over it, with a key only this bridge
// holds. A client can read it but not forge or alter it.
func (b *Bridge) seal(ownerKey, key string, expires time.Time) string {
	payload := base64.RawURLEncoding.EncodeToString([]byte(key + "|" + strconv.FormatInt(expires.UnixMilli(), 10)))
	return payload + stateSep + base64.RawURLEncoding.EncodeToString(b.mac(ownerKey, payload))
}

func (b *Bridge) mac(ownerKey, payload string) []byte {
	h := hmac.New(sha256.New, b.stateKey)
	h.Write([]byte(ownerKey))
	h.Write([]byte{0})
	h.Write([]byte(payload))
	return h.Sum(nil)
}

// open checks a requestState sealed for ownerKey and returns the key it
// names.
func (b *Bridge) open(ownerKey, state string) (string, error) {
	payload, sum, ok := strings.Cut(state, stateSep)
	mac, err := base64.RawURLEncoding.DecodeString(sum)
	if !ok || err != nil || !hmac.Equal(mac, b.mac(ownerKey, payload)) {
		return "", errors.New("requestState was not made by toybox for this client")
	}
	raw, _ := base64.RawURLEncoding.DecodeString(payload)
	key, exp, _ := strings.Cut(string(raw), "|")
	ms, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || time.Now().After(time.UnixMilli(ms)) {
		return "", errors.New("requestState has expired")
	}
	return key, nil
}

// newStateKey is a bridge's MAC key: random, per bridge, so a state
// outlives neither the bridge nor the processes it names.
func newStateKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// ask routes a request from the vat for a stateless client: it suspends
// the one call in flight on p (its client's input, asked as an
// InputRequiredResult) when that call's client declared the capability
// the request needs, else answers that client -32021 and the vat an
// error. Nothing else can be attributed: the vat gets -32603.
func (o *modernOwner) ask(p *proc, m mcp.Msg) {
	capName, known := inputCapability[m.Method]
	if o.init == nil || !known {
		_ = p.write(mcp.ErrorResponse(m.ID, mcp.CodeMethodNotFound, "a stateless client takes no requests from the server", nil))
		return
	}
	p.mu.Lock()
	var only *call
	var st *stream
	var clientID []byte
	if len(p.calls) == 1 {
		for _, c := range p.calls {
			only, st, clientID = c, c.st, c.clientID
		}
	}
	p.mu.Unlock()
	if only == nil || only.caps == nil {
		_ = p.write(mcp.ErrorResponse(m.ID, mcp.CodeInternal, m.Method+": no one call in flight it can be asked for", nil))
		o.b.logVat(p, "refused", m.Method+" relates to no one stateless call")
		return
	}
	if !hasCapability(only.caps, capName) {
		// 2026-07-28: a server must not ask for an input the client did
		// not declare; the client learns what the call needed.
		p.cancel(only, "the client lacks the "+capName+" capability")
		data := map[string]any{"requiredCapabilities": map[string]any{capName: map[string]any{}}}
		st.push(mcp.ErrorResponse(clientID, mcp.CodeMissingCapability, "the call needs the client capability "+capName, data), true)
		_ = p.write(mcp.ErrorResponse(m.ID, mcp.CodeInternal, "the client did not declare "+capName, nil))
		o.b.logVat(p, "refused", m.Method+": the client did not declare "+capName)
		return
	}
	params, ok := m.Get("params")
	if !ok {
		params = []byte("{}")
	}
	expires := time.Now().Add(o.b.cfg.RequestTimeout)
	o.mu.Lock()
	o.nextKey++
	key := "tb-" + strconv.FormatInt(o.nextKey, 10)
	sp := &suspended{c: only, p: p, vatID: bytes.Clone(m.ID)}
	if o.pending == nil {
		o.pending = map[string]*suspended{}
	}
	o.pending[key] = sp
	sp.timer = time.AfterFunc(time.Until(expires), func() { o.expire(key) })
	o.mu.Unlock()
	o.b.touch(only) // a question for its client is progress
	method, _ := json.Marshal(m.Method)
	state, _ := json.Marshal(o.b.seal(o.key, key, expires))
	kq, _ := json.Marshal(key)
	res := `{"resultType":"input_required","inputRequests":{` + string(kq) + `:{"method":` + string(method) + `,"params":` + string(params) + `}},"requestState":` + string(state) + `}`
	st.push(mcp.ResultResponse(clientID, []byte(res)), true)
}

// expire gives up on a suspended call's input: the vat is told so.
func (o *modernOwner) expire(key string) {
	o.mu.Lock()
	sp := o.pending[key]
	delete(o.pending, key)
	o.mu.Unlock()
	if sp != nil {
		_ = sp.p.write(mcp.ErrorResponse(sp.vatID, mcp.CodeInternal, "the client did not retry in time", nil))
	}
}

// hasCapability reports whether a clientCapabilities object declares name.
func hasCapability(caps []byte, name string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(caps, &m) != nil {
		return false
	}
	v, ok := m[name]
	return ok && len(v) > 0 && v[0] == '{'
}

// resume serves a retry that carries a requestState: its input answers
// the vat's suspended request, and the call's answer (or its next
// question) goes to the retry. A state toybox did not make, an expired
// one and one used before get -32602; none is used twice. It reports
// whether m was a retry.
func (o *modernOwner) resume(w http.ResponseWriter, r *http.Request, principal string, m mcp.Msg) bool {
	state, ok := m.GetString("params", "requestState")
	if !ok {
		return false
	}
	refuse := func(reason string) bool {
		o.b.decide(r, principal, mcp.Modern, "", m.Method, http.StatusBadRequest, reason)
		writeError(w, http.StatusBadRequest, m.ID, mcp.CodeInvalidParams, reason, nil)
		return true
	}
	key, err := o.b.open(o.key, state)
	if err != nil {
		return refuse(err.Error())
	}
	o.mu.Lock()
	sp := o.pending[key]
	delete(o.pending, key)
	o.mu.Unlock()
	if sp == nil {
		return refuse("requestState names no call waiting for input (it was used, or its call ended)")
	}
	sp.timer.Stop()
	c, p := sp.c, sp.p
	input, ok := m.Get("params", "inputResponses", key)
	if !ok || m.Method != c.method {
		_ = p.write(mcp.ErrorResponse(sp.vatID, mcp.CodeInternal, "the client's retry did not answer", nil))
		p.cancel(c, "the client's retry did not answer")
		return refuse("the retry must be " + c.method + " with inputResponses[" + strconv.Quote(key) + "]")
	}
	st := newStream("", false)
	st.filter = bridgedResult(c.method)
	p.mu.Lock()
	live := p.calls[c.up] == c
	if live {
		c.st, c.clientID = st, m.ID
	}
	p.mu.Unlock()
	if !live {
		return refuse("the call waiting for this input has ended")
	}
	o.b.touch(c)
	if err := p.write(mcp.ResultResponse(sp.vatID, input)); err != nil {
		o.b.decide(r, principal, mcp.Modern, "", m.Method, http.StatusServiceUnavailable, err.Error())
		writeError(w, http.StatusServiceUnavailable, m.ID, mcp.CodeInternal, err.Error(), nil)
		return true
	}
	var once sync.Once
	gone := func() { once.Do(func() { p.cancel(c, "the client closed its stream") }) }
	done := o.b.serve(w, r, st, writeOpts{lazy: true, sseUnlessError: prefersSSE(r), jsonOnly: !acceptsSSE(r), status: modernStatus, lazyWait: o.b.cfg.LazyWait, onGone: gone})
	reason := "resumed with the client's input"
	if !done {
		reason = "cancelled: the client closed its stream"
	}
	o.b.decide(r, principal, mcp.Modern, "", m.Method, http.StatusOK, reason+" (process "+strconv.Itoa(p.n)+")")
	return true
}
