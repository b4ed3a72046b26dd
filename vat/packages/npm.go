package packages

import (
	"context"
	_ "embed" // fetch.js
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// FetchScript is the downloader the prepare wall runs (fetch.js).
//
//go:embed fetch.js
var FetchScript []byte

// DefaultRegistry is the public npm registry.
const DefaultRegistry = "https://registry.npmjs.org/"

// Runner runs one prepare step inside a wall of its own: argv with env,
// the work folder bound read-write at its real path, the folder holding
// fetch.js read-only, and egress to the registry only. Nothing of the
// vat's is in that wall: no owner env, files, doors or data. The step's
// output goes to the supervisor's log; the error says only that it
// failed.
type Runner func(ctx context.Context, step string, argv []string, env map[string]string) error

// NPMConfig is what preparing an npm package needs from the host.
type NPMConfig struct {
	// Registry is the registry's base URL. If empty, DefaultRegistry.
	Registry string
	// Node is the host's node program (absolute), bound read-only in
	// every wall; NodeVersion its version.
	Node        string
	NodeVersion string
	// NPM is the host's npm-cli.js (absolute).
	NPM string
	// Script is the absolute path of fetch.js as the wall sees it.
	Script string
	// Platform is where the package runs. If zero, linux and this
	// machine's architecture in Node's names.
	Platform Platform
	// Limits bound the tree.
	Limits Limits
	// Logger receives one record per step. If nil, discarded.
	Logger *slog.Logger
}

// Request is one package to prepare.
type Request struct {
	Spec Spec
	// Allow names the packages whose install scripts may run (inside the
	// prepare wall, registry only). Any other package that has one fails
	// the install.
	Allow []string
	// Env lists the env keys the vat's manifest declares (server.json's
	// environmentVariables, an imported entry's env).
	Env []string
	// MCP is the manifest's "mcp" value, kept as given; nil for none.
	MCP json.RawMessage
}

// nodeArch is Node's name for GOARCH.
func nodeArch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x64"
	case "386":
		return "ia32"
	}
	return runtime.GOARCH
}

// Registry returns cfg's registry URL, normalised with a trailing slash.
func (cfg NPMConfig) registry() string {
	r := cfg.Registry
	if r == "" {
		r = DefaultRegistry
	}
	return strings.TrimSuffix(r, "/") + "/"
}

// RegistryHost returns the registry's scheme, host and port, for the
// prepare wall's grant.
func RegistryHost(registry string) (scheme, host string, port int, err error) {
	u, err := url.Parse(registry)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.RawQuery != "" {
		return "", "", 0, fmt.Errorf("%w: registry %q is not an http(s) URL", ErrBadSpec, registry)
	}
	port = 443
	if u.Scheme == "http" {
		port = 80
	}
	if p := u.Port(); p != "" {
		if _, err := fmt.Sscan(p, &port); err != nil || port < 1 || port > 65535 {
			return "", "", 0, fmt.Errorf("%w: registry %q: bad port", ErrBadSpec, registry)
		}
	}
	return u.Scheme, u.Hostname(), port, nil
}

// npmEnv is the environment of every npm step: npm's own config off (the
// host's npmrc may hold tokens), scripts off, the cache in work.
func npmEnv(work, registry string) map[string]string {
	return map[string]string{
		"npm_config_registry":          registry,
		"npm_config_userconfig":        filepath.Join(work, "npmrc"),
		"npm_config_globalconfig":      filepath.Join(work, "global-npmrc"),
		"npm_config_ignore_scripts":    "true",
		"npm_config_audit":             "false",
		"npm_config_fund":              "false",
		"npm_config_update_notifier":   "false",
		"npm_config_loglevel":          "error",
		"npm_config_progress":          "false",
		"npm_config_package_lock":      "true",
		"npm_config_engine_strict":     "false",
		"npm_config_strict_peer_deps":  "false",
		"npm_config_prefer_online":     "true",
		"npm_config_fetch_retries":     "1",
		"npm_config_fetch_timeout":     "60000",
		"npm_config_maxsockets":        "8",
		"NODE_OPTIONS":                 "",
		"npm_config_workspaces_update": "false",
	}
}

