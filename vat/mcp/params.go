package mcp

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParamBinding is one tool parameter a tool's input schema mirrors into
// a header (x-mcp-header, 2026-07-28): Mcp-Param-<Header> carries the
// argument at Path.
type ParamBinding struct {
	Path   []string
	Header string
}

type schemaProp struct {
	XMCPHeader json.RawMessage       `json:"x-mcp-header"`
	Properties map[string]schemaProp `json:"properties"`
}

// ParamBindings lists a tool input schema's x-mcp-header bindings, at any
// depth.
func ParamBindings(inputSchema []byte) []ParamBinding {
	var s schemaProp
	if json.Unmarshal(inputSchema, &s) != nil {
		return nil
	}
	var out []ParamBinding
	var walk func(props map[string]schemaProp, prefix []string)
	walk = func(props map[string]schemaProp, prefix []string) {
		for name, p := range props {
			path := append(append([]string{}, prefix...), name)
			var h string
			if json.Unmarshal(p.XMCPHeader, &h) == nil && h != "" {
				out = append(out, ParamBinding{Path: path, Header: h})
			}
			if len(path) < 16 {
				walk(p.Properties, path)
			}
		}
	}
	walk(s.Properties, nil)
	return out
}

// CheckParams checks a tools/call's Mcp-Param-* headers against its
// arguments, for the tool's bindings: a header for each argument present
// (not null) that equals it, and none for an argument absent.
func CheckParams(header func(string) string, bs []ParamBinding, m Msg) error {
	for _, b := range bs {
		name := HeaderParam + b.Header
		hv := header(name)
		arg, ok := m.Get(append([]string{"params", "arguments"}, b.Path...)...)
		if !ok || string(arg) == "null" {
			if hv != "" {
				return fmt.Errorf("a %s header for the absent argument %s", name, strings.Join(b.Path, "."))
			}
			continue
		}
		if hv == "" {
			return fmt.Errorf("no %s header for the argument %s", name, strings.Join(b.Path, "."))
		}
		dec, ok := DecodeHeaderValue(hv)
		if !ok {
			return fmt.Errorf("the %s header holds bad Base64", name)
		}
		if !primitiveEqual(dec, arg) {
			return fmt.Errorf("the %s header %q does not match the argument %s", name, hv, strings.Join(b.Path, "."))
		}
	}
	return nil
}

// maxSafe is the largest integer a JSON number holds exactly in a double.
const maxSafe = 1<<53 - 1

// primitiveEqual reports whether a header's (decoded) text stands for the
// JSON value arg: a string as itself, a boolean as true or false, an
// integer (a safe one) as the number.
func primitiveEqual(h string, arg []byte) bool {
	var v any
	if json.Unmarshal(arg, &v) != nil {
		return false
	}
	switch v := v.(type) {
	case string:
		return h == v
	case bool:
		return h == strconv.FormatBool(v)
	case float64:
		if v != math.Trunc(v) || math.Abs(v) > maxSafe {
			return false
		}
		f, err := strconv.ParseFloat(h, 64)
		return err == nil && f == v
	}
	return false
}
