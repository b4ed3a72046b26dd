package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Kind is what a JSON-RPC message is.
type Kind int

// Kinds.
const (
	KindRequest Kind = iota + 1
	KindNotification
	KindResponse
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindNotification:
		return "notification"
	case KindResponse:
		return "response"
	}
	return "invalid"
}

// Msg is one JSON-RPC 2.0 message, read only as far as routing needs.
// Raw holds its bytes as they came: nothing is re-encoded, so every string
// in it (an emoji with a zero-width joiner, U+2028) passes byte for byte.
type Msg struct {
	Raw    []byte
	Kind   Kind
	Method string // requests and notifications
	// ID is the id's JSON: a string or an integer. Nil for a notification.
	ID []byte

	id, params, result, err      member
	hasParams, hasResult, hasErr bool
}

// the top-level keys a message may have, which no other key may equal but
// for letter case (encoding/json, and so many servers, match keys that way).
var topKeys = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// Parse reads one message. It refuses what a receiver could read two ways:
// a key given twice, a top-level key that equals a known one but for
// letter case, an id that is neither a string nor an integer.
func Parse(b []byte) (Msg, error) {
	if !json.Valid(b) {
		return Msg{}, ErrNotJSON
	}
	// Room for a message's members on the stack: most have four.
	var room [8]member
	ms, end, err := appendMembers(room[:0], b, 0)
	if err != nil || skipSpace(b, end) != len(b) {
		return Msg{}, fmt.Errorf("%w: not an object", ErrNotJSONRPC)
	}
	m := Msg{Raw: b}
	var seen map[string]bool
	if len(ms) > len(room) {
		seen = make(map[string]bool, len(ms))
	}
	for i, mb := range ms {
		twice := false
		if seen != nil {
			twice = seen[mb.key]
			seen[mb.key] = true
		} else {
			// A few keys: each is looked for before it, without a map.
			_, twice = find(ms[:i], mb.key)
		}
		if twice {
			return Msg{}, fmt.Errorf("%w: key %q twice", ErrNotJSONRPC, mb.key)
		}
		for _, k := range topKeys {
			if mb.key != k && strings.EqualFold(mb.key, k) {
				return Msg{}, fmt.Errorf("%w: key %q", ErrNotJSONRPC, mb.key)
			}
		}
	}
	v, ok := find(ms, "jsonrpc")
	if !ok || string(b[v.start:v.end]) != `"2.0"` {
		return Msg{}, fmt.Errorf("%w: no \"jsonrpc\": \"2.0\"", ErrNotJSONRPC)
	}
	m.id, ok = find(ms, "id")
	if ok {
		m.ID = b[m.id.start:m.id.end]
		if !ValidID(m.ID) {
			return Msg{}, fmt.Errorf("%w: id %.40s is not a string or an integer", ErrNotJSONRPC, m.ID)
		}
	}
	m.params, m.hasParams = find(ms, "params")
	m.result, m.hasResult = find(ms, "result")
	m.err, m.hasErr = find(ms, "error")
	if meth, ok := find(ms, "method"); ok {
		if m.Method, err = DecodeString(b[meth.start:meth.end]); err != nil || m.Method == "" {
			return Msg{}, fmt.Errorf("%w: method is not a string", ErrNotJSONRPC)
		}
		if m.hasResult || m.hasErr {
			return Msg{}, fmt.Errorf("%w: a method and a result", ErrNotJSONRPC)
		}
		if m.hasParams && b[m.params.start] != '{' && b[m.params.start] != '[' {
			return Msg{}, fmt.Errorf("%w: params is not an object", ErrNotJSONRPC)
		}
		m.Kind = KindNotification
		if m.ID != nil {
			m.Kind = KindRequest
		}
		return m, nil
	}
	if m.ID == nil || m.hasResult == m.hasErr {
		return Msg{}, fmt.Errorf("%w: neither a request, a notification nor a response", ErrNotJSONRPC)
	}
	m.Kind = KindResponse
	return m, nil
}

// ValidID reports whether id is the JSON of a string or an integer.
func ValidID(id []byte) bool {
	if len(id) == 0 {
		return false
	}
	if id[0] == '"' {
		return validString(id)
	}
	_, err := strconv.ParseInt(string(id), 10, 64)
	return err == nil
}

// Params is the params' JSON, or nil.
func (m Msg) Params() []byte {
	if !m.hasParams {
		return nil
	}
	return m.Raw[m.params.start:m.params.end]
}

// Result is the result's JSON, or nil.
func (m Msg) Result() []byte {
	if !m.hasResult {
		return nil
	}
	return m.Raw[m.result.start:m.result.end]
}

// Error is the error's JSON, or nil.
func (m Msg) Error() []byte {
	if !m.hasErr {
		return nil
	}
	return m.Raw[m.err.start:m.err.end]
}

// ErrorCode is an error response's code.
func (m Msg) ErrorCode() (int, bool) {
	if !m.hasErr {
		return 0, false
	}
	var e struct {
		Code *int `json:"code"`
	}
	if json.Unmarshal(m.Error(), &e) != nil || e.Code == nil {
		return 0, false
	}
	return *e.Code, true
}

