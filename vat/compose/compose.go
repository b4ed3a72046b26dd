// Package compose reads what a vat's Docker Compose file publishes.
//
// It serves the manifest-defaults rule: a loopback address a manifest names is
// granted only when the vat's own compose file publishes that port on
// 127.0.0.1 over TCP.
package compose

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ErrCompose is wrapped by every error Publishes returns: a compose file it
// cannot read with certainty.
var ErrCompose = errors.New("compose file not understood")

// Publishes reports whether a Docker Compose file publishes port on
// 127.0.0.1 over TCP in any of its services — the manifest-defaults rule: a
// loopback default in a manifest is granted only when the vat's own compose
// file publishes it there. A port published on every address ("5432:5432",
// or no host_ip) does not count: the file must name 127.0.0.1.
//
// It reads the subset of YAML compose files use, line by line, and refuses
// (an error wrapping ErrCompose) whatever it cannot read with certainty:
// tabs in indentation, anchors, aliases, tags, merge keys, multi-line quoted
// strings, several documents, a service that is not a block mapping, flow
// mappings inside a ports list, unknown keys of a long-syntax port, and
// variable interpolation in a port. A service that does not run by default
// (profiles, scale: 0 or deploy.replicas: 0, 0 in any YAML spelling)
// publishes nothing. Both port syntaxes are understood:
// short ("127.0.0.1:5432:5432", "127.0.0.1:5432:5432/tcp", ranges
// "127.0.0.1:5000-5010:5000-5010", as a block or a flow list) and long
// (target, published, host_ip, protocol, mode, name, app_protocol).
func Publishes(composeYAML []byte, port uint16) (bool, error) {
	if port == 0 {
		return false, fmt.Errorf("%w: port 0", ErrCompose)
	}
	lines, err := composeLines(string(composeYAML))
	if err != nil {
		return false, err
	}
	p := &composeParser{lines: lines, port: port}
	return p.run()
}

// cline is one meaningful line: its 1-based number, indentation and content
// with the comment and trailing space removed.
type cline struct {
	n      int
	indent int
	text   string
}

func composeErr(n int, format string, a ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrCompose, n, fmt.Sprintf(format, a...))
}

// composeLines splits the file into meaningful lines and refuses what the
// reader does not handle anywhere in the file.
func composeLines(s string) ([]cline, error) {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	var out []cline
	for i, raw := range strings.Split(s, "\n") {
		n := i + 1
		body := strings.TrimLeft(raw, " ")
		indent := len(raw) - len(body)
		if strings.HasPrefix(body, "\t") {
			return nil, composeErr(n, "tab in indentation")
		}
		text, err := stripComment(body)
		if err != nil {
			return nil, composeErr(n, "%v", err)
		}
		text = strings.TrimRight(text, " \t\r")
		if text == "" {
			continue
		}
		switch {
		case text == "---" && len(out) == 0 && indent == 0:
			continue // one leading document marker
		case indent == 0 && (text == "---" || strings.HasPrefix(text, "--- ") || text == "..."):
			return nil, composeErr(n, "more than one YAML document")
		case indent == 0 && strings.HasPrefix(text, "%"):
			return nil, composeErr(n, "YAML directives are not supported")
		}
		if err := refuseNodeProps(text); err != nil {
			return nil, composeErr(n, "%v", err)
		}
		out = append(out, cline{n: n, indent: indent, text: text})
	}
	return out, nil
}

// stripComment removes a " #" comment outside quotes; an unterminated quote
// (a multi-line quoted scalar) is refused.
func stripComment(s string) (string, error) {
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q == '\'':
			if c == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					i++ // '' escape
					continue
				}
				q = 0
			}
		case q == '"':
			if c == '\\' {
				i++
				continue
			}
			if c == '"' {
				q = 0
			}
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return s[:i], nil
		case (c == '\'' || c == '"') && startsScalar(s, i):
			q = c
		}
	}
	if q != 0 {
		return "", fmt.Errorf("quoted string continues on the next line")
	}
	return s, nil
}

