package front

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"toybox/vat/mcp"
)

// The header prefixes the edge alone sets (the transport's names are
// package mcp's).
const (
	// HeaderToybox is a prefix: a client's Toybox-* never reaches a vat.
	HeaderToybox = "Toybox-"
)

// JSON-RPC error codes the edge answers with, beside package mcp's.
const (
	// CodeUnavailable: the vat is not ready (its status says why), or the
	// edge refused before the vat (a server-defined code).
	CodeUnavailable = -32000
	// CodeUnauthorized: no token, or not this vat's.
	CodeUnauthorized = -32002
)

// Request is what the edge reads of one POSTed message.
type Request struct {
	// Method is the JSON-RPC method; "" for a response, or a body that is
	// not one JSON-RPC object ("batch" for an array).
	Method string
	// ID is the request's id as sent, or nil.
	ID json.RawMessage
	// Meta reports whether its params carry the modern protocol version.
	Meta bool
}

// PeekBytes is how much of a POST body Peek is given: the start of a
// message, where its method and id are (the body itself streams to the vat).
const PeekBytes = 16 << 10

// Peek reads the method, id and protocol _meta of a POST body, or of its
// first bytes: it stops where they end. What it cannot read (a body that
// is not a JSON-RPC object, a method after a long params) stays empty: the
// vat answers the message whatever the edge read of it.
func Peek(body []byte) Request {
	b := bytes.TrimLeft(body, " \t\r\n")
	if len(b) > 0 && b[0] == '[' {
		return Request{Method: "batch"}
	}
	if json.Valid(b) {
		// A whole message (most are): its members are found by one scan,
		// not token by token.
		if out, ok := peekWhole(b); ok {
			return out
		}
	}
	return peekTokens(b)
}

// peekWhole is Peek of a whole JSON value b, reading what peekTokens
// reads, member by member, and stopping where it stops; false when b
// is not an object it can scan (peekTokens then reads it).
func peekWhole(b []byte) (Request, bool) {
	fields, ok := mcp.Fields(b)
	if !ok {
		return Request{}, false
	}
	var out Request
	for _, f := range fields {
		switch f.Key {
		case "method":
			m, err := mcp.DecodeString(f.Value)
			if err != nil {
				return out, true
			}
			out.Method = m
		case "id":
			if !bytes.Equal(f.Value, []byte("null")) {
				out.ID = json.RawMessage(f.Value)
			}
		case "params":
			if !peekWholeParams(f.Value, &out) {
				return out, true
			}
		}
	}
	return out, true
}

// peekWholeParams is peekParams of a whole params value v.
func peekWholeParams(v []byte, out *Request) bool {
	if v[0] != '{' {
		return true // an array or a value: nothing the edge reads
	}
	fields, ok := mcp.Fields(v)
	if !ok {
		return false
	}
	for _, f := range fields {
		if f.Key != "_meta" {
			continue
		}
		switch f.Value[0] {
		case 'n': // null: an empty map
			out.Meta = false
		case '{':
			meta, ok := mcp.Fields(f.Value)
			if !ok {
				return false
			}
			out.Meta = false
			for _, m := range meta {
				if m.Key == mcp.MetaProtocolVersion {
					out.Meta = true
				}
			}
		default: // not an object: it is not read, nor what follows
			return false
		}
	}
	return true
}

// peekTokens is Peek of a body that may be cut short: token by token,
// as far as it goes.
func peekTokens(b []byte) Request {
	var out Request
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return Request{}
	}
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return out
		}
		switch key {
		case "method":
			if dec.Decode(&out.Method) != nil {
				return out
			}
		case "id":
			var id json.RawMessage
			if dec.Decode(&id) != nil {
				return out
			}
			if !bytes.Equal(id, []byte("null")) {
				out.ID = id
			}
		case "params":
			if !peekParams(dec, &out) {
				return out
			}
		default:
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return out
			}
		}
	}
	return out
}

