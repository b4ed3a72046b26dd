package packages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// ClientConfig is an MCP client's config: Claude Desktop's
// claude_desktop_config.json and Claude Code's .mcp.json ("mcpServers"),
// or VS Code's mcp.json ("servers").
type ClientConfig struct {
	// Key is the member holding the servers: "mcpServers" or "servers".
	Key string
	// Servers are the entries by name, as written.
	Servers map[string]json.RawMessage
	// top is every top-level member, as written.
	top map[string]json.RawMessage
	// src is the file as read; plain is src as plain JSON, each byte at
	// its place in src (PlainJSON).
	src, plain []byte
	// comments says src has comments, which encoding it again drops.
	comments bool
}

// ClientEntry is one stdio server entry of a client config.
type ClientEntry struct {
	Type    string            `json:"type,omitempty"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	URL     string            `json:"url,omitempty"`
	// EnvFile is VS Code's file of env values. toybox does not read
	// it, so an entry with one is refused.
	EnvFile string `json:"envFile,omitempty"`
}

// bom is the UTF-8 byte order mark a Windows editor starts a file with.
var bom = []byte("\ufeff")

// PlainJSON is b, JSON with comments (VS Code's JSONC), as plain JSON:
// a leading BOM, each comment (// to the line's end, /* to */) and each
// trailing comma (before } or ]) become spaces. A comment's line breaks
// stay. Every other byte keeps its offset, so a span found in the plain
// JSON is the same span of b. A comment cut short is left as it is, for
// the JSON parser to name. comments says b had a comment.
func PlainJSON(b []byte) (plain []byte, comments bool) {
	out := slices.Clone(b)
	if bytes.HasPrefix(out, bom) {
		copy(out, "   ")
	}
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if out[i] != '\n' && out[i] != '\r' {
				out[i] = ' '
			}
		}
	}
	// Comments first, so a comma's next byte is found past them.
	for i := 0; i < len(out); i++ {
		switch {
		case out[i] == '"':
			i = stringEnd(out, i)
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '/':
			end := bytes.IndexByte(out[i:], '\n')
			if end < 0 {
				end = len(out) - i
			}
			blank(i, i+end)
			comments = true
			i += end
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '*':
			end := bytes.Index(out[i+2:], []byte("*/"))
			if end < 0 {
				return out, comments
			}
			blank(i, i+2+end+2)
			comments = true
			i += 2 + end + 1
		}
	}
	// A comma is trailing when a value comes before it and } or ] after.
	var prev byte
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			i = stringEnd(out, i)
		case ',':
			next := bytes.TrimLeft(out[i+1:], " \t\r\n")
			if len(next) > 0 && (next[0] == '}' || next[0] == ']') && prev != 0 && prev != '{' && prev != '[' && prev != ',' {
				out[i] = ' '
				continue
			}
		}
		prev = c
	}
	return out, comments
}

// stringEnd is the offset of the quote that ends the JSON string whose
// opening quote is b[i]; the last offset of b if none does.
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(b) - 1
}

// ParseClientConfig reads a client config, JSON with comments and
// trailing commas (PlainJSON). Exactly one of "mcpServers" and "servers"
// must be an object of entries.
func ParseClientConfig(src []byte) (ClientConfig, error) {
	b, comments := PlainJSON(src)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil || top == nil {
		return ClientConfig{}, fmt.Errorf("%w: not a JSON object%s", ErrBadConfig, jsonErrorAt(b, err))
	}
	if err := uniqueMembers(b, "member %q is given twice"); err != nil {
		return ClientConfig{}, err
	}
	cc := ClientConfig{top: top, src: src, plain: b, comments: comments}
	for _, k := range []string{"mcpServers", "servers"} {
		raw, ok := top[k]
		if !ok {
			continue
		}
		if cc.Key != "" {
			return ClientConfig{}, fmt.Errorf("%w: both mcpServers and servers", ErrBadConfig)
		}
		if err := json.Unmarshal(raw, &cc.Servers); err != nil || cc.Servers == nil {
			return ClientConfig{}, fmt.Errorf("%w: %s is not an object of servers", ErrBadConfig, k)
		}
		if err := uniqueMembers(raw, "server %q is given twice"); err != nil {
			return ClientConfig{}, err
		}
		cc.Key = k
	}
	if cc.Key == "" {
		// VS Code's settings.json nests them, and a rewrite of that file
		// would have to find them there: it is not read.
		var mcp struct {
			Servers json.RawMessage `json:"servers"`
		}
		if raw, ok := top["mcp"]; ok && json.Unmarshal(raw, &mcp) == nil && mcp.Servers != nil {
			return ClientConfig{}, fmt.Errorf("%w: VS Code's settings.json keeps its servers in mcp.servers, which toybox does not read: move them into an mcp.json (the command MCP: Open User Configuration) and import that", ErrBadConfig)
		}
		return ClientConfig{}, fmt.Errorf("%w: no mcpServers (Claude Desktop, .mcp.json) or servers (VS Code mcp.json)", ErrBadConfig)
	}
	return cc, nil
}

// uniqueMembers refuses a name given twice in the JSON object b, saying
// so with format. Only one of the two would be read, and a rewrite would
// keep only that one.
func uniqueMembers(b []byte, format string) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil // not an object: json.Unmarshal says so
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		k, _ := t.(string)
		if seen[k] {
			return fmt.Errorf("%w: "+format, ErrBadConfig, k)
		}
		seen[k] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
	}
	return nil
}

// jsonErrorAt says where in b err, json.Unmarshal's, is: ": line L,
// column C: what". "" for no syntax error.
func jsonErrorAt(b []byte, err error) string {
	if err == nil {
		return ""
	}
	se, ok := errors.AsType[*json.SyntaxError](err)
	if !ok {
		return ""
	}
	if len(bytes.TrimSpace(b)) == 0 || se.Offset >= int64(len(b)) {
		return ": " + err.Error()
	}
	// Offset is just past the byte that failed.
	at := b[:max(se.Offset-1, 0)]
	line := bytes.Count(at, []byte("\n")) + 1
	col := utf8.RuneCount(at[bytes.LastIndexByte(at, '\n')+1:]) + 1
	return fmt.Sprintf(": line %d, column %d: %v", line, col, err)
}

// Names are the servers' names, sorted.
func (cc ClientConfig) Names() []string {
	names := make([]string, 0, len(cc.Servers))
	for n := range cc.Servers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// With returns the config with server name's entry set to raw (deleted
// when raw is nil), every other member kept as written.
func (cc ClientConfig) With(name string, raw json.RawMessage) ClientConfig {
	out := ClientConfig{Key: cc.Key, Servers: map[string]json.RawMessage{}, top: map[string]json.RawMessage{}, src: cc.src, comments: cc.comments}
	for k, v := range cc.Servers {
		out.Servers[k] = v
	}
	if raw == nil {
		delete(out.Servers, name)
	} else {
		out.Servers[name] = raw
	}
	for k, v := range cc.top {
		out.top[k] = v
	}
	return out
}

// Encode writes the config, indented, after the BOM the file read began
// with, if any.
func (cc ClientConfig) Encode() ([]byte, error) {
	top := map[string]any{}
	for k, v := range cc.top {
		top[k] = v
	}
	top[cc.Key] = cc.Servers
	var buf bytes.Buffer
	if bytes.HasPrefix(cc.src, bom) {
		buf.Write(bom)
	}
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(top); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Rewrite returns the config's file with the entries of set in place of
// the servers' entries by those names. Each new value takes the bytes of
// the old one, comments inside it too, so every other byte of the file is
// kept as read. A name the file has no entry for is added by encoding the
// whole file again (Encode), which a file with comments refuses.
func (cc ClientConfig) Rewrite(set map[string]json.RawMessage) ([]byte, error) {
	spans := cc.entrySpans()
	type edit struct {
		at  [2]int64
		raw json.RawMessage
	}
	var edits []edit
	for name, raw := range set {
		at, ok := spans[name]
		if !ok {
			if cc.comments {
				return nil, fmt.Errorf("%w: server %q is not in the file, and adding it would write the file anew without its comments: add it by hand", ErrBadConfig, name)
			}
			for n, r := range set {
				cc = cc.With(n, r)
			}
			return cc.Encode()
		}
		edits = append(edits, edit{at, raw})
	}
	slices.SortFunc(edits, func(a, b edit) int { return int(a.at[0] - b.at[0]) })
	var out []byte
	last := int64(0)
	for _, e := range edits {
		out = append(append(out, cc.src[last:e.at[0]]...), e.raw...)
		last = e.at[1]
	}
	return append(out, cc.src[last:]...), nil
}

// entrySpans finds where in src each server's entry is: its value's
// first byte and the byte past its last.
func (cc ClientConfig) entrySpans() map[string][2]int64 {
	spans := map[string][2]int64{}
	dec := json.NewDecoder(bytes.NewReader(cc.plain))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return spans
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return spans
		}
		if t != cc.Key {
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				return spans
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return spans
		}
		for dec.More() {
			t, err := dec.Token()
			if err != nil {
				return spans
			}
			name, _ := t.(string)
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				return spans
			}
			end := dec.InputOffset()
			spans[name] = [2]int64{end - int64(len(v)), end}
		}
		return spans
	}
	return spans
}

// Entry reads server name's entry.
func (cc ClientConfig) Entry(name string) (ClientEntry, error) {
	var e ClientEntry
	dec := json.NewDecoder(bytes.NewReader(cc.Servers[name]))
	if err := dec.Decode(&e); err != nil {
		return ClientEntry{}, fmt.Errorf("%w: server %q: %w", ErrBadConfig, name, err)
	}
	return e, nil
}

// Remote reports whether e is a remote server: a url, or toybox's own
// stdio bridge to one (toybox stdio URL, which toybox import writes for a
// client that launches stdio servers only). Nothing to install.
func (e ClientEntry) Remote() bool {
	stdioBridge := filepath.Base(e.Command) == "toybox" && len(e.Args) == 2 && e.Args[0] == "stdio"
	return e.URL != "" || e.Type == "http" || e.Type == "sse" || stdioBridge
}

// ImportKind says how an entry becomes a vat.
type ImportKind int

const (
	// ImportLauncher: an npx or uvx line, installed as a package.
	ImportLauncher ImportKind = iota + 1
	// ImportCheckout: a program in a folder of the owner's, copied into
	// a bundle.
	ImportCheckout
)

// ImportPlan is what importing one entry does.
type ImportPlan struct {
	Kind ImportKind
	// Spec is a launcher entry's package (with its arguments).
	Spec Spec
	// Launcher is the line as written (command and args).
	Launcher []string
	// Source is a checkout entry's folder (real path), copied into the
	// bundle; Command its argv in the bundle: a program inside the
	// source becomes relative to the bundle, a host program absolute.
	Source  string
	Command []string
	// DataFiles are files the entry names inside the source other than
	// its program: each is copied into the vat's data folder (DataDir)
	// and the entry points at the copy. Keys are the source paths.
	DataFiles map[string]string
	// Env are the entry's env values: the owner's values of the vat.
	Env map[string]string
}

var vatIDBad = regexp.MustCompile(`[^a-z0-9-]+`)

// VatID is the vat id a server name becomes: lower case, each run of
// other characters a "-", at most 63 characters. "" if nothing is left.
func VatID(name string) string {
	id := strings.Trim(vatIDBad.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(id) > 63 {
		id = strings.TrimRight(id[:63], "-")
	}
	return id
}

// checkoutMarkers are the files that mark a checkout's top folder.
var checkoutMarkers = []string{".git", "package.json", "pyproject.toml", "go.mod", "Cargo.toml"}

// isHostProgram reports whether p is in a system folder: a host program a
// wall sees read-only, not the owner's code.
func isHostProgram(p string) bool {
	for _, d := range []string{"/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/opt/", "/nix/"} {
		if strings.HasPrefix(p, d) {
			return true
		}
	}
	return false
}

// Variables is the variables value v names as ${NAME} or ${NAME:-default}
// (Claude Code's forms; VS Code's ${input:id} too), each as ${NAME},
// without its default: a default may be a secret.
func Variables(v string) []string {
	var out []string
	for _, m := range variableRe.FindAllStringSubmatch(v, -1) {
		out = append(out, "${"+m[1]+"}")
	}
	return out
}

// variableRe matches a ${NAME} or ${NAME:-default} reference.
var variableRe = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]{0,127}|[a-zA-Z]+:[A-Za-z0-9_.-]{1,128})(?::-[^}]*)?\}`)

