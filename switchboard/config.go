package switchboard

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"toybox/labels"
)

// LoopbackCheckFunc judges a connection a local handle would make to an
// address of this host (loopback, or one of the host's own addresses),
// before it is dialled: typically, whether the listener on addr belongs to
// someone the handle's labels (h.Vat) may reach. It returns whether to allow
// and, when refusing, why.
type LoopbackCheckFunc func(ctx context.Context, addr netip.AddrPort, h labels.Set) (allow bool, reason string)

// Config configures a Server. The zero value is usable: system resolver,
// system roots, default limits, logs discarded, loopback not further judged.
type Config struct {
	// Logger receives one record per decision. If nil, logs are discarded.
	Logger *slog.Logger

	// Resolver is the host:port of the DNS server to ask (UDP, then TCP).
	// If empty, the system's resolver configuration is used.
	Resolver string

	// Deny lists prefixes that are never reachable, on any handle. An
	// IPv4-mapped prefix (::ffff:10.20.0.0/112) is taken as the IPv4
	// prefix it maps (10.20.0.0/16); one shorter than /96 is an error.
	Deny []netip.Prefix
	// DenyNames lists host names no handle may ask for, with every name
	// below them: a filter on the name asked for, judged before any
	// lookup. The CNAMEs of an answer are not judged by name, and any other
	// name may answer the same addresses: Deny is what keeps addresses out.
	DenyNames []string
	// PublicNames lists this host's own public names: never reachable.
	// The addresses they resolve to (re-resolved every 15s) are added to
	// the host's own addresses.
	PublicNames []string
	// OwnAddrs lists this host's addresses (never public; a connection to
	// one is judged like loopback). If nil, the addresses of every
	// interface are read when the Server is created and every 15s after.
	OwnAddrs []netip.Addr

	// RootCAs holds extra PEM certificates trusted for https requests, in
	// addition to the system roots. If empty, only the system roots.
	RootCAs []byte

	// LoopbackCheck is called for every address of this host a local
	// handle would dial, before dialling. If nil, such addresses are
	// allowed on local handles (the listener-owner check is a later layer;
	// the public network never reaches them in any case).
	LoopbackCheck LoopbackCheckFunc

	// Limits bounds what one peer connection may hold or queue.
	Limits Limits

	// DialTimeout bounds one TCP dial. If zero, 10s.
	DialTimeout time.Duration
	// ResolveTimeout bounds one name lookup. If zero, 5s.
	ResolveTimeout time.Duration
	// ResponderTimeout bounds how long a request() waits for the caller's
	// responder to take its answer's start or its failure. If zero, 30s.
	ResponderTimeout time.Duration
}

// Limits bounds one peer connection. A zero field takes its default.
type Limits struct {
	// Calls is how many calls one connection may have outstanding (queued
	// or running, on every object it holds). If zero, 256.
	Calls int `json:"calls,omitempty"`
	// Bytes is how many bytes of call arguments one connection may have
	// outstanding (queued stream writes included): a writer's flow window
	// must stay below it. If zero, 16 MiB.
	Bytes int64 `json:"bytes,omitempty"`
	// Conns is how many connections (handed-over sockets, streams, HTTP
	// requests in flight, WebSockets) one peer connection may hold open.
	// One held open with a reader that stopped costs the switchboard ~90
	// KiB and the kernel ~120 KiB of receive queue. One that handed back
	// a stream (upstream, a request's body) counts until the peer
	// releases it too. If zero, 4096.
	Conns int `json:"conns,omitempty"`
	// TotalConns is how many connections all peer connections together may
	// hold open: what bounds the switchboard's memory (and the host's TCP
	// memory) whatever the number of vats. If zero, 16384.
	TotalConns int `json:"totalConns,omitempty"`
	// Handles is how many live handles (made by constrain) one connection
	// may hold (~7 KiB and a goroutine each). If zero, 8192.
	Handles int `json:"handles,omitempty"`
	// Window is the flow-control window of each stream the switchboard
	// writes to. If zero, 1 MiB. It is at least twice the 64 KiB chunk.
	Window int64 `json:"window,omitempty"`
	// ConnWindow bounds the bytes in flight on all the streams of one
	// connection together: what a peer that stops reading can leave
	// queued. A stream whose reader stopped holds only its own Window of
	// it. If zero, 8 × Window; at least Window.
	ConnWindow int64 `json:"connWindow,omitempty"`
}