// WithID returns the message with its id replaced by id (JSON).
func (m Msg) WithID(id []byte) []byte {
	if m.ID == nil {
		return m.Raw
	}
	return splice(m.Raw, m.id.start, m.id.end, id)
}

// Get returns the JSON at path below the message's top level (for example
// "params", "_meta", "progressToken"), or false.
func (m Msg) Get(path ...string) ([]byte, bool) {
	s, e, ok := lookup(m.Raw, path)
	if !ok {
		return nil, false
	}
	return m.Raw[s:e], true
}

// GetString returns the string at path, or false.
func (m Msg) GetString(path ...string) (string, bool) {
	v, ok := m.Get(path...)
	if !ok || len(v) == 0 || v[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// Set returns raw with the existing value at path replaced by v (JSON),
// or false when raw has nothing at path.
func Set(raw []byte, path []string, v []byte) ([]byte, bool) {
	s, e, ok := lookup(raw, path)
	if !ok {
		return raw, false
	}
	return splice(raw, s, e, v), true
}

// lookup finds the span of the value at path in the object raw.
func lookup(raw []byte, path []string) (int, int, bool) {
	if len(path) == 0 {
		return 0, 0, false
	}
	i := 0
	var room [8]member // each level's members, on the stack while few
	for n, key := range path {
		ms, _, err := appendMembers(room[:0], raw, i)
		if err != nil {
			return 0, 0, false
		}
		m, ok := find(ms, key)
		if !ok {
			return 0, 0, false
		}
		if n == len(path)-1 {
			return m.start, m.end, true
		}
		i = m.start
	}
	return 0, 0, false
}

// Meta keys of the 2026-07-28 revision.
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaSubscriptionID     = "io.modelcontextprotocol/subscriptionId"
)

// Request builds a request's JSON.
func Request(id []byte, method string, params []byte) []byte {
	return build(id, method, params)
}

// Notification builds a notification's JSON.
func Notification(method string, params []byte) []byte {
	return build(nil, method, params)
}

func build(id []byte, method string, params []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0",`)
	if id != nil {
		b.WriteString(`"id":`)
		b.Write(id)
		b.WriteByte(',')
	}
	b.WriteString(`"method":`)
	mj, _ := json.Marshal(method)
	b.Write(mj)
	if params != nil {
		b.WriteString(`,"params":`)
		b.Write(params)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// Result builds a result response's JSON.
func ResultResponse(id, result []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(id)
	b.WriteString(`,"result":`)
	b.Write(result)
	b.WriteByte('}')
	return b.Bytes()
}

// ErrorResponse builds an error response's JSON. A nil id is written as
// null (an error about a message whose id is unknown).
func ErrorResponse(id []byte, code int, message string, data any) []byte {
	if id == nil {
		id = []byte("null")
	}
	e := struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data,omitempty"`
	}{code, message, data}
	ej, _ := json.Marshal(e)
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(id)
	b.WriteString(`,"error":`)
	b.Write(ej)
	b.WriteByte('}')
	return b.Bytes()
}

// JSON-RPC and MCP error codes.
const (
	CodeParse             = -32700
	CodeInvalidRequest    = -32600
	CodeMethodNotFound    = -32601
	CodeInvalidParams     = -32602
	CodeInternal          = -32603
	CodeRequestTimeout    = -32001 // a request timed out
	CodeSessionNotFound   = -32001 // the code SDKs read as "initialize again"
	CodeHeaderMismatch    = -32020
	CodeMissingCapability = -32021
	CodeUnsupportedVer    = -32022
)

// Insert returns raw with the member key: v added first in the object
// at path (an empty path: the top level), or false when there is no
// object there or it has key already.
func Insert(raw []byte, path []string, key string, v []byte) ([]byte, bool) {
	start := 0
	if len(path) > 0 {
		s, _, ok := lookup(raw, path)
		if !ok {
			return raw, false
		}
		start = s
	}
	ms, _, err := members(raw, start)
	if err != nil {
		return raw, false
	}
	if _, has := find(ms, key); has {
		return raw, false
	}
	open := skipSpace(raw, start) + 1
	kj, _ := json.Marshal(key)
	ins := append(append(kj, ':'), v...)
	if len(ms) > 0 {
		ins = append(ins, ',')
	}
	return splice(raw, open, open, ins), true
}

// SplitBatch returns the elements of a JSON-RPC batch (a JSON array),
// each as its bytes; an error when b is not a non-empty array.
func SplitBatch(b []byte) ([][]byte, error) {
	if !json.Valid(b) {
		return nil, ErrNotJSON
	}
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, fmt.Errorf("%w: not an array", ErrNotJSONRPC)
	}
	var out [][]byte
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return nil, fmt.Errorf("%w: an empty batch", ErrNotJSONRPC)
	}
	for {
		e, err := skipValue(b, i)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotJSONRPC, err)
		}
		out = append(out, b[i:e])
		i = skipSpace(b, e)
		if i >= len(b) {
			return nil, errSyntax
		}
		if b[i] == ']' {
			return out, nil
		}
		if b[i] != ',' {
			return nil, errSyntax
		}
		i = skipSpace(b, i+1)
	}
}
