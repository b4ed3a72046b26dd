package mcp

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Era is a protocol era: the 2025 revisions, with sessions, or the
// stateless 2026-07-28.
type Era string

// Eras. A vat's is Legacy, Modern or Dual (serves both, per process).
const (
	Legacy Era = "legacy"
	Modern Era = "modern"
	Dual   Era = "dual"
)

// ModernVersion is the first stateless revision.
const ModernVersion = "2026-07-28"

// LegacyVersions are the session revisions the bridge serves, oldest first.
var LegacyVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}

// ModernVersions are the stateless revisions the bridge serves.
var ModernVersions = []string{ModernVersion}

// IsModernVersion reports whether v names a stateless revision (any date
// from 2026-07-28 on, known or not: the era is chosen by the date, the
// support by the lists).
func IsModernVersion(v string) bool { return v >= ModernVersion }

// Supported reports whether the bridge serves revision v.
func Supported(v string) bool {
	return slices.Contains(LegacyVersions, v) || slices.Contains(ModernVersions, v)
}

// Header names of the Streamable HTTP transport, and the one toybox adds.
const (
	HeaderSession   = "Mcp-Session-Id"
	HeaderVersion   = "Mcp-Protocol-Version"
	HeaderMethod    = "Mcp-Method"
	HeaderName      = "Mcp-Name"
	HeaderParam     = "Mcp-Param-"
	HeaderLastEvent = "Last-Event-ID"
	// HeaderPrincipal names who asks. Only the supervisor sets it: it
	// strips a client's copy and is the only one that reaches the bridge.
	HeaderPrincipal = "Toybox-Principal"
	// HeaderPrincipalEnv carries the principal's own environment (its
	// secrets, R22; EncodeEnv), set by the supervisor alone like
	// HeaderPrincipal.
	HeaderPrincipalEnv = "Toybox-Principal-Env"
	// HeaderCache names what the bridge may answer from its cache
	// (CacheToolsList), set by the supervisor alone for a vat whose
	// manifest opts in (R48). Without it nothing is cached.
	HeaderCache = "Toybox-Cache"
)

// CacheToolsList is HeaderCache's one value: tools/list.
const CacheToolsList = "tools/list"

// Decision is a pure verdict with its reason: refused when Code is set.
type Decision struct {
	Status  int    // HTTP status of a refusal
	Code    int    // JSON-RPC error code (0: allowed)
	Message string // the reason, for the client and the log
	Data    any    // the error's data
}

// Allowed reports whether d lets the request through.
func (d Decision) Allowed() bool { return d.Code == 0 }