func (l Limits) withDefaults() Limits {
	if l.Calls <= 0 {
		l.Calls = 256
	}
	if l.Bytes <= 0 {
		l.Bytes = 16 << 20
	}
	if l.Conns <= 0 {
		l.Conns = 4096
	}
	if l.TotalConns <= 0 {
		l.TotalConns = 16384
	}
	if l.Handles <= 0 {
		l.Handles = 8192
	}
	if l.Window <= 0 {
		l.Window = 1 << 20
	}
	if l.Window < 2*chunkSize {
		l.Window = 2 * chunkSize
	}
	if l.ConnWindow <= 0 {
		l.ConnWindow = 8 * l.Window
	}
	if l.ConnWindow < l.Window {
		l.ConnWindow = l.Window
	}
	return l
}

// File is the switchboard's JSON configuration file (see
// docs/switchboard.md). Unknown keys are an error.
type File struct {
	// Sockets holds the labels of each socket's root handle, by socket
	// name ("public" or "local"). network comes from the name.
	Sockets map[string]json.RawMessage `json:"sockets,omitempty"`
	// Deny lists CIDRs and addresses never reachable, and host names no
	// handle may ask for (see Config.DenyNames).
	Deny []string `json:"deny,omitempty"`
	// PublicNames lists this host's own public names.
	PublicNames []string `json:"publicNames,omitempty"`
	// Resolver is host:port of the DNS server.
	Resolver string `json:"resolver,omitempty"`
	// RootCAs is a path to a PEM file of extra trusted roots.
	RootCAs string `json:"rootCAs,omitempty"`
	// Limits bounds each peer connection.
	Limits Limits `json:"limits,omitempty"`
	// Threads is how many threads run the switchboard's Go code at once
	// (GOMAXPROCS). If zero: $GOMAXPROCS when set, else 1 (see
	// DefaultThreads).
	Threads int `json:"threads,omitempty"`
	// Owner configures the listener-owner check (package
	// switchboard/owner) that judges every address of this host a local
	// handle would dial. If absent, no such check runs: a local handle
	// reaches every loopback listener its labels admit.
	Owner *OwnerFile `json:"owner,omitempty"`

	roots map[string]labels.Set
}

// DefaultThreads is the switchboard's GOMAXPROCS unless the config or the
// environment says otherwise. Its work per call is small and latency-bound
// (decide, dial, hand a socket over); on one thread a goroutine that
// readies another does not wake a second thread to run it, which on a
// small host cut the median connect by about a tenth (docs/benchmarks.md),
// at the price of throughput under many simultaneous callers (8 callers:
// ~3,500 connects/s against ~4,000 on two threads). A host where many vats
// connect at once, or make TLS requests through request() or webSocket(),
// can raise it.
const DefaultThreads = 1

// ThreadsFor returns the GOMAXPROCS the switchboard should run with: the
// file's threads, else $GOMAXPROCS (getenv), else DefaultThreads; 0 means
// leave the runtime's own setting.
func (f *File) ThreadsFor(getenv func(string) string) int {
	if f != nil && f.Threads > 0 {
		return f.Threads
	}
	if getenv("GOMAXPROCS") != "" {
		return 0
	}
	return DefaultThreads
}

// OwnerFile is the "owner" section of the configuration file; cmd/switchboard
// turns it into an owner.Config.
type OwnerFile struct {
	// ToyboxUID is the uid the supervisor and the walls run as.
	ToyboxUID int `json:"toyboxUID"`
	// OwnRoots are toybox's installation and state directories (absolute).
	OwnRoots []string `json:"ownRoots"`
	// StateDir is the supervisor's state directory: the installed vats are
	// read from <stateDir>/vats. If empty, no vat is installed.
	StateDir string `json:"stateDir,omitempty"`
	// DockerHost is the Docker Engine address; "" is docker's default.
	DockerHost string `json:"dockerHost,omitempty"`
	// Exceptions are compose projects every vat may reach.
	Exceptions []string `json:"exceptions,omitempty"`
	// CacheTTL is how long a decision is reused (Go duration text); "" is
	// the owner package's default.
	CacheTTL string `json:"cacheTTL,omitempty"`
}

