package doors

import (
	"fmt"
	"strings"
)

// maxPathLen bounds a door path, in bytes.
const maxPathLen = 1024

// methods a door entry may name. CONNECT, TRACE and OPTIONS are never doors.
var methods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true,
}

// Entry is one host function of a door set: an exact method and path.
type Entry struct {
	Method string
	Path   string
}

// Name is the entry as the table and DoorSet.get spell it: "METHOD /path".
func (e Entry) Name() string { return e.Method + " " + e.Path }

// ParseEntry reads "METHOD /path" (one space, an upper-case method a door
// accepts, a path that passes the request-target rules).
func ParseEntry(s string) (Entry, error) {
	method, path, ok := strings.Cut(s, " ")
	if !ok {
		return Entry{}, fmt.Errorf("entry %q is not \"METHOD /path\"", s)
	}
	if why := methodProblem(method); why != "" {
		return Entry{}, fmt.Errorf("entry %q: %s", s, why)
	}
	if why := targetProblem(path); why != "" {
		return Entry{}, fmt.Errorf("entry %q: %s", s, why)
	}
	return Entry{Method: method, Path: path}, nil
}

// methodProblem says why m is not a method a door accepts, or "" if it is.
func methodProblem(m string) string {
	if m == "" {
		return "the method is empty"
	}
	if !methods[m] {
		return fmt.Sprintf("method %q is not one a door accepts (GET, HEAD, POST, PUT, PATCH, DELETE, in upper case)", clip(m))
	}
	return ""
}

// targetProblem says why p cannot be a door request target, or "" if it
// can. A door target cannot be rewritten on its way to the backend: exactly
// one leading slash, no empty, "." or ".." segment, no percent sign at all,
// no query or fragment, no backslash, no control or non-ASCII byte, and only
// the characters of an RFC 3986 path segment.
func targetProblem(p string) string {
	if p == "" {
		return "the path is empty"
	}
	if len(p) > maxPathLen {
		return fmt.Sprintf("the path is longer than %d bytes", maxPathLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c < 0x20 || c == 0x7f:
			return fmt.Sprintf("the path has a control character (byte %d)", i)
		case c >= 0x80:
			return fmt.Sprintf("the path has a non-ASCII byte (byte %d)", i)
		case c == '%':
			return "the path has a percent sign: no percent-encoding is accepted"
		case c == '?':
			return "the path has a query ('?'): a door takes no query"
		case c == '#':
			return "the path has a fragment ('#')"
		case c == '\\':
			return "the path has a backslash"
		case !pathChar(c):
			return fmt.Sprintf("the path has the character %q, which a door path never has", rune(c))
		}
	}
	if p[0] != '/' {
		return "the path does not start with a slash"
	}
	if strings.Contains(p, "//") {
		return "the path has an empty segment ('//')"
	}
	for _, seg := range strings.Split(p[1:], "/") {
		switch seg {
		case "..":
			return "the path has a '..' segment"
		case ".":
			return "the path has a '.' segment"
		}
	}
	return ""
}

// pathChar reports whether c may appear in a door path: RFC 3986 unreserved,
// sub-delims, ':' '@' and '/', without '%'.
func pathChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

// clip shortens untrusted text for messages and logs.
func clip(s string) string {
	const n = 200
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
