// Package manifest parses and validates a vat's manifest.json strictly.
//
// Every key is known, every value checked, and a problem is an error that
// names it. It also derives what the manifest asks for — the egress grant
// and the loopback forwards — as plain values. See docs/manifest.md.
package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path"
	"regexp"
	"strconv"
	"strings"

	"toybox/labels"
	"toybox/vat/strictjson"
)

// MaxSize is the largest manifest.json accepted.
const MaxSize = 64 << 10

// Manifest is a parsed, validated manifest.json.
type Manifest struct {
	// Command is the argv; Command[0] is relative to the bundle ("./app",
	// "bin/server") or an absolute path to a host program ("/bin/sh").
	Command []string `json:"command"`
	// Env lists the environment keys the vat reads; the owner supplies
	// the values at install.
	Env []string `json:"env,omitempty"`
	// Network is "none", "internet", or a list of hosts.
	Network Network `json:"network,omitzero"`
	// Egress is a label grant (one object, a list, or a legacy
	// host[:port]), kept as written; Grant parses it.
	Egress json.RawMessage `json:"egress,omitempty"`
	// Sandbox is what the owner may show the vat beyond its own folders.
	Sandbox Sandbox `json:"sandbox,omitzero"`
	// OwnEnvFile binds the bundle's own .env file read-only.
	OwnEnvFile bool `json:"ownEnvFile,omitempty"`
	// Doors lists the door sets the vat asks for, by id. They are checked
	// against the supervisor's door table, never granted by the manifest.
	Doors []string `json:"doors,omitempty"`
	// MCP, when set, says the vat is an MCP server (see docs/mcp.md).
	MCP *MCP `json:"mcp,omitempty"`
	// Listen, when set, says the app serves on a TCP port ($PORT) of its
	// wall's loopback instead of on $TOYBOX_LISTEN.
	Listen *Listen `json:"listen,omitempty"`
}

// Sandbox holds sandbox.files and sandbox.inotify.
type Sandbox struct {
	Files Files `json:"files,omitzero"`
	// Inotify asks for inotify (file watching), which the wall's seccomp
	// filter refuses otherwise: a watch on the host's system folders,
	// shared by every wall, shows when other vats start.
	Inotify bool `json:"inotify,omitempty"`
}

// Files name env keys (declared in Env) whose owner-supplied values are
// absolute paths to bind.
type Files struct {
	Read     []string `json:"read,omitempty"`
	Write    []string `json:"write,omitempty"`
	OAuthDir []string `json:"oauthDir,omitempty"`
}

// Network is the manifest's network shape.
type Network struct {
	// Kind is "none", "internet" or "hosts" ("" when absent: none).
	Kind string
	// Hosts are the listed hosts when Kind is "hosts".
	Hosts []Host
}

// Host is one listed host: "example.com", "example.com:8443",
// "http://example.com", "https://example.com:8443", "127.0.0.1:5432".
type Host struct {
	Scheme string // "http", "https" or "" (any)
	Host   string
	Port   uint16 // 0: none written: any port, or the scheme's default (80, 443) when one is written
}

// Loopback reports whether h names this machine's loopback.
func (h Host) Loopback() bool { return labels.LoopbackHost(h.Host) }

var envKeyRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// ValidEnvKey reports whether k is an env key a manifest may declare.
func ValidEnvKey(k string) bool { return envKeyRe.MatchString(k) }

// reservedEnv are keys the supervisor and the wall set; a manifest cannot
// declare them.
var reservedEnv = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "SHELL": true, "TMPDIR": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "ALL_PROXY": true,
	"http_proxy": true, "https_proxy": true, "no_proxy": true, "all_proxy": true,
}

// manifestKeys are the keys a manifest's objects may have, spelled exactly
// (a test checks them against the struct tags): strictjson refuses one
// spelled in other letter case, and any key twice in one object.
var manifestKeys = []string{"command", "env", "network", "hosts", "egress", "sandbox", "files", "inotify", "read", "write", "oauthDir", "ownEnvFile", "doors", "mcp", "transport", "path", "mode", "auth", "listen", "port", "headers", "headerEnv", "header"}

// Parse reads and validates a manifest. Unknown keys are refused.
func Parse(r io.Reader) (*Manifest, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", err)
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrBadManifest, MaxSize)
	}
	if err := strictjson.Keys(b, manifestKeys); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrBadManifest, strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the object", ErrBadManifest)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBadManifest, fmt.Sprintf(format, a...))
}