// maxNPMLock is the most of npm's package-lock.json toybox reads: a tree
// of the store's 20000 entries, each its own package, at about 1 KiB of
// lock apiece, and room to spare.
const maxNPMLock = 32 << 20

// ReasonPrepare is the fixed reason an install gives when a prepare step
// fails (words.OffPackages, which the supervisor puts before the error of
// PrepareNPM or PrepareUV: their errors do not repeat it); the step's own
// output is in the supervisor's log.
const ReasonPrepare = "could not get its packages ready inside its wall"

// PrepareNPM resolves req's package, fetches its tarballs, checks each
// against the lock's integrity before unpacking it, and lays out the tree
// with manifest.json and the lock in work/tree, ready for Manifest and
// WriteBundle. work is the prepare wall's folder (bound read-write).
func PrepareNPM(ctx context.Context, cfg NPMConfig, run Runner, work string, req Request) (tree string, lock Lock, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Platform == (Platform{}) {
		cfg.Platform = Platform{OS: "linux", CPU: nodeArch()}
	}
	reg := cfg.registry()
	sp := req.Spec
	if sp.Registry != NPM {
		return "", lock, fmt.Errorf("%w: %s is not an npm package", ErrBadSpec, sp)
	}
	hostNode, err := ParseVersion(cfg.NodeVersion)
	if err != nil {
		return "", lock, fmt.Errorf("the host's node version: %w", err)
	}
	proj := filepath.Join(work, "project")
	for _, d := range []string{proj, filepath.Join(work, "cache"), filepath.Join(work, "tarballs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", lock, err
		}
	}
	for _, rc := range []string{"npmrc", "global-npmrc"} {
		if err := os.WriteFile(filepath.Join(work, rc), nil, 0o644); err != nil {
			return "", lock, err
		}
	}
	asked := sp.Version
	if asked == "" {
		asked = "latest"
	}
	deps := map[string]string{sp.Name: asked}
	var npmLock []byte // npm's package-lock.json, as the last resolve read it
	resolve := func() ([]Package, []string, error) {
		pj, _ := json.MarshalIndent(map[string]any{"name": "toybox-prepare", "version": "0.0.0", "private": true, "dependencies": deps}, "", "  ")
		_ = os.Remove(filepath.Join(proj, "package-lock.json"))
		if err := os.WriteFile(filepath.Join(proj, "package.json"), pj, 0o644); err != nil {
			return nil, nil, err
		}
		argv := []string{cfg.Node, cfg.NPM, "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund", "--omit=dev", "--prefix", proj}
		if err := run(ctx, "resolve", argv, npmEnv(work, reg)); err != nil {
			return nil, nil, err
		}
		b, err := readWorkOutput(proj, "package-lock.json", maxNPMLock)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil, errors.New("npm wrote no package-lock.json")
		case err != nil:
			return nil, nil, err
		}
		npmLock = b
		return FromNPMLock(b, reg, cfg.Platform)
	}
	pkgs, skipped, err := resolve()
	if err != nil {
		return "", lock, err
	}
	rootPath := "node_modules/" + sp.Name
	root := findPkg(pkgs, rootPath)
	if root == nil {
		return "", lock, fmt.Errorf("%w: the lock has no %s", ErrBadLock, rootPath)
	}
	// The Node that runs it: the host's, unless the package's engines
	// exclude it; then the node-linux-* package, pinned in the same lock.
	node := Node{Path: cfg.Node, Version: hostNode.String()}
	engines, err := enginesNode(npmLock, rootPath)
	if err != nil {
		return "", lock, err
	}
	if engines != "" {
		rg, err := ParseRange(engines)
		if err != nil {
			return "", lock, fmt.Errorf("%w: %s engines.node: %w", ErrBadLock, sp.Name, err)
		}
		if !rg.Satisfies(hostNode) {
			nodePkg := "node-" + cfg.Platform.OS + "-" + cfg.Platform.CPU
			deps[nodePkg] = engines
			log.Info("package needs another node", "package", sp.Name, "engines", engines, "host_node", hostNode.String(), "bundled", nodePkg)
			if pkgs, skipped, err = resolve(); err != nil {
				return "", lock, err
			}
			np := findPkg(pkgs, "node_modules/"+nodePkg)
			if np == nil {
				return "", lock, fmt.Errorf("%w: the lock has no %s", ErrBadLock, nodePkg)
			}
			node = Node{Path: "node_modules/" + nodePkg + "/bin/node", Version: np.Version, Bundled: true}
		}
	}
	var urls []string
	var fetched []int
	for i, p := range pkgs {
		if !p.InBundle {
			urls = append(urls, p.Resolved)
			fetched = append(fetched, i)
		}
	}
	list, _ := json.Marshal(urls)
	if err := os.WriteFile(filepath.Join(work, "fetch.json"), list, 0o644); err != nil {
		return "", lock, err
	}
	// The tarballs land on the host's disk: together no larger than the
	// tree may unpack to.
	total := strconv.FormatInt(cfg.Limits.streamMax(), 10)
	if err := run(ctx, "fetch", []string{cfg.Node, cfg.Script, filepath.Join(work, "fetch.json"), filepath.Join(work, "tarballs"), total}, map[string]string{}); err != nil {
		return "", lock, err
	}
	// Every tarball is checked before any is unpacked.
	for n, i := range fetched {
		if err := checkFile(filepath.Join(work, "tarballs", fmt.Sprintf("%d.tgz", n)), pkgs[i].Integrity); err != nil {
			return "", lock, fmt.Errorf("%s@%s: %w", pkgs[i].Name, pkgs[i].Version, err)
		}
	}
	tree = filepath.Join(work, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return "", lock, err
	}
	t, err := NewTree(tree, cfg.Limits)
	if err != nil {
		return "", lock, err
	}
	defer t.Close()
	for n, i := range fetched {
		f, err := os.Open(filepath.Join(work, "tarballs", fmt.Sprintf("%d.tgz", n)))
		if err != nil {
			return "", lock, err
		}
		err = t.Unpack(f, pkgs[i].Path)
		f.Close()
		if err != nil {
			return "", lock, err
		}
	}
	// Install scripts, read from each package's own package.json (a
	// registry's hasInstallScript may leave one out).
	var scripts []string
	for i := range pkgs {
		p := &pkgs[i]
		pj, err := t.ReadPackageJSON(p.Path)
		if err != nil {
			return "", lock, err
		}
		if t.NeedsScript(p.Path, pj) {
			p.InstallScript = true
		}
		if !p.InstallScript {
			continue
		}
		if !slices.Contains(req.Allow, p.Name) {
			return "", lock, fmt.Errorf("%w: %s@%s needs an install script; toybox runs none unless the owner allows that one package (?allow-scripts=%s)", ErrScripts, p.Name, p.Version, p.Name)
		}
		scripts = append(scripts, p.Name)
	}
	rpj, err := t.ReadPackageJSON(rootPath)
	if err != nil {
		return "", lock, err
	}
	entry, err := rpj.Entry(sp.Bin)
	if err != nil {
		return "", lock, err
	}
	entry = path.Join(rootPath, entry)
	if !t.Exists(entry) {
		return "", lock, fmt.Errorf("%w: %s's bin %s is not in its tarball", ErrBadTarball, sp.Name, entry)
	}
	if err := t.MakeExecutable(entry); err != nil {
		return "", lock, err
	}
	if node.Bundled {
		if err := t.MakeExecutable(node.Path); err != nil {
			return "", lock, err
		}
	}
	if len(scripts) > 0 {
		slices.Sort(scripts)
		scripts = slices.Compact(scripts)
		if err := runScripts(ctx, cfg, run, work, t, tree, reg, node, pkgs, scripts); err != nil {
			return "", lock, err
		}
	}
	cmd := append([]string{node.Path, entry}, sp.Args...)
	lock = Lock{
		Format: LockFormat, Asked: sp.String(), Registry: reg, Name: sp.Name, Version: root.Version,
		Packages: pkgs, Skipped: skipped, Scripts: scripts, Node: node, Command: cmd,
	}
	if err := writeLockAndManifest(t, lock, req); err != nil {
		return "", lock, err
	}
	log.Info("package prepared", "package", sp.Name, "version", root.Version, "packages", len(pkgs), "node", node.Path)
	return tree, lock, nil
}