// startsScalar reports whether a quote at i opens a quoted scalar: at the
// start, or after "- ", ": ", "[", "{" or ",".
func startsScalar(s string, i int) bool {
	j := i - 1
	for j >= 0 && s[j] == ' ' {
		j--
	}
	if j < 0 {
		return true
	}
	switch s[j] {
	case '[', '{', ',':
		return true
	case ':', '-':
		return j < i-1 // followed by a space
	}
	return false
}

// refuseNodeProps refuses anchors, aliases, tags and merge keys where a node
// starts: the line start, after "- ", after ": ", and inside flow
// collections after "[", "{" or ",".
func refuseNodeProps(text string) error {
	starts := []int{0}
	var q byte
	for i := 0; i < len(text); i++ {
		c := text[i]
		if q != 0 {
			if c == q {
				q = 0
			}
			continue
		}
		switch c {
		case '\'', '"':
			if startsScalar(text, i) {
				q = c
			}
		case '[', '{', ',':
			starts = append(starts, i+1)
		case '-', ':':
			if i+1 < len(text) && text[i+1] == ' ' {
				starts = append(starts, i+1)
			}
		}
	}
	for _, st := range starts {
		rest := strings.TrimLeft(text[st:], " ")
		if rest == "" {
			continue
		}
		switch {
		case rest[0] == '&':
			return fmt.Errorf("YAML anchors are not supported")
		case rest[0] == '*':
			return fmt.Errorf("YAML aliases are not supported")
		case rest[0] == '!':
			return fmt.Errorf("YAML tags are not supported")
		case strings.HasPrefix(rest, "<<"):
			return fmt.Errorf("YAML merge keys are not supported")
		}
	}
	return nil
}

// splitKey splits "key: value" / "key:" into its unquoted key and its value.
// ok is false for a line that is not a mapping entry.
func splitKey(text string) (key, value string, ok bool, err error) {
	var k string
	rest := text
	switch {
	case strings.HasPrefix(text, `"`) || strings.HasPrefix(text, `'`):
		end := strings.IndexByte(text[1:], text[0])
		if end < 0 {
			return "", "", false, fmt.Errorf("unterminated quoted key")
		}
		k = text[1 : end+1]
		rest = text[end+2:]
		if !strings.HasPrefix(rest, ":") {
			return "", "", false, nil
		}
		rest = rest[1:]
	default:
		i := strings.Index(text, ": ")
		if i < 0 {
			if !strings.HasSuffix(text, ":") {
				return "", "", false, nil
			}
			i = len(text) - 1
		}
		k = text[:i]
		rest = text[i+1:]
		if strings.ContainsAny(k[:min(len(k), 1)], "[{") {
			return "", "", false, nil // a flow collection, not a key
		}
	}
	if rest != "" && rest[0] != ' ' {
		return "", "", false, nil
	}
	return k, strings.TrimSpace(rest), true, nil
}

type composeParser struct {
	lines []cline
	i     int
	port  uint16
	found bool
}

func (p *composeParser) run() (bool, error) {
	seen := map[string]bool{}
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.indent != 0 {
			return false, composeErr(l.n, "indented line outside a top-level key")
		}
		k, v, ok, err := splitKey(l.text)
		if err != nil {
			return false, composeErr(l.n, "%v", err)
		}
		if !ok {
			return false, composeErr(l.n, "top level is not a mapping")
		}
		if seen[k] {
			return false, composeErr(l.n, "key %q twice", k)
		}
		seen[k] = true
		p.i++
		if k != "services" {
			p.skipBlock(0)
			continue
		}
		switch v {
		case "", "{}":
		default:
			return false, composeErr(l.n, "services must be a block mapping")
		}
		if err := p.services(); err != nil {
			return false, err
		}
	}
	return p.found, nil
}

// skipBlock skips the lines indented deeper than indent.
func (p *composeParser) skipBlock(indent int) {
	for p.i < len(p.lines) && p.lines[p.i].indent > indent {
		p.i++
	}
}

