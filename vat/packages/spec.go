package packages

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Registries a spec can name.
const (
	NPM  = "npm"
	PyPI = "pypi"
)

// Spec is one package to install: where its code comes from, and how it is
// started.
type Spec struct {
	// Registry is NPM or PyPI.
	Registry string
	// Name is the package's name: "@scope/name" or "name" on npm, the
	// normalised project name on PyPI. Empty for a uv git source, whose
	// name its build decides.
	Name string
	// Version is what was asked: an exact version, a range, a dist-tag
	// ("latest"), or "" (the latest). Install resolves it once.
	Version string
	// Git is a uv source pinned to a full commit:
	// "git+https://host/path@<40 hex>".
	Git string
	// Bin is the program to run when the package has several: npx's
	// choice by name, or uvx's command after --from. If empty, the
	// package's only one (or the one named as the package).
	Bin string
	// Args are the arguments after the package, passed as they are.
	Args []string
}

// String is the spec in the form ParsePackage reads (arguments aside).
func (s Spec) String() string {
	switch {
	case s.Git != "":
		return PyPI + ":" + s.Git
	case s.Registry == PyPI && s.Version != "":
		return PyPI + ":" + s.Name + "==" + s.Version
	case s.Version != "":
		return s.Registry + ":" + s.Name + "@" + s.Version
	}
	return s.Registry + ":" + s.Name
}

// Exact reports whether the spec pins one version (or one commit).
func (s Spec) Exact() bool {
	if s.Git != "" {
		return true
	}
	_, err := ParseVersion(s.Version)
	return err == nil
}

