package owner

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/docker/docker/client"

	"toybox/labels"
)

// MaxCacheTTL is the longest a decision may be reused: a port that changes
// hands is caught within this window.
const MaxCacheTTL = 2 * time.Second

// maxCacheEntries bounds the decision cache: past it, decisions are not
// kept until expired ones are removed.
const maxCacheEntries = 1 << 14

// Log attribute keys.
const (
	keyTarget = "target"
	keyVat    = "vat"
	keyTyped  = "owner_typed"
	keyAllow  = "allow"
	keyReason = "reason"
)

// Config configures a Checker.
type Config struct {
	// ToyboxUID is the uid the supervisor, the switchboard's peers and the
	// vat walls run as. A listening socket of this uid is mapped to the
	// processes holding it. Must not be negative. If 0 (toybox running as
	// root, e.g. `make dev` as root), a root-owned socket is judged only as
	// a container port, so no process listener is ever a vat's own service.
	ToyboxUID int

	// OwnRoots are toybox's installation and state directories (for
	// example /usr/local/lib/toybox, /var/lib/toybox): a process whose
	// executable, working directory or an argv element lies under one is
	// never a vat's own service. Each must be absolute; New also adds each
	// one's symlink-resolved form. Required (New refuses an empty list)
	// unless ToyboxUID is 0, where no process is ever a vat's service.
	OwnRoots []string

	// DockerHost is the Docker Engine address, e.g.
	// "unix:///run/docker.sock". If "", the docker client's default
	// (unix:///var/run/docker.sock); the environment is never read.
	DockerHost string

	// InstalledVats returns the ids of the installed vats; a container's
	// compose project must name one of them (see StateVats, DirVats). Called
	// with each question to Docker (at most one per SnapshotWindow), when an
	// uncached decision meets a root-owned socket. If nil, no vat is
	// installed: only Exceptions can be reached in a container.
	InstalledVats func() []string

	// Exceptions are compose project names the operator lists as reachable
	// by every vat. If empty, none.
	Exceptions []string

	// CacheTTL is how long a decision for (address, vat, owner-typed) is
	// reused, counted from the look at the host it rests on. At most
	// MaxCacheTTL. If zero, 1s. If negative, decisions are never cached, and
	// no look at the host begun before a check was asked is used for it
	// (concurrent checks still share the looks begun after).
	CacheTTL time.Duration

	// Logger receives one debug record per uncached decision. If nil,
	// nothing is logged.
	Logger *slog.Logger
}

type cacheKey struct {
	addr  netip.AddrPort
	vat   string
	typed bool
}

type cacheEntry struct {
	d  Decision
	at time.Time
}

// Checker judges loopback targets. It is safe for concurrent use.
//
// Uncached decisions share their looks at the host: the listening sockets,
// the processes holding them and the running containers are each gathered
// once for every check asked within the window (SnapshotWindow, or the
// cache TTL if shorter) and by one build at a time, so a burst of checks of
// new addresses costs about one look, not one each. A port that changes
// hands within the window may be judged on the look before: the same
// trade-off as the decision cache, and within its TTL.
type Checker struct {
	cfg    Config
	roots  []string
	docker *client.Client
	log    *slog.Logger
	ttl    time.Duration
	window time.Duration // how long a look at the host is shared

	table      shared[tableSnap]  // the listening sockets
	scan       shared[scanSnap]   // the listening sockets and their holders
	containers shared[dockerSnap] // the running containers, the installed vats
	diagWarn   sync.Once

	mu    sync.Mutex
	cache map[cacheKey]cacheEntry
	swept time.Time // when expired entries were last removed
}

// tableSnap is one read of the listening sockets.
type tableSnap struct {
	listeners []Listener
	err       error
}

// scanSnap is one read of the listening sockets and, for each, the
// processes holding it (every process's descriptors read once).
type scanSnap struct {
	listeners []Listener
	holders   map[uint64][]Proc
	hidden    map[int]int
	err       error
}

// dockerSnap is one question to Docker, with the installed vats.
type dockerSnap struct {
	vats       []string
	containers []Container
	err        error
}

