package packages

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// DefaultPyPIIndex is PyPI's simple index; its files are on PyPIFiles.
const (
	DefaultPyPIIndex = "https://pypi.org/simple/"
	PyPIFiles        = "https://files.pythonhosted.org/"
)

// UVConfig is what preparing a PyPI package needs from the host.
type UVConfig struct {
	// Index is the simple index's base URL. If empty, DefaultPyPIIndex.
	Index string
	// UV is the host's uv program (absolute), run in the prepare wall.
	UV string
	// Python is the host's python3 (absolute), bound read-only in every
	// wall: uv resolves for it and the vat runs on it. PythonVersion is
	// its version ("3.11.2").
	Python, PythonVersion string
	// Limits bound the tree.
	Limits Limits
	// Logger receives one record per step. If nil, discarded.
	Logger *slog.Logger
}

// Hosts are the prepare wall's egress for cfg: the index, and PyPI's
// file host when the index is PyPI's.
func (cfg UVConfig) Hosts() []string {
	idx := cfg.index()
	if idx == DefaultPyPIIndex {
		return []string{idx, PyPIFiles}
	}
	return []string{idx}
}

func (cfg UVConfig) index() string {
	if cfg.Index == "" {
		return DefaultPyPIIndex
	}
	if !strings.HasSuffix(cfg.Index, "/") {
		return cfg.Index + "/"
	}
	return cfg.Index
}

// uvEnv is the environment of every uv step: no config file of the host's
// (one may hold an index token), no Python downloaded, the cache in work.
func uvEnv(work string) map[string]string {
	return map[string]string{
		"HOME":                    work,
		"UV_NO_CONFIG":            "1",
		"UV_CACHE_DIR":            filepath.Join(work, "cache"),
		"UV_PYTHON_DOWNLOADS":     "never",
		"UV_NO_PROGRESS":          "1",
		"UV_COMPILE_BYTECODE":     "0",
		"UV_LINK_MODE":            "copy",
		"PIP_CONFIG_FILE":         os.DevNull,
		"PYTHONDONTWRITEBYTECODE": "1",
	}
}

// uvResolveArgv resolves requirements.in into requirements.txt with every
// artefact's hash; nothing is built (a package with no wheel fails).
func uvResolveArgv(cfg UVConfig, work string, build bool) []string {
	argv := []string{
		cfg.UV, "pip", "compile", "--no-config", "--generate-hashes", "--no-header", "--no-annotate",
		"--python", cfg.Python, "--python-platform", "linux", "--index-url", cfg.index(), "--no-emit-index-url",
		"--output-file", filepath.Join(work, "requirements.txt"), filepath.Join(work, "requirements.in"),
	}
	if !build {
		argv = slices.Insert(argv, 3, "--no-build")
	}
	return argv
}

// uvInstallArgv installs requirements.txt, hashes required, into target:
// uv checks every artefact against the lock's hashes before it unpacks it.
func uvInstallArgv(cfg UVConfig, work, target string, build bool) []string {
	argv := []string{
		cfg.UV, "pip", "install", "--no-config", "--require-hashes", "--no-deps",
		"--python", cfg.Python, "--index-url", cfg.index(), "--target", target, "--no-compile",
		"-r", filepath.Join(work, "requirements.txt"),
	}
	if !build {
		argv = slices.Insert(argv, 3, "--no-build")
	}
	return argv
}

