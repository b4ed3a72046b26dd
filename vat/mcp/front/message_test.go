package front

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"toybox/vat/mcp"
)

var peekTests = []struct {
	name, body, method, id string
	meta                   bool
}{
	{"request", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}`, "tools/call", "7", false},
	{"string id", `{"jsonrpc":"2.0","id":"a-1","method":"ping"}`, "ping", `"a-1"`, false},
	{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, "notifications/initialized", "", false},
	{"response", `{"jsonrpc":"2.0","id":3,"result":{}}`, "", "3", false},
	{"modern", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, "tools/list", "1", true},
	{"batch", ` [{"jsonrpc":"2.0","id":1,"method":"ping"}]`, "batch", "", false},
	{"not json", `hello`, "", "", false},
	{"method after params", `{"jsonrpc":"2.0","params":{"a":[1,2,{"b":"}"}]},"id":2,"method":"tools/call"}`, "tools/call", "2", false},
	{"params an array", `{"jsonrpc":"2.0","params":[1,[2]],"id":2,"method":"x"}`, "x", "2", false},
	{"null id", `{"jsonrpc":"2.0","id":null,"method":"x"}`, "x", "", false},
	{"cut inside params: what came before is kept", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"arguments":{"text":"aaaa`, "tools/call", "5", false},
	{"cut before the method", `{"jsonrpc":"2.0","params":{"text":"aaaa`, "", "", false},
	{"empty", ``, "", "", false},
	{"method twice", `{"method":"a","id":1,"method":"b"}`, "b", "1", false},
	{"a method that is no string stops", `{"method":"a","method":7,"id":1}`, "a", "", false},
	{"meta null", `{"method":"a","params":{"_meta":null},"id":1}`, "a", "1", false},
	{"meta a string stops", `{"method":"a","params":{"_meta":"x"},"id":1}`, "a", "", false},
	{"meta twice, the last counts", `{"method":"a","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"_meta":{}}}`, "a", "", false},
	{"escaped keys", `{"m\u0065thod":"a","params":{"_meta":{"io.modelcontextprotocol\/protocolVersion":"x"}}}`, "a", "", true},
	{"not an object", `"tools/call"`, "", "", false},
}

func TestPeek(t *testing.T) {
	for _, tt := range peekTests {
		r := Peek([]byte(tt.body))
		if r.Method != tt.method || string(r.ID) != tt.id || r.Meta != tt.meta {
			t.Errorf("%s: Peek = %+v (id %s); want %s %s %v", tt.name, r, r.ID, tt.method, tt.id, tt.meta)
		}
	}
}

func FuzzPeek(f *testing.F) {
	for _, tt := range peekTests {
		f.Add(tt.body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r := Peek([]byte(body))
		// A whole message is read in one scan, as the tokens would read it.
		if b := bytes.TrimLeft([]byte(body), " \t\r\n"); json.Valid(b) && (len(b) == 0 || b[0] != '[') {
			want := peekTokens(b)
			if r.Method != want.Method || !bytes.Equal(r.ID, want.ID) || r.Meta != want.Meta {
				t.Fatalf("Peek(%q) = %+v (id %s); token by token %+v (id %s)", body, r, r.ID, want, want.ID)
			}
		}
		if len(r.ID) > 0 && !json.Valid(r.ID) {
			t.Fatalf("Peek(%q) id %q is not JSON", body, r.ID)
		}
		// An id read from a body goes into an error body as it is.
		if !json.Valid(ErrorBody(r.ID, mcp.CodeInternal, "x", nil)) {
			t.Fatalf("ErrorBody with id %q is not JSON", r.ID)
		}
	})
}

func TestEraOf(t *testing.T) {
	tests := []struct {
		version string
		meta    bool
		want    mcp.Era
	}{
		{"", false, mcp.Legacy},
		{"2025-06-18", false, mcp.Legacy},
		{"2025-11-25", false, mcp.Legacy},
		{"2026-07-28", false, mcp.Modern},
		{"2027-01-01", false, mcp.Modern},
		{"", true, mcp.Modern},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.version != "" {
			h.Set(mcp.HeaderVersion, tt.version)
		}
		if got := EraOf(h, Request{Meta: tt.meta}); got != tt.want {
			t.Errorf("EraOf(%q, meta %v) = %s; want %s", tt.version, tt.meta, got, tt.want)
		}
	}
}

