package packages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// ServerJSONSchema is the server.json schema toybox reads.
const ServerJSONSchema = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"

// ServerJSON is what an MCP registry server.json maps to: the package to
// install, the env keys its manifest declares, and their defaults.
type ServerJSON struct {
	// Name is the server's reverse-DNS name ("io.github.owner/server").
	Name string
	Spec Spec
	// Env are the environmentVariables' names, declared by the manifest.
	Env []string
	// Defaults are the environmentVariables' defaults, given to the
	// vat where the owner gave no value.
	Defaults map[string]string
	// Required are the names marked isRequired without a default.
	Required []string
}

type sjDoc struct {
	Schema   string      `json:"$schema"`
	Name     string      `json:"name"`
	Version  string      `json:"version"`
	Packages []sjPackage `json:"packages"`
	Remotes  []any       `json:"remotes"`
}

type sjPackage struct {
	RegistryType     string  `json:"registryType"`
	RegistryBaseURL  string  `json:"registryBaseUrl"`
	Identifier       string  `json:"identifier"`
	Version          string  `json:"version"`
	FileSHA256       string  `json:"fileSha256"`
	RuntimeHint      string  `json:"runtimeHint"`
	Transport        sjTrans `json:"transport"`
	RuntimeArguments []sjArg `json:"runtimeArguments"`
	PackageArguments []sjArg `json:"packageArguments"`
	EnvironmentVars  []sjEnv `json:"environmentVariables"`
}

type sjTrans struct {
	Type string `json:"type"`
	URL  string `json:"url"`
}

type sjArg struct {
	Type       string         `json:"type"`
	Name       string         `json:"name"`
	Value      string         `json:"value"`
	Default    string         `json:"default"`
	IsRequired bool           `json:"isRequired"`
	IsRepeated bool           `json:"isRepeated"`
	ValueHint  string         `json:"valueHint"`
	Variables  map[string]any `json:"variables"`
}

type sjEnv struct {
	Name       string         `json:"name"`
	Default    string         `json:"default"`
	IsRequired bool           `json:"isRequired"`
	IsSecret   bool           `json:"isSecret"`
	Variables  map[string]any `json:"variables"`
}

var (
	sjNameRe = regexp.MustCompile(`^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$`)
	sjVarRe  = regexp.MustCompile(`\{[^{}]*\}`)
	sjEnvRe  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// knownRegistryTypes are the registryType values of the 2025-12-11 schema
// and of the registry's own list; only npm and pypi are installed here.
var knownRegistryTypes = map[string]bool{"npm": true, "pypi": true, "oci": true, "nuget": true, "mcpb": true, "cargo": true, "go": true}

func sjBad(field, format string, a ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrBadServerJSON, field, fmt.Sprintf(format, a...))
}