// PlanImport reads entry e of server name. lookPath finds a bare command
// on the host (exec.LookPath); dataDir is where the vat's data folder is
// (<state>/data/<vat>, the path it has inside the wall too). A remote
// entry (url), an entry with no command, and a command that is neither a
// launcher nor a program in a folder are refused, saying why.
func PlanImport(name string, e ClientEntry, lookPath func(string) (string, error), dataDir string) (ImportPlan, error) {
	if e.Remote() {
		return ImportPlan{}, fmt.Errorf("%w: server %q is remote (url): nothing to install", ErrBadConfig, name)
	}
	if e.Command == "" {
		return ImportPlan{}, fmt.Errorf("%w: server %q has no command", ErrBadConfig, name)
	}
	// The vat would start without the values the client reads from it.
	if e.EnvFile != "" {
		return ImportPlan{}, fmt.Errorf("%w: server %q: its envFile %q is not read: write its values in env instead", ErrBadConfig, name, e.EnvFile)
	}
	argv := append([]string{e.Command}, e.Args...)
	// VS Code's ${input:...} and ${workspaceFolder} are the client's to
	// fill; toybox would pass them as they are.
	for _, v := range append([]string{e.Cwd}, argv...) {
		if strings.Contains(v, "${") {
			return ImportPlan{}, fmt.Errorf("%w: server %q: %q names a variable the client fills (${...}); write the value instead", ErrBadConfig, name, v)
		}
	}
	// An env value may be a secret: only its key and the variables it
	// names are named. toybox fills none: not from its own environment,
	// which is the host's and no vat's.
	for _, k := range slices.Sorted(maps.Keys(e.Env)) {
		if !strings.Contains(e.Env[k], "${") {
			continue
		}
		if vs := Variables(e.Env[k]); len(vs) > 0 {
			return ImportPlan{}, fmt.Errorf("%w: server %q: env %s names a variable the client fills (%s); toybox fills none, and never from its own environment: write the value instead", ErrBadConfig, name, k, strings.Join(vs, ", "))
		}
		return ImportPlan{}, fmt.Errorf("%w: server %q: env %s names a variable the client fills (${...}); write the value instead", ErrBadConfig, name, k)
	}
	switch filepath.Base(e.Command) {
	case "npx", "uvx":
		if e.Cwd != "" {
			return ImportPlan{}, fmt.Errorf("%w: server %q: a launcher with a cwd may read a project there; import that folder instead", ErrBadConfig, name)
		}
		sp, err := ParseLauncher(argv)
		if err != nil {
			return ImportPlan{}, fmt.Errorf("server %q: %w", name, err)
		}
		return ImportPlan{Kind: ImportLauncher, Spec: sp, Launcher: argv, Env: e.Env}, nil
	}
	return planCheckout(name, e, argv, lookPath, dataDir)
}

