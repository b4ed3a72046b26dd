package supervisor

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"toybox/labels"
	"toybox/vat/grant"
	"toybox/vat/manifest"
	"toybox/vat/store"
	"toybox/vat/switches"
	"toybox/vat/words"
)

// InstallRequest is one PUT /<vat>.
type InstallRequest struct {
	// ID is the vat's id, parsed where it entered (labels.ParseVatID).
	ID labels.VatID
	// Code is the stored code to run, as store.Put returned it: pinned.
	// Install releases that pin when it ends.
	Code store.Code
	// Egress is the owner's ?egress= value ("" for none).
	Egress string
	// EgressSent says the owner sent ?egress= at all. An upgrade without
	// it keeps the grant the owner typed before (as env carries over); an
	// empty ?egress= leaves the manifest's defaults alone.
	EgressSent bool
	// Env holds the owner's values; nil on an upgrade keeps the old
	// values of keys the new manifest still declares.
	Env map[string]string
	// EnvMerge says Env holds only the keys the owner sent (a package
	// install): on an upgrade every other old value carries over, and
	// EnvUnset names the keys to take away. Each old key must then be
	// one the new manifest declares.
	EnvMerge bool
	// EnvUnset names the old env values an EnvMerge upgrade takes away.
	// Each must be set; none may be in Env.
	EnvUnset []string
	// EnvDefaults are the package's own values (server.json's defaults)
	// for keys that have none: neither sent nor set before.
	EnvDefaults map[string]string
	// Limits are the owner's limits (within the operator's), when
	// LimitsSent; an upgrade without them keeps the old ones.
	Limits     store.Limits
	LimitsSent bool
	// MCP is the owner's ?mcp= for a single executable ("stdio" or
	// "http"); MCPSent says it was sent. An upgrade of a single
	// executable without it keeps the one sent before.
	MCP     string
	MCPSent bool
	// Listen is the owner's ?listen= for a single executable (the TCP
	// port its app listens on); ListenSent says it was sent. An upgrade
	// of a single executable without it keeps the one sent before.
	Listen     int
	ListenSent bool
	// OnlyNew installs only a vat that is not there (PUT with
	// If-None-Match: *): one installed under ID, or whose record cannot
	// be read, is refused with ErrExists and left as it is.
	OnlyNew bool
}

// Outcome says how an install went.
type Outcome int

// Outcomes.
const (
	// Installed: a new vat, running.
	Installed Outcome = iota + 1
	// Upgraded: the new code runs; the data folder carried over.
	Upgraded
	// InstalledOff: a new vat, recorded, that did not come up (see its
	// status).
	InstalledOff
)

// existsError refuses an install of a new vat only (OnlyNew) where vat id
// is there.
func existsError(id labels.VatID) error {
	return fmt.Errorf("%w: vat %s is already installed; remove it first, or install without If-None-Match to upgrade it", ErrExists, id)
}

