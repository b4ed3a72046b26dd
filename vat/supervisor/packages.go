package supervisor

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"toybox/labels"
	"toybox/vat/disk"
	"toybox/vat/grant"
	"toybox/vat/manifest"
	"toybox/vat/packages"
	"toybox/vat/store"
	"toybox/vat/strictjson"
	"toybox/vat/wall"
	"toybox/vat/words"
)

// PackagesConfig is what installing packages (?package=) needs.
type PackagesConfig struct {
	// Registry is the npm registry's base URL: the prepare wall's only
	// egress. If empty, packages.DefaultRegistry.
	Registry string
	// Node is the host's node program (absolute) and NodeVersion its
	// version ("20.20.2"). If Node is empty, package installs are
	// refused.
	Node, NodeVersion string
	// NPM is the host's npm-cli.js (absolute). If empty, package installs
	// are refused.
	NPM string
	// UV is the host's uv (absolute), Python its python3 (absolute) and
	// PythonVersion that one's version. If UV or Python is empty, PyPI
	// installs are refused.
	UV, Python, PythonVersion string
	// PyPIIndex is the simple index PyPI packages come from. If empty,
	// packages.DefaultPyPIIndex (and its file host).
	PyPIIndex string
	// StepTimeout bounds one prepare step. If zero, 10 minutes.
	StepTimeout time.Duration
	// Disks gives each install's prepare folder a file system of its own
	// of PrepareBytes. If nil, or where it cannot (Support), prepare
	// folders have no size limit, and each install logs so.
	Disks *disk.Disks
	// PrepareBytes is the size of each install's prepare folder. If zero,
	// DefaultPrepareBytes.
	PrepareBytes int64
	// Installs is how many installs prepare at once. If zero,
	// DefaultInstalls.
	Installs int
	// InstallQueue is how many more installs wait their turn. Past it an
	// install is refused at once (ErrBusy). If zero, DefaultInstallQueue.
	// If negative, none waits.
	InstallQueue int
}

// DefaultPrepareBytes is the size of an install's prepare folder: what a
// legal install writes there, with room.
const DefaultPrepareBytes = 2*(store.DefaultMaxUnpacked+store.DefaultMaxEntries*8<<10) + // the tarballs and the tree, each at most the tree's bytes and 8 KiB an entry
	512<<20 // ext4's journal and inode tables, a block an entry, npm's cache of registry answers

const keyStep = "step"

// What the log takes of a prepare step's output (logPrepareOutput).
const (
	prepareOutputLines     = 400      // npm's output of an install is a few dozen lines
	prepareOutputLineBytes = 64 << 10 // a line of a stack trace, whole
)

// maxServerJSON bounds a server.json body.
const maxServerJSON = 1 << 20

// PackageRequest is one package install.
type PackageRequest struct {
	InstallRequest
	Package packages.Request
}