// planCheckout finds the folder an entry's program lives in and maps its
// paths into the bundle (the wall's working directory) or the data
// folder.
func planCheckout(name string, e ClientEntry, argv []string, lookPath func(string) (string, error), dataDir string) (ImportPlan, error) {
	cwd := e.Cwd
	if cwd != "" {
		if !filepath.IsAbs(cwd) {
			return ImportPlan{}, fmt.Errorf("%w: server %q: cwd %q is not absolute", ErrBadConfig, name, cwd)
		}
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) || cwd == "" {
			return p
		}
		return filepath.Join(cwd, p)
	}
	// The program: the command, or an interpreter's first path argument.
	prog := -1
	cmd := argv[0]
	if strings.ContainsRune(cmd, '/') {
		cmd = abs(cmd)
	}
	if !filepath.IsAbs(cmd) {
		p, err := lookPath(cmd)
		if err != nil {
			return ImportPlan{}, fmt.Errorf("%w: server %q: command %q is not on this host: %w", ErrBadConfig, name, cmd, err)
		}
		cmd = p
	}
	if real, err := filepath.EvalSymlinks(cmd); err == nil && !isHostProgram(cmd) {
		cmd = real
	}
	if !isHostProgram(cmd) {
		prog = 0
	} else {
		for i := 1; i < len(argv); i++ {
			if strings.HasPrefix(argv[i], "-") {
				continue
			}
			p := abs(argv[i])
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && filepath.IsAbs(p) {
				prog = i
			}
			break
		}
	}
	if prog < 0 && cwd == "" {
		return ImportPlan{}, fmt.Errorf("%w: server %q: %s runs no program of a folder of yours (no launcher, no script path, no cwd)", ErrBadConfig, name, argv[0])
	}
	src := cwd
	if prog >= 0 {
		p := cmd
		if prog > 0 {
			p = abs(argv[prog])
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return ImportPlan{}, fmt.Errorf("%w: server %q: %w", ErrBadConfig, name, err)
		}
		if src == "" {
			src = checkoutTop(filepath.Dir(real))
		}
	}
	src, err := filepath.EvalSymlinks(src)
	if err != nil {
		return ImportPlan{}, fmt.Errorf("%w: server %q: source folder: %w", ErrBadConfig, name, err)
	}
	if src == "/" || isHostProgram(src+"/") {
		return ImportPlan{}, fmt.Errorf("%w: server %q: source folder %s is a system folder", ErrBadConfig, name, src)
	}
	plan := ImportPlan{Kind: ImportCheckout, Source: src, Env: e.Env, DataFiles: map[string]string{}}
	out := slices.Clone(argv)
	out[0] = cmd
	for i := range out {
		p := out[i]
		if i > 0 {
			p = abs(p)
		}
		if !filepath.IsAbs(p) {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		rel, ok := inside(src, real)
		if !ok {
			continue
		}
		fi, err := os.Stat(real)
		if err != nil {
			continue
		}
		switch {
		case i == prog || fi.IsDir():
			// Code: its place in the bundle, the wall's working folder.
			out[i] = "./" + rel
		case fi.Mode().IsRegular():
			// A file the program reads or writes: the data folder's copy.
			dst := filepath.Join(dataDir, filepath.Base(real))
			for _, d := range plan.DataFiles {
				if d == dst {
					return ImportPlan{}, fmt.Errorf("%w: server %q: two data files named %s", ErrBadConfig, name, filepath.Base(real))
				}
			}
			plan.DataFiles[real] = dst
			out[i] = dst
		}
	}
	if out[0] == "./." {
		return ImportPlan{}, fmt.Errorf("%w: server %q: command is its folder", ErrBadConfig, name)
	}
	plan.Command = out
	return plan, nil
}

// checkoutTop is the nearest folder at or above dir holding a checkout
// marker (.git, package.json, ...); dir when none does.
func checkoutTop(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		for _, m := range checkoutMarkers {
			if _, err := os.Lstat(filepath.Join(d, m)); err == nil {
				return d
			}
		}
		if d == "/" || d == filepath.Dir(d) {
			return dir
		}
	}
}

// inside reports whether p is src or below it, with its path relative to
// src.
func inside(src, p string) (string, bool) {
	rel, err := filepath.Rel(src, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// Written is server name's entry as the file has it: its comments too.
// Put back with Rewrite, it gives back the bytes it was read from.
func (cc ClientConfig) Written(name string) json.RawMessage {
	at, ok := cc.entrySpans()[name]
	if !ok {
		return nil
	}
	return slices.Clone(json.RawMessage(cc.src[at[0]:at[1]]))
}