// Install installs or upgrades vat req.ID. Input problems are ErrBadInput
// and change nothing. An upgrade whose new code does not come up is rolled
// back: the old version is started again, the record is unchanged, and the
// error says why, and whether the old version came up again.
func (s *Supervisor) Install(req InstallRequest) (Status, Outcome, error) {
	// The pin store.Put took on the code goes when this install ends (its
	// record names the code by then, or it gave up), then whatever it left
	// unused: the version an upgrade replaced, or its own code.
	defer s.pruneCode()
	defer s.cfg.Store.Release(req.Code.Digest)
	v, err := s.lockVat(req.ID, true)
	if err != nil {
		return Status{}, 0, err
	}
	defer v.op.Unlock()
	v.mu.Lock()
	old := struct {
		rec     store.Record
		code    store.Code
		grant   []labels.Set
		dropped []grant.Dropped
		run     *instance
	}{v.rec, v.code, v.grant, v.dropped, v.run}
	// A vat whose record cannot be read (and has no good copy) is
	// installed afresh, on the uid it held: nothing of it runs to upgrade
	// or roll back to. Should the install fail, it stays as it was.
	damaged := v.unreadable()
	v.mu.Unlock()
	existed := old.rec.ID != "" && !damaged
	giveUp := func() {
		if !existed && !damaged {
			s.forget(v)
		}
	}
	if req.OnlyNew && (existed || damaged) {
		return Status{}, 0, existsError(req.ID)
	}
	if !existed && !damaged {
		if err := s.forgetLeftTokens(req.ID); err != nil {
			giveUp()
			return Status{}, 0, err
		}
		if err := s.forgetLeftChoice(req.ID); err != nil {
			giveUp()
			return Status{}, 0, err
		}
	}

	c, err := s.validate(req, old.rec, old.code.Manifest, existed)
	var g []labels.Set
	var dropped []grant.Dropped
	if err == nil {
		g, dropped, err = s.grantFor(req.Code, c.egress)
	}
	rec := store.Record{ID: req.ID, Code: req.Code.Ref(), Egress: c.egress, Env: c.env, Installed: time.Now().UTC(), UID: old.rec.UID, Limits: c.limits, MCP: c.mcp, Listen: c.listen}
	if err == nil && rec.UID == 0 {
		rec.UID, err = s.allocUID(v)
	}
	if err != nil {
		giveUp()
		return Status{}, 0, err
	}
	s.logDropped(string(req.ID), dropped)
	var undamage func()
	if damaged {
		undamage = s.takeDamaged(v)
	}

	// Stop the old version (SIGTERM, grace, SIGKILL), then start the new.
	// Meanwhile it is not serving: visitors get 503 with Retry-After, not
	// an app that is going away.
	if old.run != nil {
		v.mu.Lock()
		old.run.markStopping(words.Stopping)
		v.mu.Unlock()
		old.run.stopAndWait()
	}
	v.mu.Lock()
	v.rec, v.code, v.grant, v.dropped = rec, req.Code, g, dropped
	v.restarts, v.lastExit, v.lastError, v.word = 0, "", "", words.Starting
	v.mu.Unlock()
	in := s.launch(v)
	v.mu.Lock()
	v.run = in
	v.mu.Unlock()
	readyErr := in.waitReady()
	rollback := func(kind, why error) (Status, Outcome, error) {
		// The new version, up or not, is not served while it stops: the
		// old one starts again after it.
		v.mu.Lock()
		in.markStopping(words.Stopping)
		v.mu.Unlock()
		in.stopAndWait()
		s.log.Warn("upgrade rolled back", keyVat, req.ID, keyCode, rec.Code, keyErr, why)
		v.mu.Lock()
		v.rec, v.code, v.grant, v.dropped = old.rec, old.code, old.grant, old.dropped
		v.restarts, v.lastExit, v.word = 0, "", words.Starting
		v.lastError = "upgrade to " + rec.Code + " failed: " + why.Error()
		v.mu.Unlock()
		back := s.launch(v)
		v.mu.Lock()
		v.run = back
		v.mu.Unlock()
		// Say what became of the old version: it need not come up again
		// (toybox stopping meanwhile, or the old version failing now).
		backErr := back.waitReady()
		switch {
		case s.ctx.Err() != nil:
			return s.status(v), 0, fmt.Errorf("%w: %w; the old version (%s) is installed again, and runs when toybox starts again (toybox is stopping)", kind, why, old.rec.Code)
		case backErr != nil:
			return s.status(v), 0, fmt.Errorf("%w: %w; the old version (%s) is installed again, but it did not come up either: %w", kind, why, old.rec.Code, backErr)
		}
		return s.status(v), 0, fmt.Errorf("%w: %w; the old version (%s) runs again", kind, why, old.rec.Code)
	}
	if readyErr != nil && existed {
		return rollback(ErrUpgradeRefused, fmt.Errorf("the new version did not come up: %w", readyErr))
	}
	if readyErr == nil {
		// What MCP server it is, recorded with its code (R4, R55).
		rec.MCPProbe = s.probeMCP(s.ctx, in, rec.Code)
		v.mu.Lock()
		v.rec.MCPProbe = rec.MCPProbe
		v.mu.Unlock()
	}
	if err := s.cfg.Store.SaveRecord(rec); err != nil {
		err = fmt.Errorf("saving the vat record: %w", err)
		if existed {
			return rollback(ErrUpgradeFailed, err)
		}
		v.mu.Lock()
		in.markStopping(words.OffStopped)
		v.mu.Unlock()
		in.stopAndWait()
		if damaged {
			// Its uid stays reserved, its record as damaged as it was.
			v.mu.Lock()
			v.run = nil
			v.mu.Unlock()
			undamage()
			return Status{}, 0, err
		}
		// Its folders went to a uid that is free again, and may go to the
		// next vat installed: kept as a removal keeps them.
		if rerr := s.cfg.Store.Retire(req.ID); rerr != nil {
			err = errors.Join(err, fmt.Errorf("keeping the data of %s: %w", req.ID, rerr))
		}
		s.forget(v)
		return Status{}, 0, err
	}
	// The record reads again.
	s.mu.Lock()
	v.reserved, v.uidUnknown = nil, false
	s.mu.Unlock()
	v.mu.Lock()
	v.damaged, v.keepCodes = "", nil
	v.mu.Unlock()
	v.mu.Lock()
	v.run = in
	v.mu.Unlock()
	s.log.Info("vat installed", keyVat, req.ID, keyCode, rec.Code, "upgrade", existed, keyWord, s.status(v).Status)
	switch {
	case readyErr != nil:
		return s.status(v), InstalledOff, nil
	case existed:
		return s.status(v), Upgraded, nil
	}
	return s.status(v), Installed, nil
}