// handlePackage serves PUT /<vat>?package=<spec>: the spec, or
// ?package=server.json with the server.json as the body.
func (s *Supervisor) handlePackage(w http.ResponseWriter, r *http.Request, id labels.VatID, start time.Time) {
	q := r.URL.Query()
	if err := onlyParams(q, "package", "egress", "env", "unset-env", "allow-scripts"); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	egress, env, err := parseInstallQuery(q)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	onlyNew, err := onlyNewVat(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	if _, there := s.get(id); onlyNew && there {
		// Before minutes of preparing; Install asks again, and decides.
		writeErr(w, http.StatusPreconditionFailed, existsError(id))
		return
	}
	unset, err := parseUnsetEnv(q.Get("unset-env"), env)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	// The env a package vat runs with is its owner's settings: an upgrade
	// keeps the old values, a value sent replaces its key alone, and
	// ?unset-env= takes a key away (mergeEnv).
	old := s.ownerEnvOf(id)
	for _, k := range unset {
		if _, ok := old[k]; !ok {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: unset-env %s: the vat has no value for it, so there is nothing to unset", ErrBadInput, k))
			return
		}
	}
	preq := PackageRequest{InstallRequest: InstallRequest{ID: id, Egress: egress, EgressSent: q.Has("egress"), Env: env, EnvMerge: true, EnvUnset: unset, OnlyNew: onlyNew}}
	if a := q.Get("allow-scripts"); a != "" {
		for _, n := range strings.Split(a, ",") {
			if !packages.ValidNPMName(n) {
				writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: allow-scripts: %q is not a package name", ErrBadInput, n))
				return
			}
			preq.Package.Allow = append(preq.Package.Allow, n)
		}
	}
	spec := q.Get("package")
	if spec == "server.json" {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxServerJSON+1))
		if err == nil && len(b) > maxServerJSON {
			err = fmt.Errorf("larger than %d bytes", maxServerJSON)
		}
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: reading server.json: %w", ErrBadInput, err))
			return
		}
		sj, err := packages.ParseServerJSON(b, s.registry())
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: %w", ErrBadInput, err))
			return
		}
		preq.Package.Spec, preq.Package.Env = sj.Spec, sj.Env
		preq.Package.MCP = packageMCP
		preq.EnvDefaults = sj.Defaults
	} else {
		sp, err := parsePackageParam(spec)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: %w", ErrBadInput, err))
			return
		}
		preq.Package.Spec = sp
		preq.Package.MCP = packageMCP
	}
	// The owner's keys reach the vat: the manifest declares them, those
	// sent and those an upgrade keeps.
	for k := range preq.Env {
		if !slices.Contains(preq.Package.Env, k) {
			preq.Package.Env = append(preq.Package.Env, k)
		}
	}
	for k := range old {
		if !slices.Contains(preq.Package.Env, k) && !slices.Contains(unset, k) {
			preq.Package.Env = append(preq.Package.Env, k)
		}
	}
	slices.Sort(preq.Package.Env)
	// Counted until it is answered, not only while it prepares: Shutdown
	// returned before an install it cut short had its 503 written.
	done, err := s.countPreparing()
	if err != nil {
		writeErr(w, statusFor(err), err)
		return
	}
	defer done()
	code, err := s.PreparePackage(r.Context(), preq)
	if err != nil {
		if errors.Is(err, ErrBusy) {
			w.Header().Set("Retry-After", "60") // an install prepares for a minute or more
		}
		writeErr(w, statusFor(err), err)
		return
	}
	preq.Code = code
	s.installAndAnswer(w, preq.InstallRequest, start)
}

// countPreparing counts one more package install preparing (Shutdown
// waits for them), or returns ErrShutdown once the supervisor is stopping.
// Call done when it is over.
func (s *Supervisor) countPreparing() (done func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, ErrShutdown
	}
	s.preparing.Add(1)
	return s.preparing.Done, nil
}

// parsePackageParam reads ?package=: a spec ("npm:name@1.2.3"), or a
// launcher line as a JSON list of strings (["npx","-y","name","arg"]),
// read by the same parser, arguments kept.
func parsePackageParam(p string) (packages.Spec, error) {
	if !strings.HasPrefix(p, "[") {
		return packages.ParsePackage(p)
	}
	var argv []string
	dec := json.NewDecoder(strings.NewReader(p))
	if err := dec.Decode(&argv); err != nil || dec.More() {
		return packages.Spec{}, fmt.Errorf("%w: a launcher line must be a JSON list of strings, such as [\"npx\",\"-y\",\"name\"]", packages.ErrBadSpec)
	}
	return packages.ParseLauncher(argv)
}

