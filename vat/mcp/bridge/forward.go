package bridge

import (
	"encoding/json"
	"net/http"
	"slices"

	"toybox/vat/mcp"
)

// A 2025 client of a vat that speaks only 2026-07-28 (its install probe
// says modern) is bridged the other way (R5): toybox answers its
// initialize from the vat's server/discover, serves the session from the
// principal's stateless process, and adds the per-request _meta to each
// request it forwards.

// initializeForward starts a session bridged to a modern-only vat.
func (b *Bridge) initializeForward(w http.ResponseWriter, r *http.Request, s *session, m mcp.Msg) {
	o, err := b.modernFor(s.principal, s.env)
	if err != nil {
		b.unavailable(w, r, s.principal, mcp.Legacy, m, err)
		return
	}
	dm, _ := mcp.Parse(mcp.Request([]byte("0"), "server/discover", discoverParams))
	resp, err := b.callSelf(o.p, dm, discoverTimeout)
	if err != nil || resp.Result() == nil {
		reason := "the vat did not answer server/discover"
		if err != nil {
			reason += ": " + err.Error()
		}
		b.decide(r, s.principal, mcp.Legacy, "", m.Method, http.StatusBadGateway, reason)
		writeError(w, http.StatusBadGateway, m.ID, mcp.CodeInternal, reason, nil)
		return
	}
	var disc struct {
		Capabilities json.RawMessage `json:"capabilities"`
		Instructions string          `json:"instructions,omitempty"`
	}
	_ = json.Unmarshal(resp.Result(), &disc)
	info, _ := resp.Get("result", "_meta", "io.modelcontextprotocol/serverInfo")
	version, _ := m.GetString("params", "protocolVersion")
	if !slices.Contains(mcp.LegacyVersions, version) {
		version = mcp.LegacyVersions[len(mcp.LegacyVersions)-1]
	}
	res := map[string]any{"protocolVersion": version, "capabilities": disc.Capabilities, "serverInfo": json.RawMessage(info)}
	if len(info) == 0 {
		res["serverInfo"] = map[string]any{"name": b.cfg.Vat, "version": "unknown"}
	}
	if disc.Instructions != "" {
		res["instructions"] = disc.Instructions
	}
	caps, ok := m.Get("params", "capabilities")
	if !ok {
		caps = []byte("{}")
	}
	s.p, s.fwd, s.version = o.p, caps, version
	b.mu.Lock()
	b.sessions[s.id] = s
	b.mu.Unlock()
	rj, _ := json.Marshal(res)
	w.Header().Set(mcp.HeaderSession, s.id)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(mcp.ResultResponse(m.ID, rj))
	b.decide(r, s.principal, mcp.Legacy, s.id, m.Method, http.StatusOK, "answered from the modern vat's server/discover; the session is bridged")
}

// forwardLocal answers what a bridged session's client sends that a
// modern vat has no method for; it reports whether it answered.
func (s *session) forwardLocal(w http.ResponseWriter, r *http.Request, m mcp.Msg) bool {
	switch m.Method {
	case "ping", "logging/setLevel":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(mcp.ResultResponse(m.ID, []byte("{}")))
		s.b.decide(r, s.principal, mcp.Legacy, s.id, m.Method, http.StatusOK, "answered by toybox (the vat is 2026-07-28 only)")
		return true
	case "initialize":
		writeError(w, http.StatusBadRequest, m.ID, mcp.CodeInvalidRequest, "the session is initialized", nil)
		return true
	}
	return false
}

// withMeta adds the 2026-07-28 per-request _meta to a 2025 request: the
// version, the session's client capabilities, toybox as the client.
func (s *session) withMeta(m mcp.Msg) (mcp.Msg, error) {
	raw := m.Raw
	add := func(path []string, key string, v []byte) {
		if out, ok := mcp.Insert(raw, path, key, v); ok {
			raw = out
		}
	}
	if m.Params() == nil {
		add(nil, "params", []byte("{}"))
	}
	add([]string{"params"}, "_meta", []byte("{}"))
	meta := []string{"params", "_meta"}
	add(meta, mcp.MetaClientInfo, []byte(`{"name":"toybox","version":"1"}`))
	add(meta, mcp.MetaClientCapabilities, s.fwd)
	add(meta, mcp.MetaProtocolVersion, []byte(`"`+mcp.ModernVersion+`"`))
	return mcp.Parse(raw)
}