// ParseServerJSON reads an MCP registry server.json (2025-12-11 schema)
// and maps its first installable package (npm or pypi, stdio) to a Spec.
// An unknown registryType, a version that is a range or "latest", a
// registry other than registry, a transport other than stdio, an argument
// with {variables} toybox would have to fill, are refused with the field
// named.
func ParseServerJSON(b []byte, registry string) (ServerJSON, error) {
	var d sjDoc
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		return ServerJSON{}, fmt.Errorf("%w: %w", ErrBadServerJSON, err)
	}
	if d.Schema != "" && !strings.Contains(d.Schema, "/2025-12-11/") && !strings.Contains(d.Schema, "/2025-10-17/") {
		return ServerJSON{}, sjBad("$schema", "%q is not the 2025-12-11 schema", d.Schema)
	}
	if !sjNameRe.MatchString(d.Name) {
		return ServerJSON{}, sjBad("name", "%q is not reverse-DNS with one /", d.Name)
	}
	if err := exactVersion(d.Version); err != nil {
		return ServerJSON{}, sjBad("version", "%v", err)
	}
	if len(d.Packages) == 0 {
		return ServerJSON{}, sjBad("packages", "none: a server.json with remotes only is no vat")
	}
	pick := -1
	for i, p := range d.Packages {
		f := fmt.Sprintf("packages[%d]", i)
		if !knownRegistryTypes[p.RegistryType] {
			return ServerJSON{}, sjBad(f+".registryType", "%q is not a registry type (npm, pypi, oci, nuget, mcpb, cargo, go)", p.RegistryType)
		}
		if err := exactVersion(p.Version); err != nil {
			return ServerJSON{}, sjBad(f+".version", "%v", err)
		}
		if p.RegistryType == "mcpb" && p.FileSHA256 == "" {
			return ServerJSON{}, sjBad(f+".fileSha256", "missing: an mcpb package must name its hash")
		}
		if pick < 0 && (p.RegistryType == "npm" || p.RegistryType == "pypi") {
			pick = i
		}
	}
	if pick < 0 {
		return ServerJSON{}, sjBad("packages", "no npm or pypi package: toybox installs %s packages only as bundles", d.Packages[0].RegistryType)
	}
	p := d.Packages[pick]
	f := fmt.Sprintf("packages[%d]", pick)
	if p.Transport.Type != "stdio" {
		return ServerJSON{}, sjBad(f+".transport.type", "%q: only stdio packages are installed", p.Transport.Type)
	}
	if p.RegistryType == "npm" && p.RegistryBaseURL != "" && strings.TrimSuffix(p.RegistryBaseURL, "/") != strings.TrimSuffix(registry, "/") {
		return ServerJSON{}, sjBad(f+".registryBaseUrl", "%q is not this toybox's registry (%s)", p.RegistryBaseURL, registry)
	}
	if p.RegistryType == "pypi" && p.RegistryBaseURL != "" && strings.TrimSuffix(p.RegistryBaseURL, "/") != "https://pypi.org" {
		return ServerJSON{}, sjBad(f+".registryBaseUrl", "%q is not PyPI", p.RegistryBaseURL)
	}
	// The launcher line the package's own runtime would run, read by the
	// one launcher parser: runtimeArguments before the package (refused
	// if they could change where the code comes from), packageArguments
	// after it.
	rt, err := sjArgs(p.RuntimeArguments, f+".runtimeArguments")
	if err != nil {
		return ServerJSON{}, err
	}
	pa, err := sjArgs(p.PackageArguments, f+".packageArguments")
	if err != nil {
		return ServerJSON{}, err
	}
	var argv []string
	switch p.RegistryType {
	case "npm":
		if !ValidNPMName(p.Identifier) {
			return ServerJSON{}, sjBad(f+".identifier", "%q is not an npm package name", p.Identifier)
		}
		argv = append(append([]string{"npx"}, rt...), append([]string{p.Identifier + "@" + p.Version}, pa...)...)
	default:
		argv = append(append([]string{"uvx"}, rt...), append([]string{p.Identifier + "==" + p.Version}, pa...)...)
	}
	sp, err := ParseLauncher(argv)
	if err != nil {
		return ServerJSON{}, sjBad(f+".runtimeArguments", "%v", err)
	}
	sj := ServerJSON{Name: d.Name, Spec: sp, Defaults: map[string]string{}}
	seen := map[string]bool{}
	for i, e := range p.EnvironmentVars {
		ef := fmt.Sprintf("%s.environmentVariables[%d]", f, i)
		if !sjEnvRe.MatchString(e.Name) || seen[e.Name] {
			return ServerJSON{}, sjBad(ef+".name", "%q is not a variable name, or is given twice", e.Name)
		}
		if len(e.Variables) > 0 || sjVarRe.MatchString(e.Default) {
			return ServerJSON{}, sjBad(ef+".variables", "toybox fills no {variables}: give the value with ?env=")
		}
		seen[e.Name] = true
		sj.Env = append(sj.Env, e.Name)
		if e.Default != "" {
			sj.Defaults[e.Name] = e.Default
		} else if e.IsRequired {
			sj.Required = append(sj.Required, e.Name)
		}
	}
	return sj, nil
}

// exactVersion refuses a missing version, "latest" and ranges.
func exactVersion(v string) error {
	switch {
	case v == "":
		return fmt.Errorf("missing")
	case v == "latest":
		return fmt.Errorf("\"latest\" is not a version: pin one")
	}
	if _, err := ParseVersion(v); err == nil {
		return nil
	}
	if pyVerRe.MatchString(v) {
		return nil
	}
	return fmt.Errorf("%q is a range or not a version: pin one", v)
}

// sjArgs turns server.json arguments into argv words, without a shell.
func sjArgs(args []sjArg, field string) ([]string, error) {
	var out []string
	for i, a := range args {
		f := fmt.Sprintf("%s[%d]", field, i)
		val := a.Value
		if val == "" {
			val = a.Default
		}
		if len(a.Variables) > 0 || sjVarRe.MatchString(val) {
			return nil, sjBad(f, "toybox fills no {variables}")
		}
		switch a.Type {
		case "positional":
			if val == "" {
				if a.IsRequired {
					return nil, sjBad(f, "a required argument with no value")
				}
				continue
			}
			out = append(out, val)
		case "named":
			if !strings.HasPrefix(a.Name, "-") {
				return nil, sjBad(f+".name", "%q is not an option", a.Name)
			}
			out = append(out, a.Name)
			if val != "" {
				out = append(out, val)
			}
		default:
			return nil, sjBad(f+".type", "%q: want positional or named", a.Type)
		}
	}
	return out, nil
}
