// Package supervisor runs installed vats: it installs and upgrades code from
// the store, starts each vat inside its wall (or, only when the switches say
// so, without one), serves every vat its Vat capability on fd 3, watches it,
// restarts it with backoff, and serves the admin and public HTTP interfaces.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"toybox/labels"
	"toybox/vat/access"
	"toybox/vat/disk"
	"toybox/vat/doors"
	"toybox/vat/edge"
	"toybox/vat/grant"
	"toybox/vat/manifest"
	"toybox/vat/mcp/front"
	"toybox/vat/store"
	"toybox/vat/switches"
	"toybox/vat/tokens"
	"toybox/vat/wall"
	"toybox/vat/wall/cgroup"
	"toybox/vat/words"
)

// Process is one running spawn. *wall.Process satisfies it.
type Process interface {
	Pid() int
	Tier() string
	// Wait waits for the process to exit; called once.
	Wait() error
	// Stop sends SIGTERM, then SIGKILL after grace, and returns when the
	// process is gone.
	Stop(grace time.Duration) error
}

// egressReporter is a Process that says how its programs get out
// (*wall.Process does).
type egressReporter interface {
	Egress() (transparent bool, why string)
}

// egressOf is p's egress word and why.
func egressOf(p Process) (words.Egress, string) {
	e, ok := p.(egressReporter)
	if !ok {
		return words.EgressNone, ""
	}
	transparent, why := e.Egress()
	switch {
	case transparent:
		return words.EgressTransparent, ""
	case why != "":
		return words.EgressProxyOnly, why
	}
	return words.EgressNone, ""
}

// Launcher starts a walled spawn (wall.Start, adapted).
type Launcher func(ctx context.Context, spec wall.Spec, log *slog.Logger) (Process, error)

// Config configures a Supervisor.
type Config struct {
	// Store is the code store and the vat records. Required.
	Store *store.Store
	// Switches decide whether each vat runs walled. Required.
	Switches *switches.Switches
	// Upstream is the supervisor's one switchboard connection. If nil, no
	// vat can have egress: an install with a grant is refused.
	Upstream *grant.Upstream
	// Doors is the operator's door table. A vat whose manifest names its
	// own set gets its doors on fd 3 (revoked when the spawn ends). If nil,
	// no vat has doors and a manifest naming one is refused.
	Doors *doors.Table
	// Launch starts a walled spawn. Required unless every vat runs
	// unwalled by the switches.
	Launch Launcher
	// EntryPath is the toybox-entry binary handed to the wall.
	EntryPath string
	// Bwrap is the bubblewrap binary handed to the wall (wall.Spec.Bwrap).
	// If empty, bwrap on $PATH.
	Bwrap string
	// DockerSockets are the Docker sockets an unwalled vat's status says
	// it reaches, when its user may connect to one. If nil,
	// /run/docker.sock and /var/run/docker.sock.
	DockerSockets []string
	// ReadyTimeout is how long an app has to listen on $TOYBOX_LISTEN. If
	// zero, 10s.
	ReadyTimeout time.Duration
	// StopGrace is the time between SIGTERM and SIGKILL. If zero, 5s.
	StopGrace time.Duration
	// WallTmpBytes is the size of each wall's /tmp (memory). If zero,
	// wall.TmpBytes.
	WallTmpBytes int64
	// WallMaxTasks is each wall's task limit (processes and threads). If
	// zero, wall.MaxTasks.
	WallMaxTasks int
	// Cgroups makes each wall's cgroup, which holds it to its memory,
	// CPU and task limits. If nil, walls have none (their status says
	// so).
	Cgroups *cgroup.Host
	// Limits are the operator's: each vat's by default, and the most its
	// owner may set (PUT /<vat>?memory_mib=...). A zero field: no limit
	// of that kind.
	Limits Limits
	// Disks gives each vat's data folder a file system of its own of
	// Limits.DiskBytes. If nil, data folders have no limit.
	Disks *disk.Disks
	// BackoffMin and BackoffMax bound the restart delay, which doubles
	// after each crash. If zero, 200ms and 30s.
	BackoffMin, BackoffMax time.Duration
	// MaxRestarts is how many crashes in a row (each within StableAfter of
	// its start) leave a vat off. If zero, 5.
	MaxRestarts int
	// StableAfter is how long a run must last to reset the crash count. If
	// zero, 1 minute.
	StableAfter time.Duration
	// UID and GID are the host ids vats run as when the supervisor is
	// root and UIDBase is negative. If zero, 65534. Ignored when not root.
	UID, GID int
	// UIDBase, when the supervisor is root, gives every vat its own host
	// uid and gid, UIDBase+n with the lowest n no other installed vat
	// holds, kept in the vat's record: no two vats share an owner on the
	// host, whatever happens inside their walls. If zero, 1000000. If
	// negative, every vat runs as UID:GID. Ignored when not root (then
	// every vat runs as the supervisor's user, inside its own namespace).
	UIDBase int
	// LogBytes is how much of each app's output GET /<vat>/logs keeps. If
	// zero, 64 KiB.
	LogBytes int
	// Hosts are the names the public handler answers to (and each
	// <vat>.<name> as that vat's own origin). The zero value answers to
	// the loopback forms only: localhost, <vat>.localhost and loopback
	// addresses.
	Hosts edge.Hosts
	// OwnPorts are the supervisor's own TCP ports on this host (its http
	// socket): a manifest naming one on loopback is refused. If empty, none
	// is known.
	OwnPorts []uint16
	// Tokens are the vats' bearer tokens (POST /<vat>/tokens). If nil,
	// <state>/tokens.json is opened.
	Tokens *access.Store
	// MCPOrigins are browser origins other than an endpoint's own that may
	// call the MCP endpoints (scheme://host[:port], exactly). If empty,
	// none.
	MCPOrigins []string
	// Packages prepares package installs (?package=; docs/packages.md).
	Packages PackagesConfig
	// PublicURL is where clients reach the public listener
	// (scheme://host[:port], no path): an MCP server with mcp.auth "vat"
	// is told its endpoint's URL under it as $MCP_PUBLIC_URL
	// (<PublicURL>/<vat>/mcp), the resource its own metadata must name. If
	// empty, such a server is told none.
	PublicURL string
	// Logger receives one record per launch, exit and admin change, and
	// per MCP edge decision. If nil, discarded.
	Logger *slog.Logger
	// Observer is told of every egress decision, spawn and install. If
	// nil, nothing is told.
	Observer Observer
}