func (m *Manifest) validate() error {
	if len(m.Command) == 0 || m.Command[0] == "" {
		return bad("command is missing (want an argv list such as [\"./app\"])")
	}
	for i, a := range m.Command {
		if strings.ContainsRune(a, 0) {
			return bad("command[%d] holds a NUL byte", i)
		}
	}
	if _, err := m.CommandPath(); err != nil {
		return err
	}
	declared := map[string]bool{}
	for _, k := range m.Env {
		switch {
		case !envKeyRe.MatchString(k):
			return bad("env key %q is not a valid name", k)
		case reservedEnv[k] || strings.HasPrefix(k, "TOYBOX_") || strings.HasPrefix(k, "LD_"):
			return bad("env key %q is reserved", k)
		case declared[k]:
			return bad("env key %q is declared twice", k)
		}
		declared[k] = true
	}
	for what, keys := range map[string][]string{"read": m.Sandbox.Files.Read, "write": m.Sandbox.Files.Write, "oauthDir": m.Sandbox.Files.OAuthDir} {
		for _, k := range keys {
			if !declared[k] {
				return bad("sandbox.files.%s names %q, which env does not declare", what, k)
			}
		}
	}
	seen := map[string]bool{}
	for _, d := range m.Doors {
		if !labels.ValidVatID(d) { // a door set is named by its vat's id
			return bad("door %q is not a valid door id", d)
		}
		if seen[d] {
			return bad("door %q is listed twice", d)
		}
		seen[d] = true
	}
	if len(m.Egress) > 0 && bytes.Equal(bytes.TrimSpace(m.Egress), []byte("null")) {
		return bad("egress is null (leave it out for no grant)")
	}
	if _, err := m.Grant(""); err != nil {
		return err
	}
	if m.MCP != nil {
		if err := m.MCP.validate(); err != nil {
			return err
		}
		if err := m.MCP.checkHeaderEnv(declared); err != nil {
			return err
		}
		for _, k := range m.Env {
			if m.MCP.SetsEnv(k, m.Listen != nil) {
				return badMCP("env declares %s, which toybox sets for this MCP server (see docs/mcp.md)", k)
			}
		}
	}
	if m.Listen != nil {
		if err := m.Listen.validate(m); err != nil {
			return err
		}
	}
	return nil
}

// CommandPath returns Command[0] as a clean path: relative to the bundle
// (without a leading "./") or absolute. A relative path that climbs out of
// the bundle is an error.
func (m *Manifest) CommandPath() (string, error) {
	c := m.Command[0]
	if path.IsAbs(c) {
		return path.Clean(c), nil
	}
	p := path.Clean(c)
	if p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return "", bad("command %q leaves the bundle", c)
	}
	return p, nil
}

// UnmarshalJSON reads "none", "internet" or {"hosts": [...]}.
func (n *Network) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		switch s {
		case "none", "internet":
			n.Kind = s
			return nil
		}
		return fmt.Errorf("network %q: want \"none\", \"internet\" or {\"hosts\": [...]}", s)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var o struct {
		Hosts []string `json:"hosts"`
	}
	if err := dec.Decode(&o); err != nil {
		return fmt.Errorf("network: want \"none\", \"internet\" or {\"hosts\": [...]}: %w", err)
	}
	if len(o.Hosts) == 0 {
		return fmt.Errorf("network.hosts is empty (use \"none\")")
	}
	n.Kind = "hosts"
	for _, h := range o.Hosts {
		ph, err := ParseHost(h)
		if err != nil {
			return err
		}
		n.Hosts = append(n.Hosts, ph)
	}
	return nil
}

// MarshalJSON writes the form UnmarshalJSON reads.
func (n Network) MarshalJSON() ([]byte, error) {
	if n.Kind != "hosts" {
		if n.Kind == "" {
			return json.Marshal("none")
		}
		return json.Marshal(n.Kind)
	}
	hs := make([]string, len(n.Hosts))
	for i, h := range n.Hosts {
		hs[i] = h.String()
	}
	return json.Marshal(map[string][]string{"hosts": hs})
}

// IsZero reports whether n is absent.
func (n Network) IsZero() bool { return n.Kind == "" }

// String writes h in the form ParseHost reads.
func (h Host) String() string {
	s := h.Host
	if strings.Contains(s, ":") {
		s = "[" + s + "]"
	}
	if h.Port != 0 {
		s += ":" + strconv.Itoa(int(h.Port))
	}
	if h.Scheme != "" {
		s = h.Scheme + "://" + s
	}
	return s
}

// ParseHost reads one network.hosts entry. It checks shape only; the
// labels package canonicalises and judges the host when the grant is built.
func ParseHost(s string) (Host, error) {
	var h Host
	rest := s
	if i := strings.Index(rest, "://"); i >= 0 {
		h.Scheme = rest[:i]
		if h.Scheme != "http" && h.Scheme != "https" {
			return h, fmt.Errorf("network host %q: scheme %q (want http or https)", s, h.Scheme)
		}
		rest = rest[i+3:]
		rest = strings.TrimSuffix(rest, "/")
	}
	if rest == "" || strings.ContainsAny(rest, "/?#@ \t") {
		return h, fmt.Errorf("network host %q: want host, host:port or scheme://host[:port]", s)
	}
	host, port := rest, ""
	if strings.HasPrefix(rest, "[") || strings.Count(rest, ":") == 1 {
		hh, pp, err := net.SplitHostPort(rest)
		if err != nil {
			if strings.HasPrefix(rest, "[") && strings.HasSuffix(rest, "]") {
				hh, pp = rest[1:len(rest)-1], ""
			} else {
				return h, fmt.Errorf("network host %q: %w", s, err)
			}
		}
		host, port = hh, pp
	}
	if host == "" {
		return h, fmt.Errorf("network host %q: empty host", s)
	}
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return h, fmt.Errorf("network host %q: port %q out of range 1-65535", s, port)
		}
		h.Port = uint16(p)
	}
	h.Host = strings.ToLower(host)
	return h, nil
}
