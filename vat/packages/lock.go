package packages

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net/url"
	"slices"
	"strings"
)

// LockFormat is the version of Lock's JSON form.
const LockFormat = 1

// LockPath and FilesPath are where a package bundle keeps its lock and its
// file manifest, beside manifest.json.
const (
	LockPath  = ".toybox/lock.json"
	FilesPath = ".toybox/files.json"
)

// Lock is the record of one installed package: what was asked, what it
// resolved to, and every package of its tree with its integrity.
type Lock struct {
	Format int `json:"format"`
	// Asked is the spec as the owner gave it ("npm:pkg@^1").
	Asked string `json:"asked"`
	// Registry is the registry's base URL.
	Registry string `json:"registry"`
	// Name and Version are the package resolved (exact).
	Name    string `json:"name"`
	Version string `json:"version"`
	// Packages is the whole tree, sorted by path.
	Packages []Package `json:"packages"`
	// Skipped are optional packages for another platform, left out.
	Skipped []string `json:"skipped,omitempty"`
	// Scripts are the packages whose install scripts the owner allowed
	// (and that ran, inside the prepare wall).
	Scripts []string `json:"scripts,omitempty"`
	// Node is the Node.js that runs an npm package.
	Node Node `json:"node,omitzero"`
	// Python is the Python that runs a PyPI package.
	Python *Python `json:"python,omitempty"`
	// Command is the argv the vat runs.
	Command []string `json:"command"`
}

// Node says which Node.js runs a package.
type Node struct {
	// Path is the program: an absolute host path (bound read-only in the
	// wall) or a path inside the bundle.
	Path string `json:"path"`
	// Version is its version ("20.20.2").
	Version string `json:"version"`
	// Bundled says it came with the bundle (the node-linux-* package),
	// because the package's engines.node excludes the host's.
	Bundled bool `json:"bundled,omitempty"`
}

// Python says which Python runs a PyPI package: the host's, bound
// read-only in the wall.
type Python struct {
	Path    string `json:"path"`
	Version string `json:"version"`
}

// Package is one package of the tree.
type Package struct {
	// Path is where it lies: "node_modules/a/node_modules/b".
	Path    string `json:"path"`
	Name    string `json:"name"`
	Version string `json:"version"`
	// Resolved is its tarball's URL; empty for a package that comes inside
	// another's tarball (InBundle).
	Resolved string `json:"resolved,omitempty"`
	// Integrity is the SRI hash of its tarball ("sha512-<base64>"); for
	// a PyPI package its artefacts' hashes ("sha256:<hex>", space
	// separated), one of which the installed wheel has.
	Integrity string `json:"integrity,omitempty"`
	// InBundle: it ships inside its parent's tarball.
	InBundle bool `json:"inBundle,omitempty"`
	// InstallScript: it has an install script (preinstall, install or
	// postinstall, or a binding.gyp).
	InstallScript bool `json:"installScript,omitempty"`
}

// npmLock is the part of npm's package-lock.json (v2, v3) read here.
type npmLock struct {
	LockfileVersion int                   `json:"lockfileVersion"`
	Packages        map[string]npmLockPkg `json:"packages"`
}

type npmLockPkg struct {
	Name             string            `json:"name"`
	Version          string            `json:"version"`
	Resolved         string            `json:"resolved"`
	Integrity        string            `json:"integrity"`
	Link             bool              `json:"link"`
	Dev              bool              `json:"dev"`
	Optional         bool              `json:"optional"`
	DevOptional      bool              `json:"devOptional"`
	InBundle         bool              `json:"inBundle"`
	HasInstallScript bool              `json:"hasInstallScript"`
	OS               []string          `json:"os"`
	CPU              []string          `json:"cpu"`
	Dependencies     map[string]string `json:"dependencies"`
}

// Platform is where a package runs: Node's process.platform and
// process.arch.
type Platform struct{ OS, CPU string }

// fits reports whether a package's os and cpu lists admit p (npm's rule:
// a "!x" entry excludes x; any plain entry makes the list an allowlist).
func (p Platform) fits(oses, cpus []string) bool {
	admit := func(list []string, v string) bool {
		allow, any := false, false
		for _, e := range list {
			if neg, ok := strings.CutPrefix(e, "!"); ok {
				if neg == v {
					return false
				}
				continue
			}
			any = true
			if e == v {
				allow = true
			}
		}
		return allow || !any
	}
	return admit(oses, p.OS) && admit(cpus, p.CPU)
}

