package mcp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// envNameRe is a variable name a principal's environment may set.
var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// EnvMark begins the part of a principal that a client's own header
// values add (mcp.headerEnv): "token:<id>/env:<digest>".
const EnvMark = "/env:"

// Holder returns who holds principal's share of a vat's bounds: the
// principal without the part its client's own header values add. A client
// that sends new values makes a new principal each time, with processes
// and sessions of its own, but stays one holder: the bounds that keep one
// client from crowding out the others count it once.
func Holder(principal string) string {
	h, _, _ := strings.Cut(principal, EnvMark)
	return h
}

// MaxEnvHeader bounds HeaderPrincipalEnv's value.
const MaxEnvHeader = 64 << 10

// EncodeEnv encodes a principal's environment for HeaderPrincipalEnv:
// base64 of a JSON object of names and values. Empty for none.
func EncodeEnv(env map[string]string) string {
	if len(env) == 0 {
		return ""
	}
	b, _ := json.Marshal(env) // a map of strings always encodes
	return base64.StdEncoding.EncodeToString(b)
}

// DecodeEnv reads HeaderPrincipalEnv's value as NAME=value entries sorted
// by name; nil for "". A bad name, a NUL or an encoding error refuses the
// whole value.
func DecodeEnv(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) > MaxEnvHeader {
		return nil, fmt.Errorf("the principal's environment is over %d bytes", MaxEnvHeader)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("the principal's environment: %w", err)
	}
	var env map[string]string
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("the principal's environment: %w", err)
	}
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		if !envNameRe.MatchString(k) || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("the principal's environment: bad variable %q", k)
		}
		out = append(out, k+"="+v)
	}
	return out, nil
}