// CheckModern checks a stateless request against its mirrored headers
// (2026-07-28 "Streamable HTTP"): the version header equals the body's,
// is one served, Mcp-Method equals the method, Mcp-Name the name of a
// tools/call, prompts/get or resources/read, and _meta holds the required
// keys. header is the request's header lookup.
func CheckModern(header func(string) string, m Msg) Decision {
	hv := header(HeaderVersion)
	bv, hasBV := m.GetString("params", "_meta", MetaProtocolVersion)
	if hv == "" {
		return Decision{400, CodeHeaderMismatch, fmt.Sprintf("the %s header is required for a request carrying %s", HeaderVersion, MetaProtocolVersion), nil}
	}
	if !slices.Contains(ModernVersions, hv) {
		return Decision{400, CodeUnsupportedVer, fmt.Sprintf("protocol version %q is not supported", hv), map[string]any{"supported": append(slices.Clone(ModernVersions), LegacyVersions...), "requested": hv}}
	}
	if m.Kind == KindRequest {
		if _, ok := m.Get("params", "_meta"); !ok {
			return Decision{400, CodeInvalidParams, "the request has no _meta", nil}
		}
		if !hasBV {
			return Decision{400, CodeInvalidParams, fmt.Sprintf("_meta has no %s", MetaProtocolVersion), nil}
		}
		if v, ok := m.Get("params", "_meta", MetaClientCapabilities); !ok || len(v) == 0 || v[0] != '{' {
			return Decision{400, CodeInvalidParams, fmt.Sprintf("_meta has no %s object", MetaClientCapabilities), nil}
		}
	}
	if hasBV && bv != hv {
		return Decision{400, CodeHeaderMismatch, fmt.Sprintf("the %s header %q does not match %s %q", HeaderVersion, hv, MetaProtocolVersion, bv), nil}
	}
	if m.Kind != KindRequest && m.Kind != KindNotification {
		return Decision{}
	}
	mh := header(HeaderMethod)
	if mh == "" {
		return Decision{400, CodeHeaderMismatch, "the Mcp-Method header is required", nil}
	}
	if mh != m.Method {
		return Decision{400, CodeHeaderMismatch, fmt.Sprintf("the Mcp-Method header %q does not match the method %q", mh, m.Method), nil}
	}
	if name, ok := NameOf(m); ok || NeedsName(m.Method) {
		nh := header(HeaderName)
		if nh == "" {
			return Decision{400, CodeHeaderMismatch, fmt.Sprintf("the Mcp-Name header is required for %s", m.Method), nil}
		}
		dec, ok := DecodeHeaderValue(nh)
		if !ok {
			return Decision{400, CodeHeaderMismatch, "the Mcp-Name header holds bad Base64", nil}
		}
		if dec != name {
			return Decision{400, CodeHeaderMismatch, fmt.Sprintf("the Mcp-Name header %q does not match %q", nh, name), nil}
		}
	}
	return Decision{}
}

// NeedsName reports whether a method's requests carry Mcp-Name.
func NeedsName(method string) bool {
	return method == "tools/call" || method == "prompts/get" || method == "resources/read"
}

// NameOf returns what Mcp-Name mirrors for m: the name of a tool or a
// prompt, the URI of a resource.
func NameOf(m Msg) (string, bool) {
	switch m.Method {
	case "tools/call", "prompts/get":
		return m.GetString("params", "name")
	case "resources/read":
		return m.GetString("params", "uri")
	}
	return "", false
}

const (
	b64Prefix = "=?base64?"
	b64Suffix = "?="
)

// EncodeHeaderValue is v as a mirrored header carries it: as it is when
// it is visible ASCII with no space at either end (and not itself
// sentinel-shaped), else in the Base64 sentinel (=?base64?…?=).
func EncodeHeaderValue(v string) string {
	plain := v != "" && v == strings.TrimSpace(v) && !strings.HasPrefix(v, b64Prefix)
	for i := 0; plain && i < len(v); i++ {
		plain = v[i] >= 0x20 && v[i] < 0x7f
	}
	if plain {
		return v
	}
	return b64Prefix + base64.StdEncoding.EncodeToString([]byte(v)) + b64Suffix
}

// DecodeHeaderValue undoes the Base64 sentinel (=?base64?…?=) of a
// mirrored header; a plain value stands for itself.
func DecodeHeaderValue(v string) (string, bool) {
	inner, ok := strings.CutPrefix(v, b64Prefix)
	if !ok {
		return v, true
	}
	inner, ok = strings.CutSuffix(inner, b64Suffix)
	if !ok {
		return v, true
	}
	d, err := base64.StdEncoding.DecodeString(inner)
	if err != nil {
		return "", false
	}
	return string(d), true
}

// NewSessionID mints a session id: 256 random bits in base32 (visible
// ASCII, as the transport requires).
func NewSessionID() string {
	return rand.Text() + rand.Text()
}

// EventID is an SSE event's id: the stream (unique within its session)
// and the event's number on it.
func EventID(stream string, seq int64) string {
	return stream + "_" + strconv.FormatInt(seq, 10)
}

// ParseEventID splits an EventID.
func ParseEventID(s string) (stream string, seq int64, ok bool) {
	stream, n, ok := strings.Cut(s, "_")
	if !ok || stream == "" || strings.Contains(n, "_") {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(n, 10, 64)
	if err != nil || seq < 0 || strconv.FormatInt(seq, 10) != n {
		return "", 0, false
	}
	return stream, seq, true
}