func (p *composeParser) services() error {
	svcIndent := -1
	seen := map[string]bool{}
	for p.i < len(p.lines) && p.lines[p.i].indent > 0 {
		l := p.lines[p.i]
		if svcIndent < 0 {
			svcIndent = l.indent
		}
		if l.indent != svcIndent {
			return composeErr(l.n, "service not aligned with the others")
		}
		name, v, ok, err := splitKey(l.text)
		if err != nil {
			return composeErr(l.n, "%v", err)
		}
		if !ok {
			return composeErr(l.n, "services must be a mapping of names")
		}
		if v != "" {
			return composeErr(l.n, "service %q is not a block mapping", name)
		}
		if seen[name] {
			return composeErr(l.n, "service %q twice", name)
		}
		seen[name] = true
		p.i++
		if err := p.service(svcIndent); err != nil {
			return err
		}
	}
	return nil
}

func (p *composeParser) service(svcIndent int) error {
	keyIndent := -1
	seen := map[string]bool{}
	// A service that does not run by default (it has profiles, or scale
	// 0) publishes nothing: what it names does not count.
	foundBefore := p.found
	idle := false
	defer func() {
		if idle {
			p.found = foundBefore
		}
	}()
	for p.i < len(p.lines) && p.lines[p.i].indent > svcIndent {
		l := p.lines[p.i]
		if keyIndent < 0 {
			keyIndent = l.indent
		}
		switch {
		case l.indent < keyIndent:
			return composeErr(l.n, "line not aligned with the service's keys")
		case l.indent > keyIndent || strings.HasPrefix(l.text, "- ") || l.text == "-":
			p.i++ // the value of the previous key
			continue
		}
		k, v, ok, err := splitKey(l.text)
		if err != nil {
			return composeErr(l.n, "%v", err)
		}
		if !ok {
			return composeErr(l.n, "service entry is not a key")
		}
		if seen[k] {
			return composeErr(l.n, "service key %q twice", k)
		}
		seen[k] = true
		p.i++
		switch {
		case k == "profiles", k == "scale" && zeroInt(v):
			idle = true
		case k == "deploy" && p.noReplicas(keyIndent, v):
			idle = true
		}
		if k != "ports" {
			continue
		}
		switch {
		case v == "":
			if err := p.blockPorts(keyIndent); err != nil {
				return err
			}
		case strings.HasPrefix(v, "["):
			if err := p.flowPorts(l.n, v); err != nil {
				return err
			}
		default:
			return composeErr(l.n, "ports is not a list")
		}
	}
	return nil
}

// zeroInt reports whether a YAML scalar is the integer 0 in any spelling
// (0, 00, 0x0, 0o0, +0, quoted or not).
func zeroInt(v string) bool {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		v = v[1 : len(v)-1]
	}
	v = strings.ReplaceAll(v, "_", "")
	n, err := strconv.ParseInt(v, 0, 64)
	return err == nil && n == 0
}

// noReplicas reports whether a service's deploy value (v on the key's
// line, or the block below it at more than keyIndent) sets replicas: 0.
func (p *composeParser) noReplicas(keyIndent int, v string) bool {
	if strings.HasPrefix(v, "{") {
		for _, kv := range strings.Split(strings.Trim(v, "{} "), ",") {
			if k, val, ok := strings.Cut(kv, ":"); ok && strings.TrimSpace(k) == "replicas" {
				return zeroInt(strings.TrimSpace(val))
			}
		}
		return false
	}
	child := -1
	for i := p.i; i < len(p.lines) && p.lines[i].indent > keyIndent; i++ {
		l := p.lines[i]
		if child < 0 {
			child = l.indent
		}
		if l.indent != child {
			continue
		}
		if k, val, ok, err := splitKey(l.text); err == nil && ok && k == "replicas" {
			return zeroInt(val)
		}
	}
	return false
}