// parseUnsetEnv reads ?unset-env=: env keys, comma-separated, none of
// them also in env (the values sent).
func parseUnsetEnv(p string, env map[string]string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	var keys []string
	for _, k := range strings.Split(p, ",") {
		switch {
		case !manifest.ValidEnvKey(k):
			return nil, fmt.Errorf("%w: unset-env: %q is not an env key", ErrBadInput, k)
		case slices.Contains(keys, k):
			return nil, fmt.Errorf("%w: unset-env: %s is named twice", ErrBadInput, k)
		}
		if _, ok := env[k]; ok {
			return nil, fmt.Errorf("%w: env %s is both sent and unset; do one", ErrBadInput, k)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// ownerEnvOf is the env values vat id holds now (nil for none, or for no
// vat). Install decides again under the vat's lock (mergeEnv).
func (s *Supervisor) ownerEnvOf(id labels.VatID) map[string]string {
	v, ok := s.get(id)
	if !ok {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.rec.Env)
}

// parseInstallQuery reads ?egress= and ?env= of a package install.
func parseInstallQuery(q url.Values) (egress string, env map[string]string, err error) {
	egress = q.Get("egress")
	if egress != "" {
		if _, err := labels.ParseGrant(egress); err != nil {
			return "", nil, fmt.Errorf("%w: %w: egress: %w", ErrBadInput, manifest.ErrBadGrant, err)
		}
	}
	if q.Has("env") {
		dec := json.NewDecoder(strings.NewReader(q.Get("env")))
		if err := dec.Decode(&env); err != nil || env == nil || dec.More() {
			return "", nil, fmt.Errorf("%w: env must be a JSON object of strings, such as {\"API_KEY\":\"...\"}", ErrBadInput)
		}
		if err := strictjson.Keys([]byte(q.Get("env")), nil); err != nil {
			return "", nil, fmt.Errorf("%w: env: %w", ErrBadInput, err)
		}
		// toybox fills no variable, and never from the supervisor's own
		// environment (the host's): ${API_KEY} would reach the server as
		// those characters. Only the key and the variables are named.
		for _, k := range slices.Sorted(maps.Keys(env)) {
			if vs := packages.Variables(env[k]); len(vs) > 0 {
				return "", nil, fmt.Errorf("%w: env %s names %s, and toybox fills no variable (not from its own environment): send the value itself", ErrBadInput, k, strings.Join(vs, ", "))
			}
		}
	}
	return egress, env, nil
}

// packageMCP is the manifest's "mcp" value of a package vat: a stdio MCP
// server, served by the bridge in its wall (docs/mcp.md).
var packageMCP = json.RawMessage(`{"transport":"stdio"}`)

func (s *Supervisor) registry() string {
	if s.cfg.Packages.Registry != "" {
		return s.cfg.Packages.Registry
	}
	return packages.DefaultRegistry
}

// PreparePackage prepares req's package in prepare walls and stores the
// bundle; the code it returns is pinned (Install releases it). A failure
// stores nothing and is ErrBadInput when the package is at fault.
// At most PackagesConfig.Installs prepare at once: the others wait their
// turn until ctx ends (its error) or the supervisor stops (ErrShutdown),
// and past InstallQueue waiting it is ErrBusy at once.
func (s *Supervisor) PreparePackage(ctx context.Context, req PackageRequest) (store.Code, error) {
	pc := s.cfg.Packages
	pypi := req.Package.Spec.Registry == packages.PyPI
	uvc := packages.UVConfig{
		Index: pc.PyPIIndex, UV: pc.UV, Python: pc.Python, PythonVersion: pc.PythonVersion,
		Limits: packages.Limits{Entries: store.DefaultMaxEntries, Bytes: store.DefaultMaxUnpacked}, Logger: s.log.With(keyVat, req.ID),
	}
	hosts := []string{s.registry()}
	switch {
	case pypi && (pc.UV == "" || pc.Python == ""):
		return store.Code{}, fmt.Errorf("%w: %w", ErrBadInput, packages.ErrNoUV)
	case pypi:
		hosts = uvc.Hosts()
	case pc.Node == "" || pc.NPM == "":
		return store.Code{}, fmt.Errorf("%w: this supervisor has no node and npm to prepare packages with", ErrBadInput)
	}
	if s.cfg.Upstream == nil {
		return store.Code{}, fmt.Errorf("%w: this supervisor holds no switchboard socket, so no prepare wall can reach the registry", ErrBadInput)
	}
	done, err := s.countPreparing()
	if err != nil {
		return store.Code{}, err
	}
	defer done()
	// The supervisor stopping cancels the prepare (its walls stopped, its
	// folder removed) and Shutdown waits for it: nothing of an install
	// runs on after Shutdown, and none is half kept.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	code, err := s.preparePackage(ctx, req, pc, uvc, hosts, pypi)
	if err != nil && !errors.Is(err, ErrShutdown) && s.isStopping() {
		// Not the package's fault: its error as text, no ErrBadInput in
		// the chain.
		return store.Code{}, fmt.Errorf("%w: the install of %s was cancelled while it prepared, and nothing of it is kept (install it again once toybox is back): %s", ErrShutdown, req.ID, err.Error())
	}
	return code, err
}

// isStopping reports whether Shutdown has begun.
func (s *Supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// preparePackage is PreparePackage once counted as preparing.
func (s *Supervisor) preparePackage(ctx context.Context, req PackageRequest, pc PackagesConfig, uvc packages.UVConfig, hosts []string, pypi bool) (store.Code, error) {
	done, err := s.installs.wait(ctx, s.stopped)
	if err != nil {
		if errors.Is(err, ErrBusy) {
			s.log.Warn("package install refused", keyVat, req.ID, keyReason, err.Error())
		}
		return store.Code{}, err
	}
	defer done()
	if _, there := s.get(req.ID); req.OnlyNew && there {
		// Installed while this one waited its turn: no minutes of
		// preparing for a refusal.
		return store.Code{}, existsError(req.ID)
	}
	base := s.prepareBase()
	if err := os.MkdirAll(base, 0o711); err != nil {
		return store.Code{}, err
	}
	scratch, err := os.MkdirTemp(base, string(req.ID)+"-")
	if err != nil {
		return store.Code{}, err
	}
	// Written in the prepare walls, to any depth: RemoveTree, not
	// os.RemoveAll.
	defer func() { _ = store.RemoveTree(scratch) }()
	if err := os.Chmod(scratch, 0o711); err != nil {
		return store.Code{}, err
	}
	dirs := prepareDirs{code: filepath.Join(scratch, "code"), data: filepath.Join(scratch, "data"), run: filepath.Join(scratch, "run")}
	for _, d := range []string{dirs.code, dirs.data, dirs.run} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return store.Code{}, err
		}
	}
	script := filepath.Join(dirs.code, "fetch.js")
	if err := os.WriteFile(script, packages.FetchScript, 0o644); err != nil {
		return store.Code{}, err
	}
	uid, gid := s.cfg.UID, s.cfg.GID // nobody's, under root: no vat's uid
	// Unmounted before the folder goes (deferred after its removal).
	defer s.releasePrepare(scratch)
	bound, err := s.boundPrepare(req.ID, scratch, dirs, uid, gid)
	if err != nil {
		return store.Code{}, err
	}
	if uid >= 0 {
		for _, d := range []string{dirs.data, dirs.run} {
			if err := os.Chown(d, uid, gid); err != nil {
				return store.Code{}, err
			}
		}
	}
	if err := os.Chmod(dirs.run, 0o700); err != nil {
		return store.Code{}, err
	}
	run := s.prepareRunner(req.ID, dirs, uid, gid, hosts, bound)
	var (
		tree string
		lock packages.Lock
	)
	if pypi {
		tree, lock, err = packages.PrepareUV(ctx, uvc, run, dirs.data, req.Package)
	} else {
		cfg := packages.NPMConfig{
			Registry: s.registry(), Node: pc.Node, NodeVersion: pc.NodeVersion, NPM: pc.NPM, Script: script,
			Limits: packages.Limits{Entries: store.DefaultMaxEntries, Bytes: store.DefaultMaxUnpacked}, Logger: s.log.With(keyVat, req.ID),
		}
		tree, lock, err = packages.PrepareNPM(ctx, cfg, run, dirs.data, req.Package)
	}
	if err != nil && bound > 0 && !errors.Is(err, ErrPrepareFull) && disk.Full(dirs.data) {
		// toybox's own writes (the tree it unpacks) stopped for want of
		// room, not a step.
		err = fmt.Errorf("%w: %w", &prepareFullError{bytes: bound}, err)
	}
	if err != nil {
		s.log.Warn("package not prepared", keyVat, req.ID, "package", req.Package.Spec.String(), keyErr, err)
		return store.Code{}, fmt.Errorf("%w: %s: %w", ErrBadInput, words.OffPackages, err)
	}
	fl, err := packages.Manifest(tree)
	if err != nil {
		return store.Code{}, fmt.Errorf("%w: %s: %w", ErrBadInput, words.OffPackages, err)
	}
	bundle, err := os.CreateTemp(scratch, "bundle-*.tar")
	if err != nil {
		return store.Code{}, err
	}
	defer bundle.Close()
	if err := packages.WriteBundle(bundle, tree, fl); err != nil {
		return store.Code{}, fmt.Errorf("writing the bundle: %w", err)
	}
	if _, err := bundle.Seek(0, io.SeekStart); err != nil {
		return store.Code{}, err
	}
	code, err := s.cfg.Store.Put(bundle, "", func(c store.Code) error {
		r := req.InstallRequest
		r.Code = c
		return s.Check(r)
	})
	if err != nil {
		return store.Code{}, err
	}
	s.log.Info("package stored", keyVat, req.ID, "package", lock.Name+"@"+lock.Version, keyCode, code.Ref(), "packages", len(lock.Packages))
	return code, nil
}

type prepareDirs struct{ code, data, run string }

// prepareBase is the folder of every install's prepare folders.
func (s *Supervisor) prepareBase() string {
	return filepath.Join(s.cfg.Store.StateDir(), "prepare")
}

// boundPrepare gives the prepare folder scratch's writable folders
// (dirs.data, where npm, uv, the downloader and an allowed script write,
// and dirs.run) file systems of their own, before the first step runs: a
// step that fills one gets ENOSPC, and the state file system, the code
// store and the records keep their room. It returns the data folder's
// size, or 0 where this host has no disk limits; then one record says the
// install runs unbounded. A host that has them and fails to make one
// fails the install. The caller calls releasePrepare, whatever this
// returns.
func (s *Supervisor) boundPrepare(id labels.VatID, scratch string, dirs prepareDirs, uid, gid int) (int64, error) {
	if err := s.cfg.Packages.Disks.Support(); err != nil {
		s.log.Warn("prepare folder without a size limit", keyVat, id, "reason", err.Error())
		return 0, nil
	}
	want := s.cfg.Packages.PrepareBytes
	if want == 0 {
		want = DefaultPrepareBytes
	}
	bound, err := s.cfg.Packages.Disks.MountScratch(prepareImage(scratch), dirs.data, want)
	if err != nil {
		return 0, fmt.Errorf("giving the prepare folder its own file system of %d MiB: %w", want>>20, err)
	}
	if uid < 0 {
		uid, gid = os.Getuid(), os.Getgid()
	}
	if err := s.cfg.Packages.Disks.MountRun(dirs.run, uid, gid); err != nil {
		return 0, fmt.Errorf("giving the prepare wall's run folder a file system of its own: %w", err)
	}
	return bound, nil
}

// prepareImage is the image of the prepare folder scratch's data folder:
// inside scratch, so that no vat's image (<state>/disk/<id>.img) has its
// name, and it goes with the folder.
func prepareImage(scratch string) string { return filepath.Join(scratch, "data.img") }

// releasePrepare unmounts the file systems boundPrepare mounted in the
// prepare folder scratch (detached if a step's process still holds one)
// and removes the data folder's image. It also serves a folder an earlier
// supervisor left.
func (s *Supervisor) releasePrepare(scratch string) {
	if err := s.cfg.Packages.Disks.UnmountRun(filepath.Join(scratch, "run")); err != nil {
		s.log.Warn("unmounting a prepare folder's run folder", "folder", filepath.Base(scratch), keyErr, err)
	}
	if err := s.cfg.Packages.Disks.RemoveScratch(prepareImage(scratch), filepath.Join(scratch, "data")); err != nil {
		s.log.Warn("removing a prepare folder's file system", "folder", filepath.Base(scratch), keyErr, err)
	}
}

// removePrepareFolders removes the prepare folders an earlier supervisor
// left (it was killed during an install), their file systems unmounted
// first. Called by Start, before any install runs.
func (s *Supervisor) removePrepareFolders() {
	base := s.prepareBase()
	ents, err := os.ReadDir(base)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("listing prepare folders an earlier supervisor left", keyErr, err)
		}
		return
	}
	n := 0
	for _, e := range ents {
		if e.IsDir() {
			s.releasePrepare(filepath.Join(base, e.Name()))
		}
		if err := store.RemoveTree(filepath.Join(base, e.Name())); err != nil {
			s.log.Warn("removing a prepare folder an earlier supervisor left", "folder", e.Name(), keyErr, err)
			continue
		}
		n++
	}
	if n > 0 {
		s.log.Info("removed prepare folders an earlier supervisor left", "folders", n)
	}
}