// runScripts runs the allowed packages' install scripts with npm rebuild,
// offline, inside the prepare wall (the tree is in work, so writable there).
// The scripts can move the tree away or put a link in its place: after
// them, the tree must still be t's folder, and toybox touches it only
// through t.
func runScripts(ctx context.Context, cfg NPMConfig, run Runner, work string, t *Tree, tree, reg string, node Node, pkgs []Package, names []string) error {
	deps := map[string]string{}
	for _, p := range pkgs {
		if strings.Count(p.Path, "node_modules/") == 1 {
			deps[p.Name] = p.Version
		}
	}
	pj, _ := json.Marshal(map[string]any{"name": "toybox-prepare", "version": "0.0.0", "private": true, "dependencies": deps})
	if err := t.root.WriteFile("package.json", pj, 0o644); err != nil {
		return err
	}
	env := npmEnv(work, reg)
	env["npm_config_ignore_scripts"] = "false"
	env["npm_config_offline"] = "true"
	nodeBin := cfg.Node
	if node.Bundled {
		nodeBin = filepath.Join(tree, node.Path)
	}
	argv := append([]string{nodeBin, cfg.NPM, "rebuild", "--prefix", tree, "--foreground-scripts"}, names...)
	if err := run(ctx, "scripts", argv, env); err != nil {
		return err
	}
	if err := t.InPlace(tree); err != nil {
		return err
	}
	// Counted first: removeLinks reads whole folders.
	if err := t.Recount(); err != nil {
		return fmt.Errorf("after the install scripts: %w", err)
	}
	if err := t.root.Remove("package.json"); err != nil {
		return err
	}
	// npm rebuild makes .bin links; a bundle holds no links.
	return t.removeLinks()
}