// blockPorts reads a block sequence of ports under a key at keyIndent.
func (p *composeParser) blockPorts(keyIndent int) error {
	itemIndent := -1
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		isItem := strings.HasPrefix(l.text, "- ") || l.text == "-"
		if itemIndent < 0 {
			if !isItem || l.indent < keyIndent {
				return nil // an empty value
			}
			itemIndent = l.indent
		}
		if l.indent < itemIndent || (l.indent == itemIndent && !isItem) {
			return nil
		}
		if l.indent > itemIndent || !isItem {
			return composeErr(l.n, "unexpected line in ports")
		}
		body := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		col := l.indent + (len(l.text) - len(body))
		p.i++
		if body == "" {
			// "-" alone: a mapping on the following, deeper lines.
			if p.i >= len(p.lines) || p.lines[p.i].indent <= itemIndent {
				return composeErr(l.n, "empty port entry")
			}
			col = p.lines[p.i].indent
			if err := p.longPort(l.n, nil, col); err != nil {
				return err
			}
			continue
		}
		if strings.HasPrefix(body, "{") {
			return composeErr(l.n, "flow mappings in ports are not supported")
		}
		k, v, ok, err := splitKey(body)
		if err != nil {
			return composeErr(l.n, "%v", err)
		}
		if ok {
			if err := p.longPort(l.n, &[2]string{k, v}, col); err != nil {
				return err
			}
			continue
		}
		s, err := unquote(body)
		if err != nil {
			return composeErr(l.n, "%v", err)
		}
		if err := p.short(l.n, s); err != nil {
			return err
		}
	}
	return nil
}

// longPort reads a long-syntax port whose keys sit at column col; first is
// the key already read on the "- " line, if any.
func (p *composeParser) longPort(n int, first *[2]string, col int) error {
	fields := map[string]string{}
	add := func(n int, k, v string) error {
		switch k {
		case "target", "published", "host_ip", "protocol", "mode", "name", "app_protocol":
		default:
			return composeErr(n, "unknown port key %q", k)
		}
		if _, dup := fields[k]; dup {
			return composeErr(n, "port key %q twice", k)
		}
		s, err := unquote(v)
		if err != nil {
			return composeErr(n, "%v", err)
		}
		fields[k] = s
		return nil
	}
	if first != nil {
		if err := add(n, first[0], first[1]); err != nil {
			return err
		}
	}
	for p.i < len(p.lines) && p.lines[p.i].indent >= col {
		l := p.lines[p.i]
		if l.indent != col {
			return composeErr(l.n, "port entry value spans lines")
		}
		k, v, ok, err := splitKey(l.text)
		if err != nil {
			return composeErr(l.n, "%v", err)
		}
		if !ok {
			return composeErr(l.n, "port entry line is not a key")
		}
		if err := add(l.n, k, v); err != nil {
			return err
		}
		p.i++
	}
	if strings.Contains(fields["published"]+fields["host_ip"]+fields["protocol"]+fields["target"], "$") {
		return composeErr(n, "variable interpolation in a port is not supported")
	}
	if _, ok := fields["target"]; !ok {
		return composeErr(n, "port entry has no target")
	}
	proto := fields["protocol"]
	if proto == "" {
		proto = "tcp"
	}
	pub, ok := fields["published"]
	if !ok || pub == "" {
		return nil // a random host port
	}
	in, err := portIn(pub, p.port)
	if err != nil {
		return composeErr(n, "published %q: %v", pub, err)
	}
	if in && proto == "tcp" && isLoopback4(fields["host_ip"]) {
		p.found = true
	}
	return nil
}

// flowPorts reads "[a, b, ...]" of short-syntax ports on one line.
func (p *composeParser) flowPorts(n int, v string) error {
	if !strings.HasSuffix(v, "]") {
		return composeErr(n, "ports list continues on the next line")
	}
	inner := strings.TrimSpace(v[1 : len(v)-1])
	if inner == "" {
		return nil
	}
	if strings.ContainsAny(inner, "[]{}") {
		return composeErr(n, "nested collections in ports are not supported")
	}
	for _, item := range splitFlow(inner) {
		s, err := unquote(strings.TrimSpace(item))
		if err != nil {
			return composeErr(n, "%v", err)
		}
		if err := p.short(n, s); err != nil {
			return err
		}
	}
	return nil
}