// peekParams reads params looking for _meta's protocol version; false
// when the input ended first.
func peekParams(dec *json.Decoder, out *Request) bool {
	t, err := dec.Token()
	if err != nil {
		return false
	}
	if t != json.Delim('{') {
		// Not an object (an array, a value): nothing the edge reads.
		if d, ok := t.(json.Delim); ok && d == '[' {
			for dec.More() {
				var skip json.RawMessage
				if dec.Decode(&skip) != nil {
					return false
				}
			}
			_, err := dec.Token()
			return err == nil
		}
		return true
	}
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return false
		}
		if key == "_meta" {
			var meta map[string]json.RawMessage
			if dec.Decode(&meta) != nil {
				return false
			}
			_, out.Meta = meta[mcp.MetaProtocolVersion]
			continue
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	_, err = dec.Token()
	return err == nil
}

// EraOf says which era a request speaks: modern when it names a modern
// protocol version (the header every modern POST carries, or its _meta);
// legacy otherwise (a missing header means 2025-03-26).
func EraOf(h http.Header, req Request) mcp.Era {
	if v := h.Get(mcp.HeaderVersion); v >= mcp.ModernVersion || req.Meta {
		return mcp.Modern
	}
	return mcp.Legacy
}

// ErrorBody is a JSON-RPC error response, id null when id is nil. Its
// text reads as written: `<vat>` is not escaped as \u003c (WriteError's
// answer is JSON, never sniffed as a page).
func ErrorBody(id json.RawMessage, code int, msg string, data any) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	type rpcError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data,omitempty"`
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcError        `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: rpcError{code, msg, data}})
	if err != nil { // an id that is not JSON: answer with none
		return ErrorBody(nil, code, msg, data)
	}
	return b.Bytes() // Encode ends it with a newline
}

// WriteError answers with a JSON-RPC error and HTTP status.
func WriteError(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string, data any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff") // its text holds `<` as written
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(ErrorBody(id, code, msg, data))
}

// requestHeaders are the client headers that cross into a vat: the MCP
// transport's own (R46, R47). Everything else is built by the edge.
var requestHeaders = []string{"Accept", "Content-Type", mcp.HeaderSession, mcp.HeaderVersion, http.CanonicalHeaderKey(mcp.HeaderLastEvent), mcp.HeaderMethod, mcp.HeaderName}

// RequestHeaders builds the headers of a request into a vat afresh from the
// client's: the MCP transport headers, Mcp-Param-* (which an intermediary
// must forward), and with passAuth the client's Authorization (a vat that
// is its own OAuth resource server). No cookie, no other Authorization,
// and no Toybox-* header crosses.
func RequestHeaders(in http.Header, passAuth bool) http.Header {
	out := make(http.Header, len(requestHeaders)+4)
	for _, k := range requestHeaders {
		if v, ok := in[k]; ok {
			out[k] = v
		}
	}
	for k, v := range in {
		if strings.HasPrefix(k, mcp.HeaderParam) {
			out[k] = v
		}
	}
	if passAuth {
		if v, ok := in["Authorization"]; ok {
			out["Authorization"] = v
		}
	}
	// The answer is streamed as it comes; a compressed one would be held
	// back by the decompressor.
	out.Set("Accept-Encoding", "identity")
	return out
}

// responseHeaders are the vat's answer headers a client gets.
var responseHeaders = []string{"Content-Type", "Content-Length", mcp.HeaderSession, mcp.HeaderVersion, "Cache-Control", "Allow", "Retry-After", "Last-Modified", "Etag"}

// ResponseHeaders keeps of a vat's answer headers what MCP uses (with
// passAuth also its WWW-Authenticate: it is the resource server), in place.
// Cookies, and headers acting on the origin or the proxies in front, go.
func ResponseHeaders(h http.Header, passAuth bool) {
	keep := make(map[string][]string, len(responseHeaders)+1)
	for _, k := range responseHeaders {
		if v, ok := h[k]; ok {
			keep[k] = v
		}
	}
	if v, ok := h["Www-Authenticate"]; ok && passAuth {
		keep["Www-Authenticate"] = v
	}
	for k := range h {
		delete(h, k)
	}
	for k, v := range keep {
		h[k] = v
	}
	if strings.HasPrefix(strings.ToLower(h.Get("Content-Type")), "text/event-stream") {
		// R10: no proxy in front holds the stream back.
		h.Set("X-Accel-Buffering", "no")
		if h.Get("Cache-Control") == "" {
			h.Set("Cache-Control", "no-cache")
		}
	}
}