var (
	npmPartRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._~-]*$`)
	npmTagRe  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9._-]{0,63}$`)
	pypiRe    = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	gitRe     = regexp.MustCompile(`^git\+https://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~-]+)+@[0-9a-f]{40}$`)
	pyVerRe   = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*([ab]|rc)?[0-9]*(\.post[0-9]+)?(\.dev[0-9]+)?$`)
	pySepRe   = regexp.MustCompile(`[-_.]+`)
)

// ValidNPMName reports whether name is an npm package name: lower case,
// URL-safe, at most 214 characters, optionally "@scope/".
func ValidNPMName(name string) bool {
	if len(name) == 0 || len(name) > 214 {
		return false
	}
	if scope, rest, ok := strings.Cut(name, "/"); ok {
		return strings.HasPrefix(scope, "@") && npmPartRe.MatchString(scope[1:]) && npmPartRe.MatchString(rest)
	}
	return npmPartRe.MatchString(name) && name != "node_modules" && name != "favicon.ico"
}

// normPyPI is PEP 503's normal form of a project name.
func normPyPI(name string) string {
	return strings.ToLower(pySepRe.ReplaceAllString(name, "-"))
}

// ParsePackage reads the ?package= form: "npm:<name>[@<version|range|tag>]",
// "pypi:<name>[==<version>]" or "pypi:git+https://…@<40 hex>".
func ParsePackage(s string) (Spec, error) {
	reg, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Spec{}, fmt.Errorf("%w: %q: want npm:<name>[@<version>] or pypi:<name>[==<version>]", ErrBadSpec, s)
	}
	switch reg {
	case NPM:
		return parseNPM(rest)
	case PyPI:
		if strings.HasPrefix(rest, "git+") {
			return parseGit(rest)
		}
		return parsePyPI(rest)
	}
	return Spec{}, fmt.Errorf("%w: registry %q: want npm or pypi", ErrBadSpec, reg)
}

// parseNPM reads "<name>[@<version>]".
func parseNPM(s string) (Spec, error) {
	at := strings.LastIndex(s, "@")
	name, ver := s, ""
	if at > 0 {
		name, ver = s[:at], s[at+1:]
		if ver == "" {
			return Spec{}, fmt.Errorf("%w: %q: an empty version after @", ErrBadSpec, s)
		}
	}
	if !ValidNPMName(name) {
		return Spec{}, fmt.Errorf("%w: %q is not an npm package name (a URL, a path, a git source or an alias is not installed)", ErrBadSpec, name)
	}
	if ver != "" {
		if _, err := ParseVersion(ver); err != nil && !npmTagRe.MatchString(ver) {
			if _, rerr := ParseRange(ver); rerr != nil {
				return Spec{}, fmt.Errorf("%w: %q: version %q is neither a version, a range nor a tag", ErrBadSpec, s, ver)
			}
		}
	}
	return Spec{Registry: NPM, Name: name, Version: ver}, nil
}

// parsePyPI reads "<name>[==<version>]" (uvx also writes "<name>@<version>").
func parsePyPI(s string) (Spec, error) {
	name, ver, ok := strings.Cut(s, "==")
	if !ok {
		name, ver, ok = strings.Cut(s, "@")
	}
	if ok && !pyVerRe.MatchString(ver) {
		return Spec{}, fmt.Errorf("%w: %q: version %q is not one exact version", ErrBadSpec, s, ver)
	}
	if !pypiRe.MatchString(name) {
		return Spec{}, fmt.Errorf("%w: %q is not a PyPI project name (extras, markers and paths are not installed)", ErrBadSpec, name)
	}
	return Spec{Registry: PyPI, Name: normPyPI(name), Version: ver}, nil
}

func parseGit(s string) (Spec, error) {
	if !gitRe.MatchString(s) {
		return Spec{}, fmt.Errorf("%w: %q: a git source must be git+https://host/path@<full 40-hex commit>", ErrBadSpec, s)
	}
	return Spec{Registry: PyPI, Git: s}, nil
}

// Options a launcher line may carry before its package: none of them
// changes where the code comes from. Every other option is refused,
// before any spec is read.
var (
	npxFlags = map[string]bool{"-y": true, "--yes": true, "-q": true, "--quiet": true}
	uvxFlags = map[string]bool{"-q": true, "--quiet": true, "--offline": true, "--no-progress": true}
)

// ParseLauncher reads a launcher line as people paste it (the command and
// its arguments): "npx -y pkg args...", "uvx pkg args...", or
// "uvx --from git+https://…@<40 hex> cmd args...". Only options that change
// nothing about where the code comes from may come before the package;
// any other (-p, --package, --with, --index-url, an unknown one) is refused
// before the spec is read, so what is locked is what runs.
func ParseLauncher(argv []string) (Spec, error) {
	if len(argv) == 0 {
		return Spec{}, fmt.Errorf("%w: an empty command", ErrBadSpec)
	}
	prog := path.Base(argv[0])
	switch prog {
	case "npx":
		return parseNPX(argv[1:])
	case "uvx":
		return parseUVX(argv[1:])
	}
	return Spec{}, fmt.Errorf("%w: %q is not a launcher (want npx or uvx)", ErrBadSpec, argv[0])
}

// flagName is an option's name without "=value".
func flagName(a string) string {
	n, _, _ := strings.Cut(a, "=")
	return n
}

func parseNPX(args []string) (Spec, error) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") {
			break
		}
		if !npxFlags[a] {
			return Spec{}, fmt.Errorf("%w: npx option %q is refused: it could change where the code comes from (only -y, --yes, -q, --quiet)", ErrBadSpec, flagName(a))
		}
	}
	if i >= len(args) {
		return Spec{}, fmt.Errorf("%w: npx names no package", ErrBadSpec)
	}
	sp, err := parseNPM(args[i])
	if err != nil {
		return Spec{}, err
	}
	sp.Args = append([]string{}, args[i+1:]...)
	return sp, nil
}

func parseUVX(args []string) (Spec, error) {
	from := ""
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") {
			break
		}
		if a == "--from" || strings.HasPrefix(a, "--from=") {
			if from != "" {
				return Spec{}, fmt.Errorf("%w: uvx --from given twice", ErrBadSpec)
			}
			if v, ok := strings.CutPrefix(a, "--from="); ok {
				from = v
			} else {
				if i+1 >= len(args) {
					return Spec{}, fmt.Errorf("%w: uvx --from names nothing", ErrBadSpec)
				}
				i++
				from = args[i]
			}
			if from == "" {
				return Spec{}, fmt.Errorf("%w: uvx --from names nothing", ErrBadSpec)
			}
			continue
		}
		if !uvxFlags[a] {
			return Spec{}, fmt.Errorf("%w: uvx option %q is refused: it could change where the code comes from (only --from, -q, --quiet, --offline, --no-progress)", ErrBadSpec, flagName(a))
		}
	}
	if i >= len(args) {
		return Spec{}, fmt.Errorf("%w: uvx names no package", ErrBadSpec)
	}
	cmd := args[i]
	rest := append([]string{}, args[i+1:]...)
	if from == "" {
		sp, err := parsePyPI(cmd)
		if err != nil {
			return Spec{}, err
		}
		sp.Args = rest
		return sp, nil
	}
	if !pypiRe.MatchString(cmd) {
		return Spec{}, fmt.Errorf("%w: uvx command %q is not a program name", ErrBadSpec, cmd)
	}
	var sp Spec
	var err error
	if strings.HasPrefix(from, "git+") {
		sp, err = parseGit(from)
	} else {
		sp, err = parsePyPI(from)
	}
	if err != nil {
		return Spec{}, err
	}
	sp.Bin, sp.Args = cmd, rest
	return sp, nil
}