// Check validates an install before its code is stored, as Install will
// (validate). It changes nothing.
func (s *Supervisor) Check(req InstallRequest) error {
	var old store.Record
	var oldM *manifest.Manifest
	existed := false
	if v, ok := s.get(req.ID); ok {
		v.mu.Lock()
		old, oldM = v.rec, v.code.Manifest
		existed = old.ID != "" && !v.unreadable()
		v.mu.Unlock()
	}
	_, err := s.validate(req, old, oldM, existed)
	return err
}

// checked is what an install runs with, once validate has checked it.
type checked struct {
	egress string            // the grant the owner typed (ownerEgress)
	mcp    string            // the ?mcp= that counts (ownerMCP)
	listen int               // the ?listen= that counts (ownerListen)
	env    map[string]string // the owner's values, or the old ones carried over
	limits store.Limits      // the owner's limits: sent, or the old ones
}

// validate checks install req over the vat it replaces: its record old and
// manifest oldM, when existed. It checks, in order:
//  1. the grant and the doors the manifest names;
//  2. the owner's limits against the operator's;
//  3. the MCP server config;
//  4. the ?listen= port;
//  5. the env values, or the old ones an upgrade carries over.
//
// Check (before the code is stored) and Install both call it. It changes
// nothing.
func (s *Supervisor) validate(req InstallRequest, old store.Record, oldM *manifest.Manifest, existed bool) (checked, error) {
	m := req.Code.Manifest
	c := checked{
		egress: ownerEgress(req, old, existed),
		mcp:    ownerMCP(req, old, existed),
		listen: ownerListen(req, old, existed),
		env:    req.Env,
		limits: old.Limits,
	}
	if req.LimitsSent {
		c.limits = req.Limits
	}
	if _, err := s.checkGrant(req.ID, m, c.egress); err != nil {
		return checked{}, err
	}
	if err := s.checkLimits(c.limits); err != nil {
		return checked{}, err
	}
	if err := s.checkMCP(string(req.ID), req.Code, c.mcp); err != nil {
		return checked{}, err
	}
	if err := checkListen(req.Code, c.mcp, c.listen); err != nil {
		return checked{}, err
	}
	switch {
	case req.EnvMerge:
		var err error
		if c.env, err = mergeEnv(req, m, oldM, old.Env, existed); err != nil {
			return checked{}, err
		}
	case c.env == nil && existed:
		var err error
		if c.env, err = carryEnv(m, oldM, old.Env); err != nil {
			return checked{}, err
		}
	}
	if err := checkEnv(m.Env, m.Sandbox.Files, c.env); err != nil {
		return checked{}, err
	}
	return c, nil
}

// ownerEgress is the grant the owner typed for this install: what it sent,
// or, on an upgrade that sent no ?egress=, the one it typed before.
func ownerEgress(req InstallRequest, old store.Record, existed bool) string {
	if !req.EgressSent && existed {
		return old.Egress
	}
	return req.Egress
}

// ownerMCP is the ?mcp= that counts for this install (ownerParam).
func ownerMCP(req InstallRequest, old store.Record, existed bool) string {
	return ownerParam(req, req.MCPSent, req.MCP, old.MCP, existed)
}

// ownerListen is the ?listen= that counts for this install (ownerParam).
func ownerListen(req InstallRequest, old store.Record, existed bool) int {
	return ownerParam(req, req.ListenSent, req.Listen, old.Listen, existed)
}

// ownerParam is what counts for this install of a parameter only a single
// executable takes (?mcp=, ?listen=): what the owner sent, or, on an
// upgrade of a single executable that sent none, the one sent before. A
// bundle says it in its manifest and has none.
func ownerParam[T any](req InstallRequest, sent bool, value, old T, existed bool) T {
	switch {
	case sent:
		return value
	case existed && !req.Code.Bundle:
		return old
	}
	var none T
	return none
}

