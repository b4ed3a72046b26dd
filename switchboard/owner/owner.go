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
	// compose project must name one of them (see StateVats, DirVats). Called once per
	// uncached decision that meets a root-owned socket. If nil, no vat is
	// installed: only Exceptions can be reached in a container.
	InstalledVats func() []string

	// Exceptions are compose project names the operator lists as reachable
	// by every vat. If empty, none.
	Exceptions []string

	// CacheTTL is how long a decision for (address, vat, owner-typed) is
	// reused. At most MaxCacheTTL. If zero, 1s. If negative, decisions are
	// never cached.
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
type Checker struct {
	cfg    Config
	roots  []string
	docker *client.Client
	log    *slog.Logger
	ttl    time.Duration

	mu    sync.Mutex
	cache map[cacheKey]cacheEntry
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
	return &Checker{cfg: cfg, roots: roots, docker: dc, log: log, ttl: ttl, cache: make(map[cacheKey]cacheEntry)}, nil
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
// cache TTL. Every error is a refusal.
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
	d := Judge(c.facts(ctx, addr, vat, ownerTyped))
	c.log.LogAttrs(ctx, slog.LevelDebug, "listener-owner check",
		slog.String(keyTarget, addr.String()), slog.String(keyVat, vat),
		slog.Bool(keyTyped, ownerTyped), slog.Bool(keyAllow, d.Allow), slog.String(keyReason, d.Reason))
	if c.ttl > 0 {
		c.mu.Lock()
		for k, e := range c.cache {
			if now.Sub(e.at) >= c.ttl {
				delete(c.cache, k)
			}
		}
		c.cache[key] = cacheEntry{d: d, at: now}
		c.mu.Unlock()
	}
	return d
}

// facts gathers what Judge needs from /proc and Docker.
func (c *Checker) facts(ctx context.Context, addr netip.AddrPort, vat string, ownerTyped bool) Facts {
	f := Facts{
		Target: addr, Vat: vat, OwnerTyped: ownerTyped,
		ToyboxUID: c.cfg.ToyboxUID, OwnRoots: c.roots, Exceptions: c.cfg.Exceptions,
	}
	if !addr.Addr().Unmap().IsLoopback() {
		own, err := hostAddr(addr.Addr())
		if err != nil {
			f.ProcErr = err
			return f
		}
		if f.OwnAddr = own; !own {
			return f // Judge refuses it
		}
	}
	all, err := readListeners()
	if err != nil {
		f.ProcErr = err
		return f
	}
	f.Listeners = Answering(all, addr)
	if len(f.Listeners) == 0 {
		return f
	}
	inodes := make(map[uint64]bool)
	root := false
	for _, l := range f.Listeners {
		inodes[l.Inode] = true
		root = root || l.UID == 0
	}
	f.Holders, f.Hidden, err = scanHolders(inodes)
	if err != nil {
		f.ProcErr = err
		return f
	}
	if root {
		if c.cfg.InstalledVats != nil {
			f.InstalledVats = c.cfg.InstalledVats()
		}
		f.Containers, f.DockerErr = runningContainers(ctx, c.docker)
	}
	return f
}