// ParseFile reads a configuration file's contents strictly: unknown keys,
// trailing data, bad CIDRs or names, and socket labels that are invalid or
// contradict the socket's name are errors wrapping ErrConfig.
func ParseFile(data []byte) (*File, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrConfig)
	}
	f.roots = map[string]labels.Set{}
	for name, raw := range f.Sockets {
		if name != labels.NetworkPublic && name != labels.NetworkLocal {
			return nil, fmt.Errorf("%w: socket %q: name must be public or local", ErrConfig, name)
		}
		s, err := labels.ParseSet(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: socket %q: %w", ErrConfig, name, err)
		}
		if s.Network != "" && s.Network != name {
			return nil, fmt.Errorf("%w: socket %q: network %q contradicts the socket's name", ErrConfig, name, s.Network)
		}
		if s.Vat != "" {
			return nil, fmt.Errorf("%w: socket %q: vat is set by the supervisor, never in config", ErrConfig, name)
		}
		s.Network = name
		f.roots[name] = s
	}
	if _, _, err := f.deny(); err != nil {
		return nil, err
	}
	for _, n := range f.PublicNames {
		if _, err := labels.CanonicalHost(n); err != nil {
			return nil, fmt.Errorf("%w: publicNames: %w", ErrConfig, err)
		}
	}
	if f.Resolver != "" {
		if _, err := netip.ParseAddrPort(f.Resolver); err != nil {
			return nil, fmt.Errorf("%w: resolver %q must be ip:port: %w", ErrConfig, f.Resolver, err)
		}
	}
	if o := f.Owner; o != nil {
		if o.ToyboxUID < 0 {
			return nil, fmt.Errorf("%w: owner.toyboxUID must not be negative", ErrConfig)
		}
		if len(o.OwnRoots) == 0 {
			return nil, fmt.Errorf("%w: owner.ownRoots must name toybox's installation and state directories", ErrConfig)
		}
		if o.CacheTTL != "" {
			if _, err := time.ParseDuration(o.CacheTTL); err != nil {
				return nil, fmt.Errorf("%w: owner.cacheTTL: %w", ErrConfig, err)
			}
		}
	}
	if f.Threads < 0 || f.Threads > 1024 {
		return nil, fmt.Errorf("%w: threads %d: want 1 to 1024 (0: the default)", ErrConfig, f.Threads)
	}
	if f.Limits.Calls < 0 || f.Limits.Bytes < 0 || f.Limits.Conns < 0 || f.Limits.TotalConns < 0 || f.Limits.Handles < 0 || f.Limits.Window < 0 || f.Limits.ConnWindow < 0 {
		return nil, fmt.Errorf("%w: limits must not be negative", ErrConfig)
	}
	return &f, nil
}

// Root returns the labels of the root handle of the socket called name
// ("public" or "local"): those in the file, with network set to name.
func (f *File) Root(name string) (labels.Set, error) {
	if name != labels.NetworkPublic && name != labels.NetworkLocal {
		return labels.Set{}, fmt.Errorf("%w: socket name %q must be public or local", ErrConfig, name)
	}
	if f != nil {
		if s, ok := f.roots[name]; ok {
			return s, nil
		}
	}
	return labels.Set{Network: name}, nil
}

func (f *File) deny() ([]netip.Prefix, []string, error) {
	var prefixes []netip.Prefix
	var names []string
	for _, d := range f.Deny {
		switch {
		case strings.Contains(d, "/"):
			p, err := netip.ParsePrefix(d)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: deny %q: %w", ErrConfig, d, err)
			}
			if p, err = unmapPrefix(p); err != nil {
				return nil, nil, fmt.Errorf("%w: deny %q: %w", ErrConfig, d, err)
			}
			prefixes = append(prefixes, p)
		default:
			if a, err := netip.ParseAddr(d); err == nil {
				prefixes = append(prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				continue
			}
			n, err := labels.CanonicalHost(d)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: deny: %w", ErrConfig, err)
			}
			names = append(names, n)
		}
	}
	return prefixes, names, nil
}

// unmapPrefix returns p masked, and an IPv4-mapped prefix
// (::ffff:10.20.0.0/112) as the IPv4 prefix it maps (10.20.0.0/16): every
// address is unmapped before it is matched, so a mapped prefix as written
// would match nothing. A mapped prefix shorter than /96 reaches outside the
// mapped space and is an error.
func unmapPrefix(p netip.Prefix) (netip.Prefix, error) {
	if !p.Addr().Is4In6() {
		return p.Masked(), nil
	}
	if p.Bits() < 96 {
		return netip.Prefix{}, fmt.Errorf("an IPv4-mapped prefix must be /96 or longer (::ffff:a.b.c.d/96+n is the IPv4 prefix a.b.c.d/n)")
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked(), nil
}

// Config returns the Server configuration the file describes. rootCAs is
// the content of the file named by RootCAs (the caller reads it).
func (f *File) Config(logger *slog.Logger, rootCAs []byte) (Config, error) {
	prefixes, names, err := f.deny()
	if err != nil {
		return Config{}, err
	}
	pn := make([]string, 0, len(f.PublicNames))
	for _, n := range f.PublicNames {
		c, _ := labels.CanonicalHost(n)
		pn = append(pn, c)
	}
	if len(rootCAs) > 0 {
		if ok := x509.NewCertPool().AppendCertsFromPEM(rootCAs); !ok {
			return Config{}, fmt.Errorf("%w: rootCAs holds no PEM certificate", ErrConfig)
		}
	}
	return Config{
		Logger:      logger,
		Resolver:    f.Resolver,
		Deny:        prefixes,
		DenyNames:   names,
		PublicNames: pn,
		RootCAs:     rootCAs,
		Limits:      f.Limits,
	}, nil
}