// checkListen checks the ?listen= a single executable would run with: none
// for a bundle (its manifest says listen), and none for a stdio MCP server.
func checkListen(code store.Code, mcpParam string, port int) error {
	if port == 0 {
		return nil
	}
	if code.Bundle {
		return fmt.Errorf("%w: %w: ?listen= is for a single executable; a bundle says \"listen\" in its manifest.json", ErrBadInput, manifest.ErrBadListen)
	}
	if err := manifest.CheckListen(&manifest.Listen{Port: port}, mcpOf(code, store.Record{MCP: mcpParam})); err != nil {
		return fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return nil
}

// listenOf is the TCP port the app of code installed with rec listens on:
// its manifest's listen.port, or, for a single executable, the owner's
// ?listen=. 0 when it listens on $TOYBOX_LISTEN itself.
func listenOf(code store.Code, rec store.Record) int {
	if code.Manifest != nil && code.Manifest.Listen != nil {
		return code.Manifest.Listen.Port
	}
	if !code.Bundle {
		return rec.Listen
	}
	return 0
}

// checkMCP checks the MCP server config vat id would run with: ?mcp= only
// for a single executable, and no vat that authenticates its own clients
// while it holds toybox tokens (they would be checked by nobody).
func (s *Supervisor) checkMCP(id string, code store.Code, param string) error {
	if param != "" {
		if code.Bundle {
			return fmt.Errorf("%w: %w: ?mcp= is for a single executable; a bundle says \"mcp\" in its manifest.json", ErrBadInput, manifest.ErrBadMCP)
		}
		if _, err := manifest.ParseMCPQuery(param); err != nil {
			return fmt.Errorf("%w: %w", ErrBadInput, err)
		}
	}
	cfg := mcpOf(code, store.Record{MCP: param})
	if n := s.installedTokens(labels.VatID(id)); cfg != nil && cfg.Auth == manifest.AuthVat && n > 0 {
		return fmt.Errorf("%w: %w: vat %s holds %d toybox tokens, which a server that authenticates its own clients (mcp.auth: vat) would never see checked: revoke them first (DELETE /%s/tokens/<id>)",
			ErrBadInput, manifest.ErrBadMCP, id, n, id)
	}
	return nil
}

// installedTokens is how many tokens vat id holds as an installed vat
// (its record reads, or is damaged). An id not installed holds none:
// tokens there are a removed vat's, left by a removal cut short between
// its record and its tokens, and its next install forgets them
// (forgetLeftTokens).
func (s *Supervisor) installedTokens(id labels.VatID) int {
	v, ok := s.get(id)
	if !ok {
		return 0
	}
	v.mu.Lock()
	installed := v.rec.ID != "" || v.unreadable()
	v.mu.Unlock()
	if !installed {
		return 0
	}
	return len(s.tokens.List(string(id)))
}

// forgetLeftTokens forgets the tokens a removed vat left under id (Remove
// removes the record first), before a new vat is installed there: a
// removed vat's tokens open nothing of the next one.
func (s *Supervisor) forgetLeftTokens(id labels.VatID) error {
	if !s.tokens.Has(string(id)) {
		return nil
	}
	if err := s.tokens.Forget(string(id)); err != nil {
		return fmt.Errorf("forgetting the tokens removed vat %s left: %w", id, err)
	}
	s.log.Info("forgot the tokens a removed vat left", keyVat, id)
	return nil
}

// forgetLeftChoice clears an owner's choice to run id without its wall
// that no installed vat holds (walls.json kept from before its record
// went, by hand or from a backup): a removal clears it first, and a new
// vat is walled until its owner chooses.
func (s *Supervisor) forgetLeftChoice(id labels.VatID) error {
	if err := s.cfg.Switches.SetChoice(string(id), true); err != nil && !errors.Is(err, switches.ErrNoStateDir) {
		return fmt.Errorf("clearing the wall choice no vat %s holds: %w", id, err)
	}
	return nil
}

// checkGrant checks what vat id's manifest asks for: its egress grant, and
// the doors it names against the operator's door table.
func (s *Supervisor) checkGrant(id labels.VatID, m *manifest.Manifest, egress string) ([]labels.Set, error) {
	g, err := m.Grant(egress)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	if len(g) > 0 && s.cfg.Upstream == nil {
		return nil, fmt.Errorf("%w: this supervisor holds no switchboard socket, so it can grant no egress", ErrBadInput)
	}
	if err := s.checkOwnPorts(g); err != nil {
		return nil, err
	}
	if err := s.cfg.Doors.CheckManifest(id, m.Doors); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return g, nil
}

// carryEnv keeps the old values of the keys m still declares, for an
// upgrade that sends no env. A value keeps the meaning the owner gave it:
// the new manifest may use it as the old one did, or for less (a bind
// dropped, a read-write bind made read-only), never for more. Text that
// becomes a bind, or a read that becomes a write, is the owner's to confirm
// by sending env again.
func carryEnv(m, oldM *manifest.Manifest, old map[string]string) (map[string]string, error) {
	env := map[string]string{}
	for _, k := range m.Env {
		val, ok := old[k]
		if !ok {
			continue
		}
		was, now := envRole(oldM, k), envRole(m, k)
		if now != was && now != rolePlain && !(now == roleRead && (was == roleWrite || was == roleOAuth)) {
			return nil, fmt.Errorf("%w: %s: the old version %s, the new one %s; send env again to confirm its value (?env=)", ErrBadInput, k, was, now)
		}
		env[k] = val
	}
	return env, nil
}

// mergeEnv is the env of an EnvMerge install: the package's defaults,
// then the old values an upgrade carries over (carryEnv), less the ones
// req.EnvUnset takes away, then the values req sends. An old key the new
// manifest does not declare is refused rather than dropped: it was set by
// another install while this one prepared.
func mergeEnv(req InstallRequest, m, oldM *manifest.Manifest, old map[string]string, existed bool) (map[string]string, error) {
	if !existed {
		old = nil
	}
	for _, k := range req.EnvUnset {
		if _, ok := req.Env[k]; ok {
			return nil, fmt.Errorf("%w: env %s is both sent and unset; do one", ErrBadInput, k)
		}
		if _, ok := old[k]; !ok {
			return nil, fmt.Errorf("%w: unset-env %s: the vat has no value for it, so there is nothing to unset", ErrBadInput, k)
		}
	}
	kept := map[string]string{}
	for k, v := range old {
		if _, sent := req.Env[k]; !sent && !slices.Contains(req.EnvUnset, k) {
			kept[k] = v
		}
	}
	for k := range kept {
		if !slices.Contains(m.Env, k) {
			return nil, fmt.Errorf("%w: env %s was set while this install prepared, and it would be dropped; install again", ErrBadInput, k)
		}
	}
	carried, err := carryEnv(m, oldM, kept)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for k, v := range req.EnvDefaults {
		if _, ok := old[k]; !ok {
			env[k] = v
		}
	}
	for k, v := range carried {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	return env, nil
}

// What a manifest does with the value of an env key.
const (
	rolePlain = "takes it as text"
	roleRead  = "reads it (sandbox.files.read)"
	roleWrite = "writes it (sandbox.files.write)"
	roleOAuth = "keeps a read-write folder there (sandbox.files.oauthDir)"
)

func envRole(m *manifest.Manifest, k string) string {
	switch {
	case m == nil:
		return rolePlain
	case slices.Contains(m.Sandbox.Files.OAuthDir, k):
		return roleOAuth
	case slices.Contains(m.Sandbox.Files.Write, k):
		return roleWrite
	case slices.Contains(m.Sandbox.Files.Read, k):
		return roleRead
	}
	return rolePlain
}

// checkEnv refuses values for undeclared keys, values too long or holding a
// NUL byte, and bind paths that are not absolute.
func checkEnv(declared []string, files manifest.Files, env map[string]string) error {
	ok := map[string]bool{}
	for _, k := range declared {
		ok[k] = true
	}
	for k, val := range env {
		if !ok[k] {
			return fmt.Errorf("%w: env key %q is not declared by the manifest", ErrBadInput, k)
		}
		if len(val) > 64<<10 {
			return fmt.Errorf("%w: env value of %q is too long", ErrBadInput, k)
		}
		// No process can be given it (execve ends a string there): the vat
		// would be recorded and never start, or an upgrade stop the old
		// version for nothing.
		if strings.IndexByte(val, 0) >= 0 {
			return fmt.Errorf("%w: env value of %q holds a NUL byte", ErrBadInput, k)
		}
	}
	for k, what := range fileKeys(files) {
		if val := env[k]; val != "" && (val[0] != '/' || containsDotDot(val)) {
			return fmt.Errorf("%w: %s of %s must be an absolute path without .., got %q", ErrBadInput, k, what, val)
		}
	}
	return nil
}

// fileKeys maps each env key sandbox.files names to what it binds.
func fileKeys(f manifest.Files) map[string]string {
	out := map[string]string{}
	for _, k := range f.Read {
		out[k] = "sandbox.files.read"
	}
	for _, k := range f.Write {
		out[k] = "sandbox.files.write"
	}
	for _, k := range f.OAuthDir {
		out[k] = "sandbox.files.oauthDir"
	}
	return out
}

func containsDotDot(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}