var (
	reqLineRe = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ ;\\]+)`)
	reqHashRe = regexp.MustCompile(`--hash=sha256:([0-9a-f]{64})`)
)

// FromRequirements reads uv's requirements.txt (uv pip compile
// --generate-hashes) into the lock's packages: each an exact name==version
// with its sha256 hashes. A requirement without a hash, a URL, a path or
// an editable one is refused; a pinned git source only when git is it.
func FromRequirements(b []byte, git string) ([]Package, error) {
	var pkgs []Package
	// Continuation lines join their requirement.
	joined := strings.ReplaceAll(string(b), "\\\n", " ")
	sc := bufio.NewScanner(strings.NewReader(joined))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if git != "" && strings.Contains(line, " @ "+git) {
			name, _, _ := strings.Cut(line, " @ ")
			pkgs = append(pkgs, Package{Path: "site/" + normPyPI(strings.TrimSpace(name)), Name: normPyPI(strings.TrimSpace(name)), Resolved: git})
			continue
		}
		m := reqLineRe.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%w: requirement %q is not one name==version from the index (a URL, a path and an editable are not installed)", ErrBadLock, line)
		}
		var sums []string
		for _, h := range reqHashRe.FindAllStringSubmatch(line, -1) {
			sums = append(sums, "sha256:"+h[1])
		}
		if len(sums) == 0 {
			return nil, fmt.Errorf("%w: %s==%s has no sha256 hash", ErrBadLock, m[1], m[2])
		}
		name := normPyPI(m[1])
		pkgs = append(pkgs, Package{Path: "site/" + name, Name: name, Version: m[2], Integrity: strings.Join(sums, " ")})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(pkgs, func(a, b Package) int { return strings.Compare(a.Path, b.Path) })
	return pkgs, nil
}

// What toybox reads of uv's output, at most: far more than a real one.
const (
	maxRequirements = 16 << 20 // a lock of thousands of hashed packages
	maxEntryPoints  = 1 << 20  // one wheel's entry points
)

// readWorkOutput reads the file name of work (readOutput), not through a
// link that leaves work.
func readWorkOutput(work, name string, max int64) ([]byte, error) {
	root, err := os.OpenRoot(work)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return readOutput(root.FS(), name, max)
}

// readOutput reads the output a prepare step left at name, at most max
// bytes. Code that ran in the step (a build) may have put a link or a fifo
// there, which the supervisor must not follow or block on: anything but a
// file is refused with ErrTreeReplaced.
func readOutput(fsys fs.FS, name string, max int64) ([]byte, error) {
	fi, err := fs.Lstat(fsys, name)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a file", ErrTreeReplaced, name)
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadLock, name, max)
	}
	return b, nil
}

// ConsoleScript finds the console script named bin (or the one named as
// the package, or its only one) in the entry_points.txt files of the
// site folder, as "module:function".
// Only folders and files are read: a link or a fifo that a build left is
// refused (ErrTreeReplaced).
func ConsoleScript(site fs.FS, pkg, bin string) (string, error) {
	ents, err := fs.ReadDir(site, ".")
	if err != nil {
		return "", err
	}
	all := map[string]string{}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".dist-info") || !e.IsDir() {
			continue
		}
		b, err := readOutput(site, e.Name()+"/entry_points.txt", maxEntryPoints)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		for k, v := range parseConsoleScripts(b) {
			all[k] = v
		}
	}
	pick := func(n string) (string, bool) { v, ok := all[n]; return v, ok }
	switch {
	case bin != "":
		if v, ok := pick(bin); ok {
			return v, nil
		}
		return "", fmt.Errorf("%w: no console script %q", ErrBadTarball, bin)
	case pkg != "":
		if v, ok := pick(pkg); ok {
			return v, nil
		}
	}
	if len(all) == 1 {
		for _, v := range all {
			return v, nil
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range all {
			if !yield(k) {
				return
			}
		}
	})
	return "", fmt.Errorf("%w: %s has %d console scripts (%s): name one (uvx --from %s <script>)", ErrBadTarball, pkg, len(all), strings.Join(names, ", "), pkg)
}

var scriptRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$`)

// parseConsoleScripts reads the [console_scripts] section of an
// entry_points.txt: name = module:function (extras left out).
func parseConsoleScripts(b []byte) map[string]string {
	out := map[string]string{}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			in = line == "[console_scripts]"
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !in || !ok {
			continue
		}
		v, _, _ = strings.Cut(strings.TrimSpace(v), "[")
		v = strings.TrimSpace(v)
		if scriptRe.MatchString(v) {
			out[strings.TrimSpace(k)] = v
		}
	}
	return out
}

// EntryPath is the Python launcher a PyPI bundle runs: it puts the
// bundle's site folder first on the path and calls the console script.
const EntryPath = ".toybox/entry.py"

// entryScript is EntryPath's text for "module:function".
func entryScript(script string) []byte {
	mod, fn, _ := strings.Cut(script, ":")
	head, _, _ := strings.Cut(fn, ".")
	var b bytes.Buffer
	fmt.Fprintf(&b, "# toybox: the console script %s, run with the bundle's site folder first.\n", script)
	b.WriteString("import os, sys\n")
	b.WriteString("sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'site'))\n")
	fmt.Fprintf(&b, "from %s import %s\n", mod, head)
	fmt.Fprintf(&b, "sys.argv[0] = %q\n", mod)
	fmt.Fprintf(&b, "sys.exit(%s())\n", fn)
	return b.Bytes()
}