// New returns a Checker for cfg. The caller must Close it. It refuses a
// config it cannot honour (ErrConfig) and, off Linux, returns ErrUnsupported.
func New(cfg Config) (*Checker, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	if cfg.ToyboxUID < 0 {
		return nil, fmt.Errorf("%w: toybox uid %d is negative", ErrConfig, cfg.ToyboxUID)
	}
	ttl := cfg.CacheTTL
	switch {
	case ttl == 0:
		ttl = time.Second
	case ttl > MaxCacheTTL:
		return nil, fmt.Errorf("%w: cache ttl %v exceeds %v", ErrConfig, ttl, MaxCacheTTL)
	}
	if cfg.ToyboxUID != 0 && len(cfg.OwnRoots) == 0 {
		return nil, fmt.Errorf("%w: no own roots: toybox's own installation and state dirs must be named, or their processes could pass as a vat's service", ErrConfig)
	}
	var roots []string
	for _, r := range cfg.OwnRoots {
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("%w: own root %q is not absolute", ErrConfig, r)
		}
		r = filepath.Clean(r)
		roots = append(roots, r)
		if real, err := filepath.EvalSymlinks(r); err == nil && real != r {
			roots = append(roots, real)
		}
	}
	dc, err := newDockerClient(cfg.DockerHost)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Checker{cfg: cfg, roots: roots, docker: dc, log: log, ttl: ttl, window: min(SnapshotWindow, max(ttl, 0)), cache: make(map[cacheKey]cacheEntry)}
	c.table.build = c.readTable
	c.scan.build = c.readScan
	c.containers.build = c.askDocker
	return c, nil
}

// readTable reads the listening sockets.
func (c *Checker) readTable() tableSnap {
	ls, diagErr, err := readListeners()
	if diagErr != nil {
		c.diagWarn.Do(func() {
			c.log.Warn("listener-owner check: netlink sock_diag refused, reading /proc/net/tcp instead (slower on a busy host)", slog.String("error", diagErr.Error()))
		})
	}
	return tableSnap{listeners: ls, err: err}
}

// readScan reads the listening sockets, then every process's descriptors
// for the processes holding them.
func (c *Checker) readScan() scanSnap {
	t := c.readTable()
	if t.err != nil {
		return scanSnap{err: t.err}
	}
	inodes := make(map[uint64]bool, len(t.listeners))
	for _, l := range t.listeners {
		inodes[l.Inode] = true
	}
	holders, hidden, err := scanHolders(inodes)
	return scanSnap{listeners: t.listeners, holders: holders, hidden: hidden, err: err}
}

// askDocker lists the installed vats and the running containers.
func (c *Checker) askDocker() dockerSnap {
	var d dockerSnap
	if c.cfg.InstalledVats != nil {
		d.vats = c.cfg.InstalledVats()
	}
	d.containers, d.err = runningContainers(context.Background(), c.docker)
	return d
}

// Close releases the Docker client.
func (c *Checker) Close() error { return c.docker.Close() }

// hostAddr reports whether a is an address of one of this host's interfaces.
func hostAddr(a netip.Addr) (bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false, fmt.Errorf("listing this host's addresses: %w", err)
	}
	a = a.Unmap()
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a && !a.IsUnspecified() {
				return true, nil
			}
		}
	}
	return false, nil
}

// LoopbackFunc adapts the checker to the switchboard's LoopbackCheck hook
// (switchboard.Config.LoopbackCheck): the vat is the handle's vat label,
// and ownerTyped(h) says whether the handle's address is one the owner typed.
// A nil ownerTyped means never: every handle is judged as a manifest default,
// so it may reach its own containers but no process of the toybox user.
func (c *Checker) LoopbackFunc(ownerTyped func(h labels.Set) bool) func(ctx context.Context, addr netip.AddrPort, h labels.Set) (bool, string) {
	return func(ctx context.Context, addr netip.AddrPort, h labels.Set) (bool, string) {
		typed := ownerTyped != nil && ownerTyped(h)
		d := c.Check(ctx, addr, h.Vat, typed)
		return d.Allow, d.Reason
	}
}