// Log attribute keys.
const (
	keyVat    = "vat"
	keyCode   = "code"
	keyWord   = "status"
	keyPid    = "pid"
	keyErr    = "error"
	keyTier   = "tier"
	keyReason = "reason"
	keyExit   = "exit"
)

// Supervisor runs the installed vats.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc

	tokens   *access.Store
	mcpRules front.Rules
	// walls is the state every wall of this supervisor shares: the /etc
	// views and which walls bind them, and the host's lookups (wall.Host).
	walls *wall.Host

	mu       sync.Mutex
	vats     map[string]*vat
	mcpLogs  map[string]*tokens.Records // per vat id: its MCP records' rate
	stopping bool
}

// New returns a Supervisor; nothing runs until Start.
func New(cfg Config) (*Supervisor, error) {
	if cfg.Store == nil || cfg.Switches == nil {
		return nil, fmt.Errorf("%w: a store and switches are required", ErrBadInput)
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 5 * time.Second
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin = 200 * time.Millisecond
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = 30 * time.Second
	}
	if cfg.MaxRestarts == 0 {
		cfg.MaxRestarts = 5
	}
	if cfg.StableAfter == 0 {
		cfg.StableAfter = time.Minute
	}
	if cfg.UID == 0 {
		cfg.UID = 65534
	}
	if cfg.GID == 0 {
		cfg.GID = 65534
	}
	if cfg.UIDBase == 0 {
		cfg.UIDBase = DefaultUIDBase
	}
	if os.Geteuid() != 0 {
		cfg.UID, cfg.GID, cfg.UIDBase = -1, -1, -1
	}
	if cfg.LogBytes == 0 {
		cfg.LogBytes = 64 << 10
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.UIDBase >= 0 {
		codeGID := -1
		if cfg.Store != nil {
			codeGID = cfg.Store.CodeGID()
		}
		for _, c := range SubordinateClashes("/etc/subuid", "/etc/subgid", cfg.UIDBase, codeGID) {
			log.Warn("another user can act as a vat: move its range above the vats' ids", "clash", c)
		}
	}
	toks := cfg.Tokens
	if toks == nil {
		var err error
		if toks, err = access.Open(filepath.Join(cfg.Store.StateDir(), "tokens.json")); err != nil {
			return nil, err
		}
	}
	rules := front.Rules{Origins: cfg.MCPOrigins}
	// The MCP edge's Host allowlist is the public handler's names (with
	// the loopback forms), a loopback one on the port it came in on.
	rules.PublicHosts = cfg.Hosts.Names()
	ctx, cancel := context.WithCancel(context.Background())
	return &Supervisor{
		cfg: cfg, log: log, ctx: ctx, cancel: cancel, vats: map[string]*vat{},
		tokens: toks, mcpRules: rules, mcpLogs: map[string]*tokens.Records{},
		walls: wall.NewHost(),
	}, nil
}

// retireOrphans retires the folders of vats removed before Remove retired
// them (an earlier version left them with their uids, which new vats get
// again).
func (s *Supervisor) retireOrphans() {
	orphans, err := s.cfg.Store.Orphans()
	if err != nil {
		s.log.Warn("listing removed vats' folders", keyErr, err)
		return
	}
	for _, id := range orphans {
		if err := s.cfg.Store.Retire(id); err != nil {
			s.log.Warn("retiring a removed vat's folders", keyVat, id, keyErr, err)
		}
	}
}

// DefaultUIDBase is the first host uid a root supervisor gives a vat.
const DefaultUIDBase = 1000000

// vat is one installed vat and its current run.
type vat struct {
	id   string
	logs *ring

	// op serialises admin operations on this id (install, upgrade,
	// restart, delete).
	op sync.Mutex

	// uidTaken is the host uid allocUID chose for it, before its record
	// says so (guarded by Supervisor.mu): two installs at once never get
	// the same one.
	uidTaken int

	mu        sync.Mutex
	rec       store.Record
	code      store.Code
	grant     []labels.Set
	word      words.Word
	tier      string
	egress    words.Egress
	egressWhy string
	pid       int
	restarts  int
	lastExit  string
	lastError string
	doors     []string        // the door entries the running spawn holds
	dropped   []grant.Dropped // manifest defaults left out of the grant, and why
	mcpErr    string          // the MCP edge's last failure to reach it
	bridge    *os.File        // a stdio MCP vat's bridge socket, listening (kept across its walls)
	run       *instance
	// inForce and unlimited are the running spawn's limits, and why it
	// runs without the others.
	inForce   InForce
	unlimited map[string]string
	// wordDetail is what the word names beside it (OffMemory's limit).
	wordDetail string
	// facts are what its running spawn shares with the host, or that it
	// runs unwalled: its wall line says them.
	facts wallFacts
	// damaged says what is wrong with the vat's record and how to repair
	// it; "" when it reads. A vat whose record has no good copy either is
	// off (words.OffDamaged), and is no installed vat an install upgrades.
	damaged string
	// reserved are the uids a damaged record held (guarded by
	// Supervisor.mu): no other vat gets them. uidUnknown: it held one that
	// cannot be learnt, so no new vat gets a uid (ErrUIDUnknown).
	reserved   []int
	uidUnknown bool
	// keepCodes are the code references a damaged record names: kept
	// from pruning.
	keepCodes []string
	gv        *grant.Vat // the grant of its latest spawn (Regrant changes it)
}

// Status is what GET /<vat> answers.
type Status struct {
	ID        string       `json:"id"`
	Status    string       `json:"status"`
	StatusES  string       `json:"status_es"`
	Tier      string       `json:"tier,omitempty"`
	Code      string       `json:"code"`
	Grant     []labels.Set `json:"grant"`
	PID       int          `json:"pid,omitempty"`
	Restarts  int          `json:"restarts"`
	LastExit  string       `json:"last_exit,omitempty"`
	LastError string       `json:"last_error,omitempty"`
	Installed time.Time    `json:"installed"`
	// UID is the vat's own host uid, when it has one.
	UID   int      `json:"uid,omitempty"`
	Env   []string `json:"env,omitempty"`
	Doors []string `json:"doors,omitempty"`
	// Dropped lists the manifest's loopback addresses the vat runs
	// without, and why (the manifest-defaults rule).
	Dropped []string `json:"dropped,omitempty"`
	// Limits are the limits its running wall is held to: only those
	// enforced. Unlimited names each other limit and why it has none.
	Limits    *InForce          `json:"limits,omitempty"`
	Unlimited map[string]string `json:"unlimited,omitempty"`
	// OwnLimits are the owner's own limits (PUT ?memory_mib=...).
	OwnLimits store.Limits `json:"own_limits,omitzero"`
	// Damaged says that the vat's record cannot be read, what it runs
	// from meanwhile, and how to repair it.
	Damaged string `json:"damaged,omitempty"`
	// MCP holds the MCP facts of an MCP server vat (docs/mcp.md).
	MCP *MCPStatus `json:"mcp,omitempty"`
	// WallLine says what its wall lets it read and change beyond its own
	// folders, ending, for a walled vat, with the one fixed sentence of
	// what no wall covers (docs/walls.md); in English and Spanish.
	WallLine   string `json:"wall_line,omitempty"`
	WallLineES string `json:"wall_line_es,omitempty"`
	// Egress says how its running wall's programs get out: transparent
	// (every connect through its grant) or the proxy alone, and why.
	Egress   string `json:"egress,omitempty"`
	EgressES string `json:"egress_es,omitempty"`
	// LastRefusal is its most recent egress refusal (since the
	// supervisor started it last).
	LastRefusal *grant.Refusal `json:"last_refusal,omitempty"`

	word   words.Word
	detail string
}

// Word returns the status word.
func (st Status) Word() words.Word { return st.word }

// WordDetail returns what the status word names beside it (a memory
// limit, the shares of "not walled: shares <names>"), or "".
func (st Status) WordDetail() string { return st.detail }

func (s *Supervisor) status(v *vat) Status {
	v.mu.Lock()
	defer v.mu.Unlock()
	g := v.grant
	if g == nil {
		g = []labels.Set{}
	}
	detail := ""
	switch v.word {
	case words.OffMemory:
		detail = v.wordDetail
	case words.NotWalledShares:
		detail = v.facts.shareNames()
	}
	st := Status{
		ID: v.id, Status: v.word.With("en", detail), StatusES: v.word.With("es", detail), Tier: v.tier,
		Code: v.rec.Code, Grant: g, PID: v.pid, Restarts: v.restarts,
		LastExit: v.lastExit, LastError: v.lastError, Installed: v.rec.Installed, UID: v.rec.UID, word: v.word, detail: detail,
		Doors:     append([]string(nil), v.doors...),
		Dropped:   droppedText(v.dropped),
		OwnLimits: v.rec.Limits,
		Damaged:   v.damaged,
		MCP:       s.mcpStatus(v),
		Egress:    v.egress.With("en", v.egressWhy),
		EgressES:  v.egress.With("es", v.egressWhy),
	}
	if v.gv != nil {
		if r, ok := v.gv.LastRefusal(); ok {
			st.LastRefusal = &r
		}
	}
	if v.word.Routed() {
		st.WallLine, st.WallLineES = v.facts.line("en"), v.facts.line("es")
	}
	if v.pid > 0 {
		in := v.inForce
		st.Limits = &in
		st.Unlimited = maps.Clone(v.unlimited)
	}
	for k := range v.rec.Env {
		st.Env = append(st.Env, k)
	}
	sort.Strings(st.Env)
	return st
}

func (v *vat) setWord(w words.Word) {
	v.mu.Lock()
	v.word = w
	v.mu.Unlock()
}

// Start starts every installed vat. A record that cannot be loaded leaves
// that vat off with the reason; the others still start. It returns once
// every vat has been launched (not necessarily ready).
func (s *Supervisor) Start() error {
	// A wall an earlier supervisor of this state dir left running (it was
	// killed while the wall was being set up) would run beside the one
	// started now, on the same data folder.
	if n, err := wall.EndLeftovers(s.cfg.Store.StateDir()); err != nil {
		s.log.Error("ending walls an earlier supervisor left running", keyErr, err)
	} else if n > 0 {
		s.log.Warn("ended walls an earlier supervisor left running", "walls", n)
	}
	// Their cgroups too (a wall's goes when it ends; not a killed
	// supervisor's).
	if n, err := s.cfg.Cgroups.Sweep(); err != nil {
		s.log.Warn("removing the cgroups of walls an earlier supervisor left", keyErr, err)
	} else if n > 0 {
		s.log.Info("removed the cgroups of walls an earlier supervisor left", "cgroups", n)
	}
	// No wall runs yet (walls end with the supervisor): views of /etc
	// left from an earlier run are cleared, and built again on demand.
	if err := s.walls.SweepViews(s.cfg.Store.StateDir()); err != nil {
		s.log.Warn("clearing old /etc views", keyErr, err)
	}
	// The view every plain wall binds, built now rather than by the first
	// spawn (a spawn that comes meanwhile waits for this same build).
	go func() {
		if err := s.walls.PrepareEtcView(s.cfg.Store.StateDir()); err != nil {
			s.log.Warn("preparing the walls' /etc", keyErr, err)
		}
	}()
	recs, bad, rerr := s.cfg.Store.Records()
	if rerr != nil {
		s.log.Error("reading installed vats", keyErr, rerr)
	}
	if rerr == nil {
		s.retireOrphans()
	}
	// A record that cannot be read keeps its vat listed, its id and uid
	// taken: from its good copy, or off with the reason.
	damage := map[string]string{}
	for _, d := range bad {
		if rec, text := s.loadDamaged(d); rec != nil {
			recs = append(recs, *rec)
			damage[d.ID] = text
		}
	}
	// Load every record first, so that uids handed to records that have
	// none never collide with a uid a later record holds.
	var load []*vat
	for _, rec := range recs {
		v := &vat{id: rec.ID, logs: newRing(s.cfg.LogBytes), rec: rec, word: words.Starting, damaged: damage[rec.ID]}
		code, err := s.cfg.Store.Code(rec.Code)
		if err == nil {
			v.code = code
			v.grant, v.dropped, err = s.grantFor(code, rec.Egress)
			s.logDropped(rec.ID, v.dropped)
		}
		if err != nil {
			v.word, v.lastError = words.OffStopped, "loading its code: "+err.Error()
			s.log.Error("vat not started", keyVat, rec.ID, keyCode, rec.Code, keyErr, err)
		} else {
			load = append(load, v)
		}
		s.mu.Lock()
		s.vats[rec.ID] = v
		s.mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, v := range load {
		if v.rec.UID == 0 && s.cfg.UIDBase >= 0 {
			uid, err := s.allocUID(v)
			if err != nil {
				v.word, v.lastError = words.OffStopped, "giving it a uid: "+err.Error()
				s.log.Error("vat not started", keyVat, v.id, keyErr, err)
				continue
			}
			v.mu.Lock()
			v.rec.UID = uid
			rec := v.rec
			v.mu.Unlock()
			if err := s.cfg.Store.SaveRecord(rec); err != nil {
				s.log.Error("saving the vat's uid", keyVat, rec.ID, keyErr, err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.op.Lock()
			defer v.op.Unlock()
			in := s.launch(v)
			v.mu.Lock()
			v.run = in
			probed := v.rec.MCPProbe != nil && v.rec.MCPProbe.Code == v.rec.Code
			v.mu.Unlock()
			if in.mcp != nil && !probed {
				go s.probeLater(v, in)
			}
		}()
	}
	wg.Wait()
	if rerr == nil {
		s.pruneCode()
	}
	return rerr
}

// probeLater probes an MCP vat installed before its probe was recorded
// (by an older toybox), once its instance serves, and keeps what it
// learned in its record.
func (s *Supervisor) probeLater(v *vat, in *instance) {
	if in.waitReady() != nil {
		return
	}
	v.op.Lock()
	defer v.op.Unlock()
	v.mu.Lock()
	current, code := v.run == in, v.rec.Code
	v.mu.Unlock()
	if !current {
		return
	}
	snap := s.probeMCP(s.ctx, in, code)
	v.mu.Lock()
	v.rec.MCPProbe = snap
	rec := v.rec
	v.mu.Unlock()
	if err := s.cfg.Store.SaveRecord(rec); err != nil {
		s.log.Warn("saving the MCP probe", keyVat, v.id, keyErr, err)
	}
}

// pruneCode removes stored code that no vat uses: after a removal, after an
// install (the version an upgrade replaced, the code of a failed one), and
// at start. Code an install is still using is pinned (store.Put); when any
// record cannot be read, nothing is removed.
func (s *Supervisor) pruneCode() {
	_, err := s.cfg.Store.Prune(func() (map[string]bool, error) {
		recs, bad, err := s.cfg.Store.Records()
		if err != nil {
			return nil, fmt.Errorf("reading the installed vats: %w", err)
		}
		used := map[string]bool{}
		for _, r := range recs {
			used[strings.TrimPrefix(r.Code, "sha256:")] = true
		}
		// A damaged record keeps every code its bytes or its good copy
		// name; one that names none could need any.
		for _, d := range bad {
			if len(d.Codes) == 0 {
				return nil, fmt.Errorf("the record of %s cannot be read and names no code", d.ID)
			}
			for _, c := range d.Codes {
				used[strings.TrimPrefix(c, "sha256:")] = true
			}
		}
		s.mu.Lock()
		for _, v := range s.vats {
			v.mu.Lock()
			used[strings.TrimPrefix(v.rec.Code, "sha256:")] = true
			used[v.code.Digest] = true
			for _, c := range v.keepCodes {
				used[strings.TrimPrefix(c, "sha256:")] = true
			}
			v.mu.Unlock()
		}
		s.mu.Unlock()
		return used, nil
	})
	if err != nil {
		s.log.Warn("removing unused code", keyErr, err)
	}
}

// Shutdown stops every vat (SIGTERM, then SIGKILL after the grace period)
// and returns when all are gone or ctx ends.
func (s *Supervisor) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	vs := make([]*vat, 0, len(s.vats))
	for _, v := range s.vats {
		vs = append(vs, v)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, v := range vs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v.op.Lock() // let an operation in progress finish first
				defer v.op.Unlock()
				v.mu.Lock()
				in := v.run
				v.mu.Unlock()
				if in != nil {
					in.stopAndWait()
				}
				v.setWord(words.OffShutdown)
			}()
		}
		wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.cancel()
	// The data folders' file systems go with the supervisor (a vat still
	// stopping keeps its own until it is gone: detached).
	if derr := s.cfg.Disks.Close(); derr != nil {
		s.log.Warn("unmounting the data folders", keyErr, derr)
	}
	return err
}

func (s *Supervisor) get(id string) (*vat, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vats[id]
	return v, ok
}

// Status returns the status of vat id; for a stdio MCP vat, with its
// bridge's live counters.
func (s *Supervisor) Status(id string) (Status, error) {
	v, ok := s.get(id)
	if !ok {
		return Status{}, fmt.Errorf("%w: %q", ErrNoVat, id)
	}
	st := s.status(v)
	if st.MCP != nil && st.MCP.Transport == manifest.TransportStdio {
		if in, _, _ := s.serving(id); in != nil {
			st.MCP.Bridge = bridgeStats(s.ctx, in)
		}
	}
	return st, nil
}

// List returns every vat's status, by id.
func (s *Supervisor) List() []Status {
	s.mu.Lock()
	vs := make([]*vat, 0, len(s.vats))
	for _, v := range s.vats {
		vs = append(vs, v)
	}
	s.mu.Unlock()
	out := make([]Status, 0, len(vs))
	for _, v := range vs {
		out = append(out, s.status(v))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Logs returns the tail of vat id's output.
func (s *Supervisor) Logs(id string) ([]byte, error) {
	v, ok := s.get(id)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoVat, id)
	}
	return v.logs.Bytes(), nil
}

// InstallRequest is one PUT /<vat>.
type InstallRequest struct {
	ID string
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

// Install installs or upgrades vat req.ID. Input problems are ErrBadInput
// and change nothing. An upgrade whose new code does not come up is rolled
// back: the old version runs again, the record is unchanged, and the error
// says why.
func (s *Supervisor) Install(req InstallRequest) (Status, Outcome, error) {
	// The pin store.Put took on the code goes when this install ends (its
	// record names the code by then, or it gave up, a bad id included),
	// then whatever it left unused: the version an upgrade replaced, or
	// its own code.
	defer s.pruneCode()
	defer s.cfg.Store.Release(req.Code.Digest)
	if !labels.ValidVatID(req.ID) {
		return Status{}, 0, fmt.Errorf("%w: vat id %q is not [a-z0-9][a-z0-9-]{0,62}", ErrBadInput, req.ID)
	}
	m := req.Code.Manifest
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
	damaged := v.damaged != "" && v.code.Manifest == nil
	v.mu.Unlock()
	existed := old.rec.ID != "" && !damaged
	giveUp := func() {
		if !existed && !damaged {
			s.forget(v)
		}
	}

	egress := ownerEgress(req, old.rec, existed)
	mcpParam := ownerMCP(req, old.rec, existed)
	listenParam := ownerListen(req, old.rec, existed)
	var g []labels.Set
	var dropped []grant.Dropped
	env := req.Env
	_, err = s.checkGrant(req.ID, m, egress)
	if err == nil {
		err = s.checkMCP(req.ID, req.Code, mcpParam)
	}
	if err == nil {
		err = checkListen(req.Code, mcpParam, listenParam)
	}
	if err == nil {
		g, dropped, err = s.grantFor(req.Code, egress)
	}
	if err == nil && env == nil && existed {
		env, err = carryEnv(m, old.code.Manifest, old.rec.Env)
	}
	if err == nil {
		err = checkEnv(m.Env, m.Sandbox.Files, env)
	}
	lim := old.rec.Limits
	if req.LimitsSent {
		lim = req.Limits
	}
	if err == nil {
		err = s.checkLimits(lim)
	}
	rec := store.Record{ID: req.ID, Code: req.Code.Ref(), Egress: egress, Env: env, Installed: time.Now().UTC(), UID: old.rec.UID, Limits: lim, MCP: mcpParam, Listen: listenParam}
	if err == nil && rec.UID == 0 {
		rec.UID, err = s.allocUID(v)
	}
	if err != nil {
		giveUp()
		return Status{}, 0, err
	}
	s.logDropped(req.ID, dropped)
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
		_ = back.waitReady()
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

// Check validates an install before its code is stored: the grant, and the
// env values (or, on an upgrade without them, the old values carried over).
func (s *Supervisor) Check(req InstallRequest) error {
	id, m, env := req.ID, req.Code.Manifest, req.Env
	if !labels.ValidVatID(id) {
		return fmt.Errorf("%w: vat id %q is not [a-z0-9][a-z0-9-]{0,62}", ErrBadInput, id)
	}
	var old store.Record
	var oldM *manifest.Manifest
	v, existed := s.get(id)
	if existed {
		v.mu.Lock()
		old, oldM = v.rec, v.code.Manifest
		v.mu.Unlock()
		existed = old.ID != ""
	}
	if _, err := s.checkGrant(id, m, ownerEgress(req, old, existed)); err != nil {
		return err
	}
	if req.LimitsSent {
		if err := s.checkLimits(req.Limits); err != nil {
			return err
		}
	}
	if err := s.checkMCP(id, req.Code, ownerMCP(req, old, existed)); err != nil {
		return err
	}
	if err := checkListen(req.Code, ownerMCP(req, old, existed), ownerListen(req, old, existed)); err != nil {
		return err
	}
	if env == nil && existed {
		var err error
		if env, err = carryEnv(m, oldM, old.Env); err != nil {
			return err
		}
	}
	return checkEnv(m.Env, m.Sandbox.Files, env)
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
	if cfg != nil && cfg.Auth == manifest.AuthVat && s.tokens.Has(id) {
		return fmt.Errorf("%w: %w: vat %s holds %d toybox tokens, which a server that authenticates its own clients (mcp.auth: vat) would never see checked: revoke them first (DELETE /%s/tokens/<id>)",
			ErrBadInput, manifest.ErrBadMCP, id, len(s.tokens.List(id)), id)
	}
	return nil
}

// checkGrant checks what vat id's manifest asks for: its egress grant, and
// the doors it names against the operator's door table.
func (s *Supervisor) checkGrant(id string, m *manifest.Manifest, egress string) ([]labels.Set, error) {
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

// allocUID returns the lowest free per-vat uid for v, or 0 when vats do not
// get their own uids. A uid a damaged record holds is not free; while one
// holds a uid that cannot be learnt, none is (ErrUIDUnknown).
func (s *Supervisor) allocUID(v *vat) (int, error) {
	if s.cfg.UIDBase < 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	used := map[int]bool{}
	for _, o := range s.vats {
		if o == v {
			continue
		}
		if o.uidUnknown {
			return 0, fmt.Errorf("%w: vat %s; repair its record or remove it (DELETE /%s) first", ErrUIDUnknown, o.id, o.id)
		}
		o.mu.Lock()
		used[o.rec.UID] = true
		o.mu.Unlock()
		used[o.uidTaken] = true
		for _, u := range o.reserved {
			used[u] = true
		}
	}
	for n := 0; ; n++ {
		if !used[s.cfg.UIDBase+n] {
			v.uidTaken = s.cfg.UIDBase + n
			return v.uidTaken, nil
		}
	}
}

// ids returns the host uid and gid vat v runs as (-1 when not root).
func (s *Supervisor) ids(rec store.Record) (int, int) {
	if s.cfg.UIDBase >= 0 && rec.UID > 0 {
		return rec.UID, rec.UID
	}
	return s.cfg.UID, s.cfg.GID
}

// lockVat returns vat id with its op lock held (the caller unlocks), making
// it first when create is set. It retries when the vat it locked was removed
// meanwhile, so an operation never acts on a vat that is no longer listed.
func (s *Supervisor) lockVat(id string, create bool) (*vat, error) {
	for {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return nil, ErrShutdown
		}
		v, ok := s.vats[id]
		if !ok {
			if !create {
				s.mu.Unlock()
				return nil, fmt.Errorf("%w: %q", ErrNoVat, id)
			}
			v = &vat{id: id, logs: newRing(s.cfg.LogBytes), word: words.Starting}
			s.vats[id] = v
		}
		s.mu.Unlock()
		v.op.Lock()
		s.mu.Lock()
		cur := s.vats[id]
		s.mu.Unlock()
		if cur == v {
			return v, nil
		}
		v.op.Unlock()
	}
}

func (s *Supervisor) forget(v *vat) {
	s.mu.Lock()
	if s.vats[v.id] == v {
		delete(s.vats, v.id)
	}
	s.mu.Unlock()
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

// Restart stops vat id and starts it again on the same code, clearing its
// crash count. It revives a vat that is off.
func (s *Supervisor) Restart(id string) (Status, error) {
	v, err := s.lockVat(id, false)
	if err != nil {
		return Status{}, err
	}
	defer v.op.Unlock()
	v.mu.Lock()
	in, loaded := v.run, v.code.Manifest != nil
	if in != nil {
		in.markStopping(words.Stopping)
	}
	v.mu.Unlock()
	if in != nil {
		in.stopAndWait()
	}
	if !loaded {
		v.mu.Lock()
		damaged := v.damaged
		v.mu.Unlock()
		if damaged != "" {
			return s.status(v), fmt.Errorf("%w: vat %s: %s", ErrBadInput, id, damaged)
		}
		return s.status(v), fmt.Errorf("%w: vat %s has no loadable code", ErrBadInput, id)
	}
	v.mu.Lock()
	v.restarts, v.lastError, v.word = 0, "", words.Starting
	v.mu.Unlock()
	in = s.launch(v)
	v.mu.Lock()
	v.run = in
	v.mu.Unlock()
	_ = in.waitReady()
	return s.status(v), nil
}

// Remove stops vat id and deletes its record; with purge, its data too.
func (s *Supervisor) Remove(id string, purge bool) error {
	v, err := s.lockVat(id, false)
	if err != nil {
		return err
	}
	defer v.op.Unlock()
	// The owner's choice to run this vat without a wall goes with it: code
	// installed later under the same id is walled unless chosen again.
	// Cleared first: a failure to clear it stops nothing. (Should removing
	// the record fail after it, the vat stays installed, walled.)
	if err := s.cfg.Switches.SetChoice(id, true); err != nil && !errors.Is(err, switches.ErrNoStateDir) {
		return fmt.Errorf("clearing the wall choice of %s: %w", id, err)
	}
	// Visitors meanwhile are told it is being removed, not that it runs.
	v.mu.Lock()
	in := v.run
	v.run = nil
	if in != nil {
		in.markStopping(words.OffRemoved)
	}
	v.mu.Unlock()
	if in != nil {
		in.stopAndWait()
	}
	v.setWord(words.OffRemoved)
	// Its tokens go before its record: a vat installed later under the
	// same id opens to none of them. Should they stay, so does the record
	// (off), and a second DELETE tries again.
	if err := s.tokens.Forget(id); err != nil {
		return err
	}
	s.closeBridge(v)
	if err := s.cfg.Store.DeleteRecord(id); err != nil {
		return fmt.Errorf("removing the record of %s: %w", id, err)
	}
	// Its folders are dealt with before the id is free again (an install
	// under the same id waits for this vat's op lock until forget).
	var ferr error
	if purge {
		// Its file system first (unmounted, its image removed): then the
		// folder it was mounted on goes with the rest.
		if err := s.cfg.Disks.Remove(id, s.cfg.Store.DataDir(id)); err != nil {
			ferr = fmt.Errorf("removing the disk of %s: %w", id, err)
		} else if err := s.cfg.Store.Purge(id); err != nil {
			ferr = fmt.Errorf("purging the data of %s: %w", id, err)
		}
	} else {
		if err := s.cfg.Store.Retire(id); err != nil {
			// Its uid may go to the next vat: that vat must not own this data.
			ferr = fmt.Errorf("keeping the data of %s: %w", id, err)
		}
		// Kept in its image, which comes back with an install of the id.
		if err := s.cfg.Disks.Unmount(s.cfg.Store.DataDir(id)); err != nil {
			ferr = errors.Join(ferr, fmt.Errorf("unmounting the data of %s: %w", id, err))
		}
	}
	s.forget(v)
	// Its record is gone, so is its code whatever became of its folders.
	s.pruneCode()
	if ferr != nil {
		return ferr
	}
	s.log.Info("vat removed", keyVat, id, "purged", purge)
	return nil
}

// SetLimits records the owner's limits for vat id (within the operator's)
// and restarts it under them.
func (s *Supervisor) SetLimits(id string, l store.Limits) (Status, error) {
	if err := s.checkLimits(l); err != nil {
		return Status{}, err
	}
	v, err := s.lockVat(id, false)
	if err != nil {
		return Status{}, err
	}
	v.mu.Lock()
	rec := v.rec
	v.mu.Unlock()
	if rec.ID == "" {
		v.op.Unlock()
		return Status{}, fmt.Errorf("%w: %q", ErrNoVat, id)
	}
	rec.Limits = l
	err = s.cfg.Store.SaveRecord(rec)
	if err == nil {
		v.mu.Lock()
		v.rec.Limits = l
		v.mu.Unlock()
	}
	v.op.Unlock()
	if err != nil {
		return Status{}, fmt.Errorf("saving the vat record: %w", err)
	}
	s.log.Info("owner's limits", keyVat, id, "memory_mib", l.MemoryMiB, "cpus", l.CPUs, "disk_mib", l.DiskMiB)
	return s.Restart(id)
}

// SetWalled records the owner's choice for vat id and restarts it.
func (s *Supervisor) SetWalled(id string, walled bool) (Status, error) {
	if !labels.ValidVatID(id) {
		return Status{}, fmt.Errorf("%w: vat id %q is not valid", ErrBadInput, id)
	}
	// Only for an installed vat, and under its lock, so a choice is never
	// stored ahead for an id whose code is not chosen yet, nor left behind
	// by a removal running at the same time.
	v, err := s.lockVat(id, false)
	if err != nil {
		return Status{}, err
	}
	err = s.cfg.Switches.SetChoice(id, walled)
	v.op.Unlock()
	if err != nil {
		return Status{}, err
	}
	s.log.Info("owner's wall choice", keyVat, id, "walled", walled)
	return s.Restart(id)
}

// serving returns the running instance of vat id, or why there is none.
func (s *Supervisor) serving(id string) (*instance, words.Word, bool) {
	v, ok := s.get(id)
	if !ok {
		return nil, words.Unknown, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.run == nil || !v.word.Routed() {
		return nil, v.word, true
	}
	return v.run, v.word, true
}

var errStopped = errors.New("stopped")

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

func droppedText(ds []grant.Dropped) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.String())
	}
	return out
}
