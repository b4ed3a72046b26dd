package front

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"toybox/vat/mcp"
)

// The probe's bounds.
const (
	// ProbeTimeout bounds each step of the probe (R4: discover, then
	// initialize after 5 s).
	ProbeTimeout = 5 * time.Second
	// maxProbeBody bounds one answer the probe reads.
	maxProbeBody = 8 << 20
	// maxToolPages bounds how many tools/list pages the probe follows.
	maxToolPages = 50
	// maxToolNames bounds the names kept (the count goes on).
	maxToolNames = 1000
	// What a snapshot keeps of the server's own words is bounded: it goes
	// into the vat's record, each status and the log.
	maxToolName   = 128     // bytes of a tool name (MCP names are 1-128 characters)
	maxInfoField  = 256     // bytes of serverInfo's name, version and title each
	maxVersions   = 16      // protocol versions kept; four exist
	maxVersionLen = 32      // bytes of one (a date is 10); a longer one is dropped
	maxProbeError = 1 << 10 // bytes of the error text
	// LegacyVersion is the version the probe's initialize asks for.
	LegacyVersion = "2025-11-25"
	// ProbePrincipal is the principal the probe's requests carry.
	ProbePrincipal = "toybox:probe"
)

// ServerInfo is a server's name and version as it gives them.
type ServerInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Title   string `json:"title,omitempty"`
}

// Snapshot is what a probe learned of a server, kept in its vat's record.
type Snapshot struct {
	// Code is the code the probe ran against ("sha256:<hex>").
	Code string `json:"code"`
	// Era is legacy, modern or dual; "" when the probe learned none. For
	// a stdio vat it is the server's own, as its bridge found it.
	Era mcp.Era `json:"era,omitempty"`
	// Served is the era the endpoint serves, when it is not Era: a bridge
	// serves modern clients of a legacy server too.
	Served mcp.Era `json:"served,omitempty"`
	// Versions are the protocol versions the server said it speaks
	// (server/discover's supportedVersions, else initialize's answer).
	Versions   []string    `json:"protocol_versions,omitempty"`
	ServerInfo *ServerInfo `json:"server_info,omitempty"`
	// ToolCount is how many tools tools/list gave; Tools their names (at
	// most maxToolNames).
	ToolCount int      `json:"tool_count"`
	Tools     []string `json:"tools"`
	// Probed is when.
	Probed time.Time `json:"probed"`
	// Error says what failed, if anything did (the facts above are what
	// the probe learned before).
	Error string `json:"error,omitempty"`
}

// Prober asks one MCP endpoint.
type Prober struct {
	// Client sends the requests. Required.
	Client *http.Client
	// URL is the endpoint. Required.
	URL string
	// Host is the Host header sent. If empty, the URL's host.
	Host string
}

// rpcAnswer is one JSON-RPC response.
type rpcAnswer struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// call posts one message and returns the response to id (nil id: a
// notification, whose answer must be 202), and the answer's headers.
func (p Prober) call(ctx context.Context, h http.Header, id int, method string, params any) (*rpcAnswer, http.Header, error) {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if id != 0 {
		msg["id"] = id
	}
	if params != nil {
		msg["params"] = params
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderPrincipal, ProbePrincipal)
	if p.Host != "" {
		req.Host = p.Host
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", method, err)
	}
	defer resp.Body.Close()
	if id == 0 {
		if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
			return nil, resp.Header, fmt.Errorf("%s: HTTP %d", method, resp.StatusCode)
		}
		return nil, resp.Header, nil
	}
	a, err := readAnswer(resp, id)
	if err != nil {
		return nil, resp.Header, fmt.Errorf("%s: %w", method, err)
	}
	if a.Error != nil {
		return a, resp.Header, fmt.Errorf("%s: error %d: %s", method, a.Error.Code, a.Error.Message)
	}
	return a, resp.Header, nil
}

// readAnswer reads the response to id from a JSON or SSE answer.
func readAnswer(resp *http.Response, id int) (*rpcAnswer, error) {
	body := io.LimitReader(resp.Body, maxProbeBody)
	ct := strings.ToLower(resp.Header.Get("Content-Type"))
	want := fmt.Sprint(id)
	switch {
	case strings.HasPrefix(ct, "application/json"):
		var a rpcAnswer
		if err := json.NewDecoder(body).Decode(&a); err != nil {
			return nil, fmt.Errorf("HTTP %d, not a JSON-RPC answer: %w", resp.StatusCode, err)
		}
		return &a, nil
	case strings.HasPrefix(ct, "text/event-stream"):
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 64<<10), maxProbeBody)
		var data []byte
		for sc.Scan() {
			line := sc.Bytes()
			if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				data = append(data, bytes.TrimPrefix(d, []byte(" "))...)
				continue
			}
			if len(line) != 0 || len(data) == 0 {
				continue
			}
			var a rpcAnswer
			if json.Unmarshal(data, &a) == nil && a.Method == "" && string(a.ID) == want {
				return &a, nil
			}
			data = data[:0] // a notification, a request, or another answer
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("the event stream ended without the answer")
	}
	return nil, fmt.Errorf("HTTP %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
}

func modernMeta() map[string]any {
	return map[string]any{
		mcp.MetaProtocolVersion:                      mcp.ModernVersion,
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "toybox-probe", "version": "1"},
	}
}