// splitFlow splits on commas outside quotes.
func splitFlow(s string) []string {
	var out []string
	var q byte
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '"' || c == '\'':
			q = c
		case c == ',':
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// unquote returns a scalar's value: quoted (single or double, no escapes
// but ”) or plain.
func unquote(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	switch s[0] {
	case '"':
		if len(s) < 2 || s[len(s)-1] != '"' {
			return "", fmt.Errorf("malformed quoted value %s", s)
		}
		inner := s[1 : len(s)-1]
		if strings.ContainsAny(inner, "\\\"") {
			return "", fmt.Errorf("escapes in a quoted value are not supported: %s", s)
		}
		return inner, nil
	case '\'':
		if len(s) < 2 || s[len(s)-1] != '\'' {
			return "", fmt.Errorf("malformed quoted value %s", s)
		}
		inner := s[1 : len(s)-1]
		if strings.Contains(strings.ReplaceAll(inner, "''", ""), "'") {
			return "", fmt.Errorf("malformed quoted value %s", s)
		}
		return strings.ReplaceAll(inner, "''", "'"), nil
	}
	return s, nil
}

// short judges a short-syntax entry: [[HOST_IP:]HOST_PORT:]CONTAINER[/PROTO].
func (p *composeParser) short(n int, s string) error {
	if strings.Contains(s, "$") {
		return composeErr(n, "variable interpolation in a port is not supported: %q", s)
	}
	if s == "" {
		return composeErr(n, "empty port entry")
	}
	proto := "tcp"
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		proto = s[i+1:]
		s = s[:i]
		switch proto {
		case "tcp", "udp", "sctp":
		default:
			return composeErr(n, "unknown protocol %q", proto)
		}
	}
	var ip, rest string
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]:")
		if end < 0 {
			return composeErr(n, "malformed bracketed address in %q", s)
		}
		ip, rest = s[1:end], s[end+2:]
	} else {
		parts := strings.Split(s, ":")
		switch len(parts) {
		case 1:
			rest = parts[0]
		case 2:
			rest = s
		case 3:
			ip, rest = parts[0], parts[1]+":"+parts[2]
		default:
			return composeErr(n, "port entry %q: unbracketed IPv6 address", s)
		}
	}
	host, container, hasHost := strings.Cut(rest, ":")
	if !hasHost {
		container, host = host, ""
	}
	if _, err := portIn(container, 1); err != nil {
		return composeErr(n, "container port in %q: %v", s, err)
	}
	if host == "" {
		return nil // not published, or a random host port
	}
	in, err := portIn(host, p.port)
	if err != nil {
		return composeErr(n, "host port in %q: %v", s, err)
	}
	if ip != "" {
		if _, err := netip.ParseAddr(ip); err != nil {
			return composeErr(n, "host address in %q: %v", s, err)
		}
	}
	if in && proto == "tcp" && isLoopback4(ip) {
		p.found = true
	}
	return nil
}

// portIn parses "N" or "N-M" and reports whether port lies in it.
func portIn(s string, port uint16) (bool, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.ParseUint(lo, 10, 16)
	if err != nil || a == 0 {
		return false, fmt.Errorf("not a port: %q", s)
	}
	b := a
	if isRange {
		b, err = strconv.ParseUint(hi, 10, 16)
		if err != nil || b < a {
			return false, fmt.Errorf("not a port range: %q", s)
		}
	}
	return uint64(port) >= a && uint64(port) <= b, nil
}

// isLoopback4 reports whether a host_ip is exactly 127.0.0.1.
func isLoopback4(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && a == netip.AddrFrom4([4]byte{127, 0, 0, 1})
}