// Check decides whether the vat (its id; "" for a handle of no vat) may
// connect to addr — a loopback address, or one of this host's own addresses
// (anything else is refused) — which the owner typed (ownerTyped) or
// which comes from a manifest default. A decision is reused for at most the
// cache TTL, counted from the oldest look at the host it rests on; an
// uncached decision rests on looks begun at most the snapshot window before
// it was asked (see Checker). Every error is a refusal.
func (c *Checker) Check(ctx context.Context, addr netip.AddrPort, vat string, ownerTyped bool) Decision {
	key := cacheKey{addr, vat, ownerTyped}
	now := time.Now()
	if c.ttl > 0 {
		c.mu.Lock()
		e, ok := c.cache[key]
		c.mu.Unlock()
		if ok && now.Sub(e.at) < c.ttl {
			return e.d
		}
	}
	f, asOf := c.facts(ctx, addr, vat, ownerTyped, now)
	d := Judge(f)
	c.log.LogAttrs(ctx, slog.LevelDebug, "listener-owner check",
		slog.String(keyTarget, addr.String()), slog.String(keyVat, vat),
		slog.Bool(keyTyped, ownerTyped), slog.Bool(keyAllow, d.Allow), slog.String(keyReason, d.Reason))
	// A refusal because this caller gave up says nothing of the port.
	if c.ttl > 0 && ctx.Err() == nil {
		c.mu.Lock()
		// Expired entries go once per TTL (not on every insert: a burst of
		// new addresses would make each insert walk them all), and a full
		// cache takes no more until then.
		if now.Sub(c.swept) >= c.ttl {
			for k, e := range c.cache {
				if now.Sub(e.at) >= c.ttl {
					delete(c.cache, k)
				}
			}
			c.swept = now
		}
		if len(c.cache) < maxCacheEntries {
			c.cache[key] = cacheEntry{d: d, at: asOf}
		}
		c.mu.Unlock()
	}
	return d
}

// facts gathers what Judge needs from the shared looks at the host (/proc,
// sock_diag, Docker), and returns with them when the oldest look used began.
func (c *Checker) facts(ctx context.Context, addr netip.AddrPort, vat string, ownerTyped bool, now time.Time) (Facts, time.Time) {
	f := Facts{
		Target: addr, Vat: vat, OwnerTyped: ownerTyped,
		ToyboxUID: c.cfg.ToyboxUID, OwnRoots: c.roots, Exceptions: c.cfg.Exceptions,
	}
	asOf := now
	if !addr.Addr().Unmap().IsLoopback() {
		own, err := hostAddr(addr.Addr())
		if err != nil {
			f.ProcErr = err
			return f, asOf
		}
		if f.OwnAddr = own; !own {
			return f, asOf // Judge refuses it
		}
	}
	// The listening sockets first: most targets have none, and need no
	// look at the processes.
	t, at, err := c.table.get(ctx, now, c.window)
	if err == nil {
		err = t.err
	}
	if err != nil {
		f.ProcErr = err
		return f, asOf
	}
	asOf = at
	if len(Answering(t.listeners, addr)) == 0 {
		return f, asOf
	}
	s, at, err := c.scan.get(ctx, now, c.window)
	if err == nil {
		err = s.err
	}
	if err != nil {
		f.ProcErr = err
		return f, asOf
	}
	asOf = earlier(asOf, at)
	// The scan's own table: its holders were read for its sockets.
	f.Listeners = Answering(s.listeners, addr)
	if len(f.Listeners) == 0 {
		return f, asOf
	}
	f.Holders = make(map[uint64][]Proc)
	f.Hidden = s.hidden
	root := false
	for _, l := range f.Listeners {
		if h, ok := s.holders[l.Inode]; ok {
			f.Holders[l.Inode] = h
		}
		root = root || l.UID == 0
	}
	if root {
		d, at, err := c.containers.get(ctx, now, c.window)
		if err != nil {
			d.err = err
		}
		asOf = earlier(asOf, at)
		f.InstalledVats, f.Containers, f.DockerErr = d.vats, d.containers, d.err
	}
	return f, asOf
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