// Probe learns a server's era, serverInfo and tools: server/discover
// first, then initialize whatever discover answered (the fallback is not
// keyed on an error code, and both answering is a dual-era server), then
// tools/list in the era it speaks, then DELETE of the session the
// initialize opened.
func (p Prober) Probe(ctx context.Context) Snapshot {
	snap := p.probe(ctx)
	snap.bound()
	return snap
}

// bound cuts what the snapshot keeps of the server's words to the
// probe's bounds (listTools cuts each name as it goes).
func (snap *Snapshot) bound() {
	if si := snap.ServerInfo; si != nil {
		si.Name, si.Version, si.Title = clip(si.Name, maxInfoField), clip(si.Version, maxInfoField), clip(si.Title, maxInfoField)
	}
	var versions []string
	for _, v := range snap.Versions {
		if len(v) <= maxVersionLen && len(versions) < maxVersions {
			versions = append(versions, v)
		}
	}
	snap.Versions = versions
	snap.Error = clip(snap.Error, maxProbeError)
}

// clip cuts s to at most n bytes, at a rune's start (a string JSON gave
// is valid UTF-8, and stays so), marking the cut with an ellipsis.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func (p Prober) probe(ctx context.Context) Snapshot {
	snap := Snapshot{Probed: time.Now().UTC().Truncate(time.Millisecond), Tools: []string{}}
	var errs []string
	modern, legacy := false, false

	mh := http.Header{}
	mh.Set(mcp.HeaderVersion, mcp.ModernVersion)
	mh.Set(mcp.HeaderMethod, "server/discover")
	if a, _, err := p.call(ctx, mh, 1, "server/discover", map[string]any{"_meta": modernMeta()}); err != nil {
		errs = append(errs, err.Error())
	} else {
		var r struct {
			Supported []string `json:"supportedVersions"`
			Meta      struct {
				ServerInfo *ServerInfo `json:"io.modelcontextprotocol/serverInfo"`
			} `json:"_meta"`
		}
		if err := json.Unmarshal(a.Result, &r); err != nil {
			errs = append(errs, "server/discover: "+err.Error())
		} else {
			snap.Versions, snap.ServerInfo = r.Supported, r.Meta.ServerInfo
			for _, v := range r.Supported {
				modern = modern || v >= mcp.ModernVersion
			}
		}
	}

	var session, negotiated string
	if a, h, err := p.call(ctx, nil, 2, "initialize", map[string]any{
		"protocolVersion": LegacyVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "toybox-probe", "version": "1"},
	}); err != nil {
		errs = append(errs, err.Error())
	} else {
		var r struct {
			Version    string      `json:"protocolVersion"`
			ServerInfo *ServerInfo `json:"serverInfo"`
		}
		if err := json.Unmarshal(a.Result, &r); err != nil || r.Version == "" {
			errs = append(errs, fmt.Sprintf("initialize: an answer without protocolVersion (%v)", err))
		} else {
			legacy, negotiated, session = true, r.Version, h.Get(mcp.HeaderSession)
			if snap.ServerInfo == nil {
				snap.ServerInfo = r.ServerInfo
			}
			if len(snap.Versions) == 0 {
				snap.Versions = []string{r.Version}
			}
		}
	}
	switch {
	case modern && legacy:
		snap.Era = mcp.Dual
	case modern:
		snap.Era = mcp.Modern
	case legacy:
		snap.Era = mcp.Legacy
	default:
		snap.Error = "it answered neither server/discover nor initialize: " + strings.Join(errs, "; ")
		return snap
	}

	lh := http.Header{}
	if legacy {
		lh.Set(mcp.HeaderVersion, negotiated)
		if session != "" {
			lh.Set(mcp.HeaderSession, session)
		}
		if _, _, err := p.call(ctx, lh, 0, "notifications/initialized", nil); err != nil {
			snap.Error = err.Error()
		}
	}
	if snap.Error == "" {
		snap.Error = p.listTools(ctx, legacy, lh, &snap)
	}
	if session != "" {
		p.endSession(ctx, lh)
	}
	return snap
}

// listTools fills in snap's tools, following cursors; it returns what
// failed ("" when nothing did).
func (p Prober) listTools(ctx context.Context, legacy bool, lh http.Header, snap *Snapshot) string {
	cursor := ""
	for page := range maxToolPages {
		params := map[string]any{}
		h := lh
		if !legacy {
			params["_meta"] = modernMeta()
			h = http.Header{}
			h.Set(mcp.HeaderVersion, mcp.ModernVersion)
			h.Set(mcp.HeaderMethod, "tools/list")
		}
		if cursor != "" {
			params["cursor"] = cursor
		}
		a, _, err := p.call(ctx, h, 3+page, "tools/list", params)
		if err != nil {
			return err.Error()
		}
		var r struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
			Next string `json:"nextCursor"`
		}
		if err := json.Unmarshal(a.Result, &r); err != nil {
			return "tools/list: " + err.Error()
		}
		for _, t := range r.Tools {
			snap.ToolCount++
			if len(snap.Tools) < maxToolNames {
				snap.Tools = append(snap.Tools, clip(t.Name, maxToolName))
			}
		}
		if r.Next == "" {
			return ""
		}
		cursor = r.Next
	}
	return fmt.Sprintf("tools/list: more than %d pages", maxToolPages)
}

// endSession ends the probe's legacy session (a per-session stdio vat
// stops its process).
func (p Prober) endSession(ctx context.Context, h http.Header) {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, p.URL, nil)
	if err != nil {
		return
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set(mcp.HeaderPrincipal, ProbePrincipal)
	if p.Host != "" {
		req.Host = p.Host
	}
	if resp, err := p.Client.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}
}