func checkFile(name, integrity string) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("its tarball was not fetched: %w", err)
	}
	defer f.Close()
	return CheckIntegrity(f, integrity)
}

func findPkg(pkgs []Package, p string) *Package {
	for i := range pkgs {
		if pkgs[i].Path == p {
			return &pkgs[i]
		}
	}
	return nil
}

// enginesNode reads engines.node of one package from npm's lock b.
func enginesNode(b []byte, key string) (string, error) {
	var l struct {
		Packages map[string]struct {
			Engines json.RawMessage `json:"engines"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadLock, err)
	}
	var eng map[string]string
	if e := l.Packages[key].Engines; len(e) > 0 && json.Unmarshal(e, &eng) != nil {
		return "", nil // an old array form: npm ignores it too
	}
	return strings.TrimSpace(eng["node"]), nil
}

// bundleManifest writes manifest.json of a package bundle.
// writeLockAndManifest writes the lock and the manifest (running the
// lock's command) into the tree.
func writeLockAndManifest(t *Tree, lock Lock, req Request) error {
	lb, _ := json.MarshalIndent(lock, "", "  ")
	if err := t.WriteFile(LockPath, append(lb, '\n')); err != nil {
		return err
	}
	mb, err := bundleManifest(lock.Command, req.Env, req.MCP)
	if err != nil {
		return err
	}
	return t.WriteFile("manifest.json", mb)
}

func bundleManifest(cmd, env []string, mcp json.RawMessage) ([]byte, error) {
	m := map[string]any{"command": cmd}
	if len(env) > 0 {
		m["env"] = env
	}
	if len(mcp) > 0 {
		m["mcp"] = mcp
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// RuntimeEnv is what a package vat's processes get beside the owner's
// values: npm and uv told never to reach a registry (no package manager
// runs at start; the belt for a package that spawns one), Node in
// production mode, Python unbuffered.
func RuntimeEnv() map[string]string {
	return map[string]string{
		"NODE_ENV":           "production",
		"npm_config_offline": "true",
		"UV_OFFLINE":         "1",
		"PYTHONUNBUFFERED":   "1",
	}
}