func TestErrorBody(t *testing.T) {
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code int `json:"code"`
			Data struct {
				Status string `json:"status"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(ErrorBody(nil, CodeUnavailable, "vat a is starting", map[string]string{"status": "starting"}), &m); err != nil {
		t.Fatal(err)
	}
	if string(m.ID) != "null" || m.Error.Code != CodeUnavailable || m.Error.Data.Status != "starting" {
		t.Errorf("ErrorBody = %+v", m)
	}
}

// TestRequestHeaders: what crosses into a vat is built afresh: the MCP
// transport headers, never a cookie, the client's Authorization (unless
// the vat is its own resource server), a Toybox-* header or anything else.
func TestRequestHeaders(t *testing.T) {
	in := http.Header{}
	for k, v := range map[string]string{
		"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
		"Mcp-Session-Id": "s", "Mcp-Protocol-Version": "2025-11-25", "Last-Event-Id": "e", "Mcp-Method": "tools/call",
		"Mcp-Name": "t", "Mcp-Param-Region": "eu", "Authorization": "Bearer x", "Cookie": "a=b",
		"Toybox-Principal": "forged", "Toybox-Other": "x", "X-Evil": "1", "X-Forwarded-For": "10.0.0.1",
		"Accept-Encoding": "gzip", "Proxy-Authorization": "Basic x",
	} {
		in.Set(k, v)
	}
	want := []string{"Accept", "Accept-Encoding", "Content-Type", "Last-Event-Id", "Mcp-Method", "Mcp-Name", "Mcp-Param-Region", "Mcp-Protocol-Version", "Mcp-Session-Id"}
	keys := func(h http.Header) []string {
		var out []string
		for k := range h {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	out := RequestHeaders(in, false)
	if got := keys(out); !slices.Equal(got, want) {
		t.Errorf("RequestHeaders = %v; want %v", got, want)
	}
	if out.Get("Accept-Encoding") != "identity" {
		t.Errorf("Accept-Encoding = %q; want identity (an answer streams as it comes)", out.Get("Accept-Encoding"))
	}
	withAuth := RequestHeaders(in, true)
	if withAuth.Get("Authorization") != "Bearer x" || withAuth.Get("Cookie") != "" {
		t.Errorf("for a vat that is its own resource server: Authorization %q, Cookie %q; want the Authorization and no cookie", withAuth.Get("Authorization"), withAuth.Get("Cookie"))
	}
}

func TestResponseHeaders(t *testing.T) {
	h := http.Header{}
	for k, v := range map[string]string{
		"Content-Type": "text/event-stream", "Mcp-Session-Id": "s", "Set-Cookie": "a=b; Path=/",
		"Www-Authenticate": "Bearer", "Clear-Site-Data": "*", "X-Accel-Redirect": "/etc/passwd",
		"Strict-Transport-Security": "max-age=1", "Access-Control-Allow-Origin": "*",
	} {
		h.Set(k, v)
	}
	ResponseHeaders(h, false)
	for _, k := range []string{"Set-Cookie", "Www-Authenticate", "Clear-Site-Data", "X-Accel-Redirect", "Strict-Transport-Security", "Access-Control-Allow-Origin"} {
		if h.Get(k) != "" {
			t.Errorf("%s passed to the client", k)
		}
	}
	if h.Get("Mcp-Session-Id") != "s" || h.Get("X-Accel-Buffering") != "no" || h.Get("Cache-Control") != "no-cache" {
		t.Errorf("an SSE answer's headers = %v; want its session, X-Accel-Buffering: no, Cache-Control: no-cache", h)
	}
	h2 := http.Header{"Www-Authenticate": {"Bearer"}, "Content-Type": {"application/json"}}
	ResponseHeaders(h2, true)
	if h2.Get("Www-Authenticate") != "Bearer" || h2.Get("X-Accel-Buffering") != "" {
		t.Errorf("an own resource server's JSON answer = %v; want its challenge kept and no SSE headers", h2)
	}
}

// TestPeekAllocs: the edge peeks at every POST. A whole tools/call is
// read with the member lists it needs and its method's one copy, not
// encoding/json's decoder.
func TestPeekAllocs(t *testing.T) {
	body := []byte(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"a":5,"b":1}}}`)
	if r := Peek(body); r.Method != "tools/call" || string(r.ID) != "5" {
		t.Fatalf("Peek(%s) = %+v (id %s); want tools/call 5", body, r, r.ID)
	}
	const want = 3 // the method, two member lists
	if got := testing.AllocsPerRun(200, func() { _ = Peek(body) }); got > want+allocSlack {
		t.Errorf("Peek(%s) allocates %v times; want at most %v", body, got, want)
	}
}

// TestErrorBodyReadsAsWritten: a message naming `<vat>` or `a & b` reads
// as written in the bytes a client gets, not as \u003c escapes. That is
// safe because the answer is application/json, never sniffed as a page.
func TestErrorBodyReadsAsWritten(t *testing.T) {
	const msg = "POST /<vat>/mcp: vat a & b > c is starting"
	body := ErrorBody(json.RawMessage(`"<id>"`), CodeUnavailable, msg, map[string]string{"why": "<off>"})
	for _, want := range []string{`"message":"` + msg + `"`, `"id":"<id>"`, `"why":"<off>"`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("ErrorBody = %s; want it to hold %s", body, want)
		}
	}
	if !json.Valid(body) {
		t.Errorf("ErrorBody = %s; not JSON", body)
	}
	w := httptest.NewRecorder()
	WriteError(w, http.StatusNotFound, nil, mcp.CodeInvalidRequest, msg, nil)
	h := w.Result().Header
	if got := h.Get("Content-Type"); got != "application/json" {
		t.Errorf("WriteError Content-Type = %q; want application/json", got)
	}
	if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("WriteError X-Content-Type-Options = %q; want nosniff", got)
	}
	if !bytes.Contains(w.Body.Bytes(), []byte(msg)) {
		t.Errorf("WriteError body = %s; want it to hold %s", w.Body.Bytes(), msg)
	}
}
