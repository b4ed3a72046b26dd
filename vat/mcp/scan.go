package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// member is one member of a JSON object: its key and the span of its value.
type member struct {
	key        string
	start, end int // the value is b[start:end]
}

var errSyntax = errors.New("not a JSON object")

// maxNest bounds the nesting skipValue walks (encoding/json allows 10000).
const maxNest = 10000

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] (a '"').
func skipString(b []byte, i int) (int, error) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, errSyntax
}

// skipValue returns the index after the JSON value starting at b[i]. It
// trusts b to be valid JSON (json.Valid ran first) but never reads out of
// bounds on any input.
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errSyntax
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				e, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = e - 1
			case '{', '[':
				if depth++; depth > maxNest {
					return 0, errSyntax
				}
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, nil
				}
			}
		}
		return 0, errSyntax
	default:
		s := i
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && !isSpace(b[i]) {
			i++
		}
		if i == s {
			return 0, errSyntax
		}
		return i, nil
	}
}

// decodeKey returns the string a JSON string literal (with its quotes)
// stands for.
func decodeKey(lit []byte) (string, error) {
	if len(lit) >= 2 && bytes.IndexByte(lit[1:len(lit)-1], '\\') < 0 {
		raw := lit[1 : len(lit)-1]
		// A message's own keys, and those of MCP's params the bridge
		// looks through, are the same few strings every time: those
		// are not copied (the switch converts without one).
		switch string(raw) {
		case "jsonrpc":
			return "jsonrpc", nil
		case "id":
			return "id", nil
		case "method":
			return "method", nil
		case "params":
			return "params", nil
		case "result":
			return "result", nil
		case "error":
			return "error", nil
		case "_meta":
			return "_meta", nil
		case "name":
			return "name", nil
		case "arguments":
			return "arguments", nil
		case "progressToken":
			return "progressToken", nil
		}
		return string(raw), nil
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return "", errSyntax
	}
	return s, nil
}

// members lists the members of the object b[i:] starts with (after
// whitespace) and returns the index after it. Only the spans of values are
// found; nested objects are skipped whole.
func members(b []byte, i int) ([]member, int, error) {
	return appendMembers(nil, b, i)
}

// appendMembers is members appending to ms (whose room a caller may keep
// on its stack).
func appendMembers(ms []member, b []byte, i int) ([]member, int, error) {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return nil, 0, errSyntax
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return ms, i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, 0, errSyntax
		}
		ke, err := skipString(b, i)
		if err != nil {
			return nil, 0, err
		}
		key, err := decodeKey(b[i:ke])
		if err != nil {
			return nil, 0, err
		}
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return nil, 0, errSyntax
		}
		vs := skipSpace(b, i+1)
		ve, err := skipValue(b, vs)
		if err != nil {
			return nil, 0, err
		}
		ms = append(ms, member{key: key, start: vs, end: ve})
		i = skipSpace(b, ve)
		if i >= len(b) {
			return nil, 0, errSyntax
		}
		if b[i] == '}' {
			return ms, i + 1, nil
		}
		if b[i] != ',' {
			return nil, 0, errSyntax
		}
		i = skipSpace(b, i+1)
	}
}

// find returns the member named key, or false.
func find(ms []member, key string) (member, bool) {
	for _, m := range ms {
		if m.key == key {
			return m, true
		}
	}
	return member{}, false
}

// splice returns b with b[start:end] replaced by v (a new slice).
func splice(b []byte, start, end int, v []byte) []byte {
	out := make([]byte, 0, len(b)-(end-start)+len(v))
	out = append(out, b[:start]...)
	out = append(out, v...)
	return append(out, b[end:]...)
}

// Field is one member of a JSON object: its key and its value's JSON.
type Field struct {
	Key   string
	Value []byte
}

// Fields lists the members of the JSON object b, in order, keys decoded;
// false when b is not one object and nothing else. b must be valid JSON
// (json.Valid): only the values' spans are found, nested values are
// skipped whole.
func Fields(b []byte) ([]Field, bool) {
	var room [8]member // most objects of a message have few members
	ms, end, err := appendMembers(room[:0], b, 0)
	if err != nil || skipSpace(b, end) != len(b) {
		return nil, false
	}
	out := make([]Field, len(ms))
	for i, m := range ms {
		out[i] = Field{Key: m.key, Value: b[m.start:m.end]}
	}
	return out, true
}

// DecodeString returns the string JSON value lit stands for, as
// json.Unmarshal into a string reads it (an error for any other value).
// A plain one (plainString) is its bytes, copied once, without
// encoding/json's decoder.
func DecodeString(lit []byte) (string, error) {
	if plainString(lit) && utf8.Valid(lit) {
		return string(lit[1 : len(lit)-1]), nil
	}
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err
}

// validString reports whether lit is a JSON string, as DecodeString would
// decode it, without decoding it.
func validString(lit []byte) bool {
	if plainString(lit) {
		return true
	}
	var s string
	return json.Unmarshal(lit, &s) == nil
}

// plainString reports whether lit is a JSON string with nothing around
// its quotes and no escape or control character inside them.
func plainString(lit []byte) bool {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return false
	}
	for _, c := range lit[1 : len(lit)-1] {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
