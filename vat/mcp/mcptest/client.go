package mcptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// UnixHTTP is an HTTP client that reaches every URL on the unix socket
// at path.
func UnixHTTP(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableCompression: true,
	}}
}

// Client speaks to a bridge's endpoint as the supervisor would pass a
// client's requests on: with the principal header set.
type Client struct {
	HTTP      *http.Client
	URL       string // the endpoint, e.g. http://bridge/mcp
	Principal string
	// PrincipalEnv is sent as Toybox-Principal-Env (mcp.EncodeEnv), as
	// the supervisor sends a token's secrets.
	PrincipalEnv string
	Session      string // set by Initialize
	Version      string // the negotiated version
}

// Event is one server-sent event.
type Event struct {
	ID, Name, Data string
	Retry          string
}

// Resp is one HTTP answer, read whole: the JSON body or every SSE event.
type Resp struct {
	Status int
	Header http.Header
	Body   []byte  // a JSON answer's body
	Events []Event // an event stream's events
}

// Msgs are the JSON-RPC messages the answer carried.
func (r *Resp) Msgs() []map[string]json.RawMessage {
	var out []map[string]json.RawMessage
	add := func(b []byte) {
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) == nil {
			out = append(out, m)
		}
	}
	if len(r.Body) > 0 {
		add(r.Body)
	}
	for _, e := range r.Events {
		if e.Data != "" {
			add([]byte(e.Data))
		}
	}
	return out
}

// Final is the response message (one with an id and a result or error).
func (r *Resp) Final() map[string]json.RawMessage {
	for _, m := range r.Msgs() {
		if _, ok := m["method"]; ok {
			continue
		}
		if m["result"] != nil || m["error"] != nil {
			return m
		}
	}
	return nil
}

// Text is the first text content of the final result, or its error's
// message.
func (r *Resp) Text() string {
	f := r.Final()
	if f == nil {
		return ""
	}
	if f["error"] != nil {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(f["error"], &e)
		return "error: " + e.Message
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(f["result"], &res)
	if len(res.Content) == 0 {
		return ""
	}
	return res.Content[0].Text
}

// Request builds a JSON-RPC request.
func Request(id any, method string, params any) []byte {
	m := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		m["params"] = params
	}
	b, _ := json.Marshal(m)
	return b
}

// Tool builds a tools/call request.
func Tool(id any, name string, args map[string]any) []byte {
	if args == nil {
		args = map[string]any{}
	}
	return Request(id, "tools/call", map[string]any{"name": name, "arguments": args})
}

// Open sends one POST and returns the open response (the caller reads
// and closes its body). hdr are header name/value pairs.
func (c *Client) Open(ctx context.Context, body []byte, hdr ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	c.headers(req)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return c.HTTP.Do(req)
}

func (c *Client) headers(req *http.Request) {
	if c.Principal != "" {
		req.Header.Set("Toybox-Principal", c.Principal)
	}
	if c.PrincipalEnv != "" {
		req.Header.Set("Toybox-Principal-Env", c.PrincipalEnv)
	}
	if c.Session != "" {
		req.Header.Set("Mcp-Session-Id", c.Session)
	}
	if c.Version != "" {
		req.Header.Set("Mcp-Protocol-Version", c.Version)
	}
}

// Post sends one message and reads the whole answer.
func (c *Client) Post(ctx context.Context, body []byte, hdr ...string) (*Resp, error) {
	resp, err := c.Open(ctx, body, hdr...)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return Read(resp)
}

// Read reads a whole answer.
func Read(resp *http.Response) (*Resp, error) {
	r := &Resp{Status: resp.StatusCode, Header: resp.Header}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		br := bufio.NewReader(resp.Body)
		for {
			e, err := ReadEvent(br)
			if err != nil {
				if errors.Is(err, io.EOF) {
					return r, nil
				}
				return r, err
			}
			r.Events = append(r.Events, e)
		}
	}
	b, err := io.ReadAll(resp.Body)
	r.Body = b
	return r, err
}

// ReadEvent reads one event (comments skipped).
func ReadEvent(br *bufio.Reader) (Event, error) {
	var e Event
	var data []string
	any := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return e, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if any {
				e.Data = strings.Join(data, "\n")
				return e, nil
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		any = true
		switch k {
		case "id":
			e.ID = v
		case "event":
			e.Name = v
		case "data":
			data = append(data, v)
		case "retry":
			e.Retry = v
		}
	}
}

// Initialize opens a session at version (2025-11-25 if empty).
func (c *Client) Initialize(ctx context.Context, version string, caps map[string]any) error {
	if version == "" {
		version = "2025-11-25"
	}
	if caps == nil {
		caps = map[string]any{}
	}
	c.Session, c.Version = "", ""
	r, err := c.Post(ctx, Request(0, "initialize", map[string]any{
		"protocolVersion": version, "capabilities": caps,
		"clientInfo": map[string]any{"name": "mcptest", "version": "1"},
	}))
	if err != nil {
		return err
	}
	f := r.Final()
	if r.Status != http.StatusOK || f == nil || f["result"] == nil {
		return fmt.Errorf("initialize: %d %s %+v", r.Status, r.Body, r.Events)
	}
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	_ = json.Unmarshal(f["result"], &res)
	c.Session, c.Version = r.Header.Get("Mcp-Session-Id"), res.ProtocolVersion
	if c.Session == "" {
		return errors.New("initialize: no Mcp-Session-Id")
	}
	n, err := c.Post(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	if err != nil {
		return err
	}
	if n.Status != http.StatusAccepted {
		return fmt.Errorf("notifications/initialized: %d %s", n.Status, n.Body)
	}
	return nil
}

// Get opens the session's GET stream (from lastEventID if set).
func (c *Client) Get(ctx context.Context, lastEventID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	c.headers(req)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	return c.HTTP.Do(req)
}

// Delete ends the session.
func (c *Client) Delete(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.URL, nil)
	if err != nil {
		return 0, err
	}
	c.headers(req)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Stats fetches the bridge's counters from base (the socket's root URL).
func Stats(ctx context.Context, hc *http.Client, base string) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/toybox/mcp-stats", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	return m, json.NewDecoder(resp.Body).Decode(&m)
}

// Eventually retries f until it returns nil or d passes.
func Eventually(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
