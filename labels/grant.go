package labels

import (
	"encoding/json"
	"strconv"
	"strings"
)

// ParseGrant reads an egress grant: a JSON object, a JSON list of objects,
// or a legacy bare host[:port] ("example.com", "example.com:8443",
// "1.2.3.4:80", "[::1]:80"), which reads as {host, port}. Surrounding
// white space is ignored. Each set is read as by ParseSet and returned
// canonicalised.
//
// A grant may not name vat (the supervisor sets it), may not be an empty
// list, and no set in it may be empty ({} would grant every destination the
// handle reaches; say {"network":"public"} to mean that).
func ParseGrant(s string) ([]Set, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return nil, badf("empty grant")
	}
	var sets []Set
	switch {
	case t[0] == '{':
		set, err := ParseSet([]byte(t))
		if err != nil {
			return nil, err
		}
		sets = []Set{set}
	case t[0] == '[' && looksLikeJSONList(t):
		var raws []json.RawMessage
		if err := json.Unmarshal([]byte(t), &raws); err != nil {
			return nil, badf("grant list: malformed JSON: %v", err)
		}
		if len(raws) == 0 {
			return nil, badf("empty grant list")
		}
		for i, raw := range raws {
			set, err := ParseSet(raw)
			if err != nil {
				return nil, badf("grant list entry %d: %w", i, err)
			}
			sets = append(sets, set)
		}
	default:
		h, p, err := splitHostPort(t, false)
		if err != nil {
			return nil, err
		}
		sets = []Set{{Host: h, Port: p}}
	}
	for i, set := range sets {
		where := ""
		if len(sets) > 1 {
			where = " (entry " + strconv.Itoa(i) + ")"
		}
		if set.Origin != "" {
			return nil, badf("grant%s names origin %q: origin is set only by the supervisor, never by a grant", where, set.Origin)
		}
		if set.Vat != "" {
			return nil, badf("grant%s names vat %q: vat is set only by the supervisor, never by a grant", where, set.Vat)
		}
		if set.IsZero() {
			return nil, badf("grant%s is empty: {} would grant everything; name at least one label, e.g. {\"network\":\"public\"}", where)
		}
	}
	return sets, nil
}

// looksLikeJSONList tells a JSON list from a bracketed IPv6 legacy grant
// ("[::1]:80"): valid JSON is a list; so is text whose first byte after
// '[' (and white space) opens an object, a string or closes the list, so a
// malformed list is reported as malformed JSON rather than a bad host.
func looksLikeJSONList(t string) bool {
	if json.Valid([]byte(t)) {
		return true
	}
	rest := strings.TrimLeft(t[1:], " \t\r\n")
	return rest == "" || rest[0] == '{' || rest[0] == '"' || rest[0] == ']'
}