// prepareRunner runs each step in a wall of its own: the registry its
// only egress, the scratch folders its only binds, nothing of the vat's.
// A step that fails with its prepare folder of bound bytes full (bound
// > 0) fails for that reason.
func (s *Supervisor) prepareRunner(id labels.VatID, dirs prepareDirs, uid, gid int, hosts []string, bound int64) packages.Runner {
	return func(ctx context.Context, step string, argv []string, env map[string]string) error {
		timeout := s.cfg.Packages.StepTimeout
		if timeout == 0 {
			timeout = 10 * time.Minute
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		g, netw, err := registryGrant(hosts...)
		if err != nil {
			return err
		}
		// What toybox wrote there (package.json, the tree) is the wall's
		// to write.
		if uid >= 0 {
			if err := chownTree(dirs.data, uid, gid); err != nil {
				return fmt.Errorf("handing the prepare folder to the wall's uid: %w", err)
			}
		}
		if s.entryErr != nil {
			return s.entryErr
		}
		var refused firstRefusal
		gv, err := grant.NewVat(grant.VatConfig{ID: id, Grants: g, Upstream: s.cfg.Upstream, Logger: s.log, OnDecision: refused.note})
		if err != nil {
			return fmt.Errorf("building the prepare wall's grant: %w", err)
		}
		defer gv.Revoke()
		entryCap, _, err := s.capPair(ctx, gv, "entry-cap", true)
		if err != nil {
			return err
		}
		appCap, _, err := s.capPair(ctx, gv, "app-cap", false)
		if err != nil {
			_ = entryCap.Close()
			return err
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			_ = entryCap.Close()
			_ = appCap.Close()
			return err
		}
		logged := make(chan struct{})
		go func() {
			defer close(logged)
			defer pr.Close()
			logPrepareOutput(s.log, pr, id, step)
		}()
		var rb [4]byte
		_, _ = rand.Read(rb[:])
		// The prepare wall's id is made here, well formed by construction
		// (and BuildPlan checks it).
		spec := wall.Spec{
			ID:         labels.VatID("prepare-" + hex.EncodeToString(rb[:])),
			Host:       s.walls,
			InstallDir: dirs.code,
			Command:    argv,
			DataDir:    dirs.data,
			RunDir:     dirs.run,
			StateDir:   s.cfg.Store.StateDir(),
			Env:        env,
			Net:        netw,
			EntryPath:  s.cfg.EntryPath,
			Entry:      s.entry,
			EntryCap:   entryCap,
			AppCap:     appCap,
			Stdout:     pw,
			Stderr:     pw,
			NoSeccomp:  s.cfg.NoSeccompTable(),
			TmpBytes:   s.cfg.WallTmpBytes,
			MaxTasks:   s.cfg.WallMaxTasks,
			// npm on the registry's answers, and an allowed script, are
			// held to the operator's memory and CPU, as a vat is.
			Cgroups: s.cfg.Cgroups,
			Limits:  wallLimits(s.cfg.Limits),
		}
		if uid >= 0 {
			spec.UID, spec.GID = uid, gid
		}
		began := time.Now()
		p, err := s.cfg.Launch(ctx, spec, s.log)
		if err != nil {
			_ = pw.Close()
			<-logged
			return fmt.Errorf("its prepare wall could not start: %w", err)
		}
		werr := make(chan error, 1)
		go func() { werr <- p.Wait() }()
		var exit error
		select {
		case exit = <-werr:
		case <-ctx.Done():
			_ = p.Stop(2 * time.Second)
			exit = <-werr
			if exit == nil {
				exit = ctx.Err()
			}
		}
		_ = pw.Close()
		<-logged
		s.log.Info("prepare step", keyVat, id, keyStep, step, keyExit, exitText(exit), "ms", time.Since(began).Milliseconds())
		if exit != nil && bound > 0 && disk.Full(dirs.data) {
			return fmt.Errorf("its %s step failed (%s): %w", step, exitText(exit), &prepareFullError{bytes: bound})
		}
		if exit != nil {
			return fmt.Errorf("its %s step failed (%s)%s; the supervisor's log has its output", step, exitText(exit), refused.text())
		}
		return nil
	}
}

// firstRefusal keeps the first egress a prepare wall was refused. A step
// that fails after one most likely failed for it (a registry the
// switchboard refuses, a dependency on another host), and the reason is
// the grant's or the switchboard's, not the step's output: the install's
// answer may carry it.
type firstRefusal struct {
	mu sync.Mutex
	d  *grant.Decision
}

// note is a prepare wall's OnDecision.
func (f *firstRefusal) note(d grant.Decision) {
	if d.Outcome != grant.Refused {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.d == nil {
		f.d = &d
	}
}

// text is ": its egress to <target> was refused: <reason>", or empty when
// nothing was refused.
func (f *firstRefusal) text() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.d == nil {
		return ""
	}
	return fmt.Sprintf(": its egress to %s was refused: %s", f.d.TargetText(), f.d.Reason)
}

// chownTree gives every entry below dir (links themselves) to uid:gid.
func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// registryGrant is the prepare wall's grant and network: each registry's
// host and port only. A loopback registry is forwarded into the wall on
// its own port; any other is reached through the wall's proxy, HTTPS on
// public addresses.
func registryGrant(registries ...string) ([]labels.Set, wall.Net, error) {
	var sets []map[string]any
	var n wall.Net
	for _, r := range registries {
		scheme, host, port, err := packages.RegistryHost(r)
		if err != nil {
			return nil, wall.Net{}, err
		}
		set := map[string]any{"host": host, "port": port}
		if labels.LoopbackHost(host) {
			n.Forwards = append(n.Forwards, wall.Forward{Port: uint16(port), Host: host, TargetPort: uint16(port)})
		} else {
			set["scheme"] = scheme
			set["network"] = labels.NetworkPublic
		}
		sets = append(sets, set)
	}
	b, _ := json.Marshal(sets)
	g, err := labels.ParseGrant(string(b))
	if err != nil {
		return nil, wall.Net{}, fmt.Errorf("the registry's grant: %w", err)
	}
	return g, n, nil
}

// checkPackageCode refuses to start a package bundle whose installed files
// differ from what was installed (docs/packages.md).
func checkPackageCode(code store.Code) error {
	if !packages.IsBundle(code.Dir) {
		return nil
	}
	if err := packages.Verify(code.Dir, code.Digest); err != nil {
		if errors.Is(err, packages.ErrChanged) {
			return fmt.Errorf("%s: %w", words.OffChanged, err)
		}
		return err
	}
	return nil
}

// packageEnv adds a package bundle's runtime settings under the owner's
// values.
func packageEnv(code store.Code, env map[string]string) map[string]string {
	if !packages.IsBundle(code.Dir) {
		return env
	}
	out := packages.RuntimeEnv()
	for k, v := range env {
		out[k] = v
	}
	return out
}

// logPrepareOutput logs the lines of a prepare step's output read from r
// until EOF. It reads every byte, so the step never finds its output
// closed. The log takes the first prepareOutputLines lines, each cut to
// prepareOutputLineBytes. One record at the end counts what it did not
// take.
func logPrepareOutput(log *slog.Logger, r io.Reader, id labels.VatID, step string) {
	br := bufio.NewReaderSize(r, prepareOutputLineBytes)
	var lines, notLogged, cut int
	more := false // the last read was a line's first prepareOutputLineBytes
	for {
		b, isPrefix, err := br.ReadLine()
		if err != nil {
			break
		}
		if more {
			cut += len(b)
			more = isPrefix
			continue
		}
		more = isPrefix
		if lines++; lines > prepareOutputLines {
			notLogged++
			continue
		}
		log.Info("prepare output", keyVat, id, keyStep, step, "line", string(b))
	}
	if notLogged > 0 || cut > 0 {
		log.Info("prepare output not logged", keyVat, id, keyStep, step, "lines", notLogged, "cut_bytes", cut)
	}
}