// PrepareUV resolves req's PyPI package with uv, installs it (hashes
// required, nothing built unless the owner allowed it) into work/tree/site
// and lays out the tree with manifest.json, the lock and the entry
// launcher, ready for Manifest and WriteBundle. work is the prepare wall's
// folder (bound read-write).
func PrepareUV(ctx context.Context, cfg UVConfig, run Runner, work string, req Request) (tree string, lock Lock, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sp := req.Spec
	if sp.Registry != PyPI {
		return "", lock, fmt.Errorf("%w: %s is not a PyPI package", ErrBadSpec, sp)
	}
	// A git source has no wheel: it is built, which runs its build code.
	name := sp.Name
	build := false
	if sp.Git != "" {
		if !slices.Contains(req.Allow, sp.Bin) {
			return "", lock, fmt.Errorf("%w: %s is built from source, which runs its build scripts; toybox builds nothing unless the owner allows it (?allow-scripts=%s)", ErrScripts, sp.Git, sp.Bin)
		}
		build = true
	}
	if err := os.MkdirAll(filepath.Join(work, "cache"), 0o755); err != nil {
		return "", lock, err
	}
	in := name
	switch {
	case sp.Git != "":
		in = sp.Git // its name is its build's to say
	case sp.Version != "":
		in = name + "==" + sp.Version
	}
	if err := os.WriteFile(filepath.Join(work, "requirements.in"), []byte(in+"\n"), 0o644); err != nil {
		return "", lock, err
	}
	if err := run(ctx, "resolve", uvResolveArgv(cfg, work, build), uvEnv(work)); err != nil {
		return "", lock, err
	}
	rb, err := readWorkOutput(work, "requirements.txt", maxRequirements)
	if errors.Is(err, fs.ErrNotExist) {
		return "", lock, errors.New("uv wrote no requirements.txt")
	}
	if err != nil {
		return "", lock, err
	}
	pkgs, err := FromRequirements(rb, sp.Git)
	if err != nil {
		return "", lock, err
	}
	if sp.Git != "" {
		for _, p := range pkgs {
			if p.Resolved == sp.Git {
				name = p.Name
			}
		}
	}
	root := findPkg(pkgs, "site/"+normPyPI(name))
	if root == nil {
		return "", lock, fmt.Errorf("%w: the lock has no %s", ErrBadLock, name)
	}
	// The install step may run a build's code, with work writable: the
	// tree is opened before it, and afterwards read and written only
	// through that handle, once it is known to be still in its place.
	tree = filepath.Join(work, "tree")
	t, err := makeTree(tree, cfg.Limits)
	if err != nil {
		return "", lock, err
	}
	defer t.Close()
	if err := t.root.Mkdir("site", 0o755); err != nil {
		return "", lock, err
	}
	site := filepath.Join(tree, "site")
	if err := run(ctx, "install", uvInstallArgv(cfg, work, site, build), uvEnv(work)); err != nil {
		return "", lock, err
	}
	if err := t.InPlace(tree, "site"); err != nil {
		return "", lock, err
	}
	if err := t.Recount(); err != nil {
		return "", lock, fmt.Errorf("after the install step: %w", err)
	}
	// --target also writes bin/ scripts whose first line names the
	// prepare wall's python: the launcher below replaces them.
	if err := t.root.RemoveAll("site/bin"); err != nil {
		return "", lock, err
	}
	siteFS, err := fs.Sub(t.root.FS(), "site")
	if err != nil {
		return "", lock, err
	}
	script, err := ConsoleScript(siteFS, normPyPI(name), sp.Bin)
	if err != nil {
		return "", lock, err
	}
	if err := t.WriteFile(EntryPath, entryScript(script)); err != nil {
		return "", lock, err
	}
	cmd := append([]string{cfg.Python, "-I", "-B", EntryPath}, sp.Args...)
	var scripts []string
	if build {
		scripts = []string{sp.Bin}
	}
	lock = Lock{
		Format: LockFormat, Asked: sp.String(), Registry: cfg.index(), Name: root.Name, Version: root.Version,
		Packages: pkgs, Scripts: scripts, Python: &Python{Path: cfg.Python, Version: cfg.PythonVersion}, Command: cmd,
	}
	if err := writeLockAndManifest(t, lock, req); err != nil {
		return "", lock, err
	}
	log.Info("package prepared", "package", root.Name, "version", root.Version, "packages", len(pkgs), "python", cfg.Python)
	return tree, lock, nil
}