// FromNPMLock reads npm's package-lock.json for a root that depends on the
// packages in roots only, and returns the packages of the tree. Every
// package must come from registry (its tarball under the registry's URL)
// with a SHA-2 integrity; a link, a git or file source, or a package for
// another platform that is not optional is refused. Optional packages
// for another platform are returned in skipped.
func FromNPMLock(b []byte, registry string, plat Platform) (pkgs []Package, skipped []string, err error) {
	var l npmLock
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&l); err != nil {
		return nil, nil, fmt.Errorf("%w: package-lock.json: %w", ErrBadLock, err)
	}
	if l.LockfileVersion < 2 || l.Packages == nil {
		return nil, nil, fmt.Errorf("%w: package-lock.json version %d has no packages section", ErrBadLock, l.LockfileVersion)
	}
	reg, err := url.Parse(strings.TrimSuffix(registry, "/") + "/")
	if err != nil {
		return nil, nil, fmt.Errorf("%w: registry %q: %w", ErrBadLock, registry, err)
	}
	keys := make([]string, 0, len(l.Packages))
	for k := range l.Packages {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := l.Packages[k]
		if k == "" {
			continue // the root: toybox's own package.json
		}
		name, err := lockPathName(k)
		if err != nil {
			return nil, nil, err
		}
		if p.Name != "" {
			name = p.Name // an alias: installed under another name
		}
		switch {
		case p.Link:
			return nil, nil, fmt.Errorf("%w: %s is a link to a folder, not a registry package", ErrBadLock, k)
		case p.Dev:
			continue
		case !plat.fits(p.OS, p.CPU):
			if p.Optional || p.DevOptional {
				skipped = append(skipped, k)
				continue
			}
			return nil, nil, fmt.Errorf("%w: %s runs only on os %v cpu %v", ErrBadLock, k, p.OS, p.CPU)
		}
		if underSkipped(k, skipped) {
			skipped = append(skipped, k)
			continue
		}
		pk := Package{Path: k, Name: name, Version: p.Version, InstallScript: p.HasInstallScript}
		if _, err := ParseVersion(p.Version); err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %w", ErrBadLock, k, err)
		}
		if p.InBundle {
			pk.InBundle = true
			pkgs = append(pkgs, pk)
			continue
		}
		if _, _, err := ParseIntegrity(p.Integrity); err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %w", ErrBadLock, k, err)
		}
		u, err := url.Parse(p.Resolved)
		if err != nil || u.Scheme != reg.Scheme || u.Host != reg.Host || !strings.HasPrefix(u.Path, reg.Path) || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, nil, fmt.Errorf("%w: %s comes from %q, not from the registry %s", ErrBadLock, k, p.Resolved, registry)
		}
		pk.Resolved, pk.Integrity = p.Resolved, p.Integrity
		pkgs = append(pkgs, pk)
	}
	return pkgs, skipped, nil
}

func underSkipped(k string, skipped []string) bool {
	for _, s := range skipped {
		if strings.HasPrefix(k, s+"/") {
			return true
		}
	}
	return false
}

// lockPathName checks a package-lock key ("node_modules/a/node_modules/@s/b")
// and returns the name it installs ("@s/b").
func lockPathName(k string) (string, error) {
	parts := strings.Split(k, "/")
	name := ""
	for i := 0; i < len(parts); {
		if parts[i] != "node_modules" || i+1 >= len(parts) {
			return "", fmt.Errorf("%w: %q is not a node_modules path", ErrBadLock, k)
		}
		name = parts[i+1]
		i += 2
		if strings.HasPrefix(name, "@") {
			if i >= len(parts) {
				return "", fmt.Errorf("%w: %q ends in a scope", ErrBadLock, k)
			}
			name += "/" + parts[i]
			i++
		}
		if !ValidNPMName(name) {
			return "", fmt.Errorf("%w: %q holds %q, not a package name", ErrBadLock, k, name)
		}
	}
	return name, nil
}

// ParseIntegrity reads an SRI string and returns the strongest SHA-2 hash
// it holds ("sha512-<base64>", several space-separated allowed). SHA-1 is
// not accepted: its collisions are practical.
func ParseIntegrity(s string) (algo string, sum []byte, err error) {
	rank := map[string]int{"sha256": 1, "sha384": 2, "sha512": 3}
	size := map[string]int{"sha256": 32, "sha384": 48, "sha512": 64}
	for _, f := range strings.Fields(s) {
		a, b64, ok := strings.Cut(f, "-")
		if !ok || rank[a] == 0 {
			continue
		}
		if i := strings.IndexByte(b64, '?'); i >= 0 {
			b64 = b64[:i]
		}
		d, derr := base64.StdEncoding.DecodeString(b64)
		if derr != nil || len(d) != size[a] {
			return "", nil, fmt.Errorf("integrity %q: bad %s digest", s, a)
		}
		if rank[a] > rank[algo] {
			algo, sum = a, d
		}
	}
	if algo == "" {
		return "", nil, fmt.Errorf("integrity %q holds no sha256, sha384 or sha512 hash", s)
	}
	return algo, sum, nil
}

// CheckIntegrity reads r to its end and reports whether its bytes have
// the integrity want.
func CheckIntegrity(r io.Reader, want string) error {
	algo, sum, err := ParseIntegrity(want)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrIntegrity, err)
	}
	var h hash.Hash
	switch algo {
	case "sha256":
		h = sha256.New()
	case "sha384":
		h = sha512.New384()
	default:
		h = sha512.New()
	}
	if _, err := io.Copy(h, r); err != nil {
		return err
	}
	if got := h.Sum(nil); !bytes.Equal(got, sum) {
		return fmt.Errorf("%w: got %s-%s, the lock says %s", ErrIntegrity, algo, base64.StdEncoding.EncodeToString(got), want)
	}
	return nil
}
