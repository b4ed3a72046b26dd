package labels

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Network values.
const (
	NetworkPublic = "public" // globally reachable unicast addresses only
	NetworkLocal  = "local"  // public addresses plus LAN, loopback and the like
)

// Set is a label set. A zero field means the key is absent (unconstrained),
// except that a set with scheme http or https and no port means the
// scheme's default port (Canonical writes it in). The zero Set constrains
// nothing.
type Set struct {
	Scheme  string // "http", "https", "tcp"
	Host    string // canonical: lower case, IDNA A-label, no trailing dot, canonical IP text, IPv6 unbracketed
	Port    uint16
	Network string // "public" or "local"
	// Vat is a vat id. It is text, not a VatID, so that schema.LabelFields
	// converts to a Set with a plain type conversion. Canonical parses it
	// (ParseVatID): every Set read from JSON or the wire passes there.
	Vat string
	// Origin "manifest" marks a grant the add-on's author wrote (its
	// manifest), not one its owner typed. Absent: typed by whoever holds
	// the handle. Set only by the supervisor; only the listener-owner check
	// reads it (a manifest grant never reaches a process of toybox's user).
	Origin string
}

// OriginManifest is the one value of the origin label.
const OriginManifest = "manifest"

// IsZero reports whether s sets no key at all.
func (s Set) IsZero() bool { return s == Set{} }

// String returns s as canonical JSON: only the keys that are set, sorted,
// port as a number, e.g. {"host":"example.com","port":443}. It prints the
// fields as they are; use Canonical first for a set of unknown origin.
func (s Set) String() string {
	var b strings.Builder
	b.Grow(len(`{"host":"","network":"","origin":"","port":65535,"scheme":"","vat":""}`) + len(s.Host) + len(s.Network) + len(s.Origin) + len(s.Scheme) + len(s.Vat))
	b.WriteByte('{')
	n := 0
	field := func(k string) { // k is a fixed ASCII key
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		b.WriteByte('"')
		b.WriteString(k)
		b.WriteString(`":`)
	}
	str := func(k, v string) {
		if v == "" {
			return
		}
		field(k)
		writeJSONString(&b, v)
	}
	str("host", s.Host)
	str("network", s.Network)
	str("origin", s.Origin)
	if s.Port != 0 {
		field("port")
		var num [5]byte
		b.Write(strconv.AppendUint(num[:0], uint64(s.Port), 10))
	}
	str("scheme", s.Scheme)
	str("vat", s.Vat)
	b.WriteByte('}')
	return b.String()
}

// writeJSONString writes v quoted as encoding/json quotes it. Text with
// nothing to escape (printable ASCII but for the quote, the backslash and
// json's HTML escapes), as every canonical label is, is written as it is.
func writeJSONString(b *strings.Builder, v string) {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			q, _ := json.Marshal(v) // marshalling a string cannot fail
			b.Write(q)
			return
		}
	}
	b.WriteByte('"')
	b.WriteString(v)
	b.WriteByte('"')
}

// MarshalJSON returns the canonical JSON of s (see String). It fails,
// wrapping ErrBadLabel, if s does not validate, so a bad set never leaves
// the process as JSON.
func (s Set) MarshalJSON() ([]byte, error) {
	c, err := Canonical(s)
	if err != nil {
		return nil, err
	}
	return []byte(c.String()), nil
}

// UnmarshalJSON reads a set with the same strict rules as ParseSet.
func (s *Set) UnmarshalJSON(data []byte) error {
	v, err := ParseSet(data)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseSet reads one JSON object holding any of the keys scheme, host,
// port, network and vat, and returns it canonicalised. Port may be a JSON
// number or a decimal string. It refuses unknown or duplicate keys, empty
// or null values, values of the wrong type, invalid UTF-8 and anything
// after the object.
func ParseSet(data []byte) (Set, error) {
	if !utf8.Valid(data) {
		return Set{}, badf("label set is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return Set{}, badJSON(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Set{}, badf("label set must be a JSON object, not %s", describeToken(tok))
	}
	var s Set
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Set{}, badJSON(err)
		}
		key, ok := tok.(string)
		if !ok {
			return Set{}, badf("label set key is %s", describeToken(tok))
		}
		if seen[key] {
			return Set{}, badf("duplicate key %q", key)
		}
		seen[key] = true
		val, err := dec.Token()
		if err != nil {
			return Set{}, badJSON(err)
		}
		if err := s.setKey(key, val); err != nil {
			return Set{}, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return Set{}, badJSON(err)
	}
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return Set{}, badJSON(err)
		}
		return Set{}, badf("trailing data after the label set: %s", describeToken(tok))
	}
	return Canonical(s)
}

// setKey stores one JSON member into s, checking its type and emptiness.
// Canonical does the rest of the validation.
func (s *Set) setKey(key string, val json.Token) error {
	if key == "port" {
		var text string
		switch v := val.(type) {
		case json.Number:
			text = string(v)
		case string:
			text = v
		default:
			return badf("port must be a number or a decimal string, not %s", describeToken(val))
		}
		p, err := parsePort(text)
		if err != nil {
			return err
		}
		s.Port = p
		return nil
	}
	var dst *string
	switch key {
	case "scheme":
		dst = &s.Scheme
	case "host":
		dst = &s.Host
	case "network":
		dst = &s.Network
	case "vat":
		dst = &s.Vat
	case "origin":
		dst = &s.Origin
	default:
		return badf("unknown key %q (known: host, network, origin, port, scheme, vat)", key)
	}
	v, ok := val.(string)
	if !ok {
		return badf("%s must be a string, not %s", key, describeToken(val))
	}
	if v == "" {
		return badf("empty %s", key)
	}
	*dst = v
	return nil
}

func badJSON(err error) error {
	if errors.Is(err, io.EOF) {
		return badf("label set: unexpected end of JSON")
	}
	return badf("label set: malformed JSON: %v", err)
}

func describeToken(t json.Token) string {
	switch v := t.(type) {
	case nil:
		return "null"
	case json.Delim:
		switch v {
		case '{', '}':
			return "an object"
		default:
			return "a list"
		}
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	}
	return "an unexpected value"
}

// Canonical validates every field of s and returns it canonicalised: the
// scheme in lower case, the host as by CanonicalHost, and the port of a set
// with scheme http or https and no port set to the scheme's default (80,
// 443). Other absent (zero) fields stay absent.
func Canonical(s Set) (Set, error) {
	if s.Scheme != "" {
		sc := strings.ToLower(s.Scheme)
		switch sc {
		case "http", "https", "tcp":
			s.Scheme = sc
		default:
			return Set{}, badf("scheme %q not allowed (http, https or tcp)", s.Scheme)
		}
		// https alone means https on 443, as in a URL: on any port it
		// would reach any TCP service that reads past a ClientHello (or,
		// for http, a request line).
		if s.Port == 0 {
			s.Port = DefaultPort(sc)
		}
	}
	if s.Host != "" {
		h, err := CanonicalHost(s.Host)
		if err != nil {
			return Set{}, err
		}
		s.Host = h
	}
	switch s.Network {
	case "", NetworkPublic, NetworkLocal:
	default:
		return Set{}, badf("network %q not allowed (public or local)", s.Network)
	}
	if s.Vat != "" {
		if _, err := ParseVatID(s.Vat); err != nil {
			return Set{}, badf("%w", err)
		}
	}
	if s.Origin != "" && s.Origin != OriginManifest {
		return Set{}, badf("origin %q not allowed (manifest)", s.Origin)
	}
	return s, nil
}
