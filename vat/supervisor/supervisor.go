// Package supervisor runs installed vats and serves the admin and public
// HTTP interfaces.
//
// It runs installed vats: it installs and upgrades code from the store,
// starts each vat inside its wall (or, only when the switches say so,
// without one), serves every vat its Vat capability on fd 3, watches it,
// restarts it with backoff, and serves the admin and public HTTP interfaces.
package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"toybox/labels"
	"toybox/vat/access"
	"toybox/vat/disk"
	"toybox/vat/doors"
	"toybox/vat/edge"
	"toybox/vat/grant"
	"toybox/vat/mcp/front"
	"toybox/vat/store"
	"toybox/vat/switches"
	"toybox/vat/tokens"
	"toybox/vat/wall"
	"toybox/vat/wall/cgroup"
	"toybox/vat/wall/seccomp"
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

// egressInForce is the egress word of a running wall: the planned one,
// except that transparent egress is only what its toybox-entry reported
// the kernel gave it (a nested seccomp notifier, for one, refuses the
// listener the plan counted on).
func egressInForce(planned words.Egress, why string, gv *grant.Vat) (words.Egress, string) {
	if planned != words.EgressTransparent {
		return planned, why
	}
	if gv == nil {
		return words.EgressPending, ""
	}
	r, ok := gv.Notifier()
	switch {
	case !ok:
		return words.EgressPending, ""
	case r.Installed:
		return words.EgressTransparent, ""
	case r.Asked && r.Why != "":
		return words.EgressProxyOnly, r.Why
	}
	return words.EgressProxyOnly, "toybox-entry got no connect() listener"
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
	// EntryPath is the toybox-entry binary handed to the wall. New opens
	// it once: every wall runs that file, even after another is renamed
	// over it. If it cannot be opened then, walled vats are refused until
	// a restart.
	EntryPath string
	// Bwrap is the bubblewrap binary handed to the wall (wall.Spec.Bwrap).
	// If empty, bwrap on $PATH.
	Bwrap string
	// DockerSockets are more Docker sockets an unwalled vat's status says
	// it reaches, when its user may connect to one, besides
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
	// NoSeccompTable reports whether this architecture has no seccomp
	// filter table. Only then does a vat run walled-noseccomp
	// (wall.Spec.NoSeccomp, which the wall refuses where a table exists).
	// A build without cgo, or a filter that cannot be built, is a
	// failure: the vat stays off and says why. If nil, the architecture
	// decides (seccomp.ArchHasTable).
	NoSeccompTable func() bool
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
	// EdgeLogger receives the MCP edge's decision records (one per call)
	// instead of Logger, so that they may be written a few at a time. If
	// nil, Logger.
	EdgeLogger *slog.Logger
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
	cfg     Config
	log     *slog.Logger
	edgeLog *slog.Logger // the MCP edge's decision records

	ctx    context.Context
	cancel context.CancelFunc

	tokens   *access.Store
	mcpRules front.Rules
	// walls is the state every wall of this supervisor shares: the /etc
	// views and which walls bind them, and the host's lookups (wall.Host).
	walls *wall.Host
	// entry is cfg.EntryPath as New opened it: every wall runs this file,
	// so an entry renamed over it (an upgrade before the restart) never
	// runs beside this supervisor. entryErr says why New could not open
	// it; walled spawns are refused with it then.
	entry    *wall.Entry
	entryErr error

	mu       sync.Mutex
	vats     map[labels.VatID]*vat
	mcpLogs  map[string]*tokens.Records // per vat id: its MCP records' rate
	stopping bool
	stopped  chan struct{} // closed when stopping is set
	// preparing counts the package installs preparing (PreparePackage):
	// Shutdown cancels them and waits for them. Added to under mu, only
	// while not stopping.
	preparing sync.WaitGroup

	installs *installQueue // the package installs preparing and waiting their turn

	sendWait time.Duration // tests: sendTimeout when not zero
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
	if cfg.NoSeccompTable == nil {
		cfg.NoSeccompTable = func() bool { return !seccomp.ArchHasTable() }
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
	var entry *wall.Entry
	var entryErr error
	if cfg.EntryPath != "" {
		if entry, entryErr = wall.OpenEntry(cfg.EntryPath); entryErr != nil {
			entryErr = fmt.Errorf("toybox-entry %s could not be opened when toybox started (fix: put it in place and restart toybox): %w", cfg.EntryPath, entryErr)
			log.Warn("walled vats cannot start", "error", entryErr.Error())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Supervisor{
		entry: entry, entryErr: entryErr,
		cfg: cfg, log: log, edgeLog: cmp.Or(cfg.EdgeLogger, log), ctx: ctx, cancel: cancel, vats: map[labels.VatID]*vat{},
		tokens: toks, mcpRules: rules, mcpLogs: map[string]*tokens.Records{},
		walls: wall.NewHost(), stopped: make(chan struct{}),
		installs: newInstallQueue(cfg.Packages.Installs, cfg.Packages.InstallQueue),
	}, nil
}

// DefaultUIDBase is the first host uid a root supervisor gives a vat.
const DefaultUIDBase = 1000000

// vat is one installed vat and its current run.
type vat struct {
	id   labels.VatID
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

func (v *vat) setWord(w words.Word) {
	v.mu.Lock()
	v.word = w
	v.mu.Unlock()
}

func (s *Supervisor) get(id labels.VatID) (*vat, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vats[id]
	return v, ok
}

// find is get for an id as text, as the public handler routes it. It needs
// no parse: the map holds only parsed ids, so text that is no vat id finds
// nothing.
func (s *Supervisor) find(id string) (*vat, bool) { return s.get(labels.VatID(id)) }

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
func (s *Supervisor) lockVat(id labels.VatID, create bool) (*vat, error) {
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
		delete(s.mcpLogs, string(v.id))
	}
	s.mu.Unlock()
}

var errStopped = errors.New("stopped")
