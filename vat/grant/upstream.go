// Package grant serves a vat's authority as capabilities.
//
// It serves a vat's authority: the Vat bootstrap a vat finds on fd 3, its
// egress Handle (the supervisor's one switchboard handle, constrained to the
// vat's grant and relayed, with connected sockets passed straight through),
// and its doors. Revoking a Vat stops every capability it handed out.
package grant

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"time"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/rpc"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
)

// UpstreamConfig configures the supervisor's connection to its switchboard.
type UpstreamConfig struct {
	// Path is the switchboard socket the supervisor holds. Whatever that
	// socket's labels allow is the most any vat can get.
	Path string
	// DialTimeout bounds one dial. If zero, 5s.
	DialTimeout time.Duration
	// Logger receives connection events. If nil, discarded.
	Logger *slog.Logger
}

// Upstream is a switchboard connection of the supervisor's (each vat's
// relay has one of its own, made by forVat). It dials lazily and dials
// again when the switchboard restarts; each dial is a new generation, and
// handles constrained on an older one are made again.
type Upstream struct {
	cfg UpstreamConfig
	log *slog.Logger

	mu     sync.Mutex
	gen    uint64
	conn   *wire.Conn
	rpc    *rpc.Conn
	root   schema.Handle
	closed bool
}

// forVat returns a new Upstream to the same switchboard for vat id: its
// own connection, dialled lazily like u's.
func (u *Upstream) forVat(id labels.VatID) *Upstream {
	cfg := u.cfg
	cfg.Logger = u.log.With("vat", id)
	return NewUpstream(cfg)
}

// NewUpstream returns an Upstream for cfg. Nothing is dialled yet.
func NewUpstream(cfg UpstreamConfig) *Upstream {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Upstream{cfg: cfg, log: log}
}

// session is one generation of the upstream connection.
type session struct {
	gen  uint64
	conn *wire.Conn
	root schema.Handle // borrowed from Upstream; valid while gen is current
}

// current returns the live session, dialling if there is none or the last
// one ended.
func (u *Upstream) current(ctx context.Context) (session, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return session{}, ErrClosed
	}
	if u.rpc != nil {
		select {
		case <-u.rpc.Done():
			u.dropLocked()
		default:
			return session{u.gen, u.conn, u.root}, nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, u.cfg.DialTimeout)
	defer cancel()
	c, err := wire.Dial(dctx, u.cfg.Path, true)
	if err != nil {
		return session{}, fmt.Errorf("reaching the switchboard at %s: %w", u.cfg.Path, err)
	}
	// Its peer is the switchboard: no backlog bound (its writes to one
	// slow stream must not stop the vat's others).
	rc := c.RPCWith(capnp.Client{}, wire.Logger(u.log), wire.Limits{Backlog: math.MaxInt})
	root := schema.Handle(rc.Bootstrap(dctx))
	if err := root.Resolve(dctx); err != nil {
		root.Release()
		_ = rc.Close()
		return session{}, fmt.Errorf("bootstrapping the switchboard at %s: %w", u.cfg.Path, err)
	}
	u.gen++
	u.conn, u.rpc, u.root = c, rc, root
	u.log.Info("switchboard connected", "path", u.cfg.Path, "generation", u.gen)
	return session{u.gen, u.conn, u.root}, nil
}

// broken marks generation gen as ended (a call saw a disconnect).
func (u *Upstream) broken(gen uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gen == gen && u.rpc != nil {
		u.dropLocked()
	}
}

func (u *Upstream) dropLocked() {
	u.root.Release()
	_ = u.rpc.Close()
	if u.closed {
		// Closed on purpose (the vat stopped): nothing to warn about.
		u.log.Debug("switchboard connection closed", "path", u.cfg.Path, "generation", u.gen)
	} else {
		u.log.Warn("switchboard connection ended", "path", u.cfg.Path, "generation", u.gen)
	}
	u.rpc, u.conn, u.root = nil, nil, schema.Handle{}
}

// Close ends the connection. Handles relayed through it stop working.
func (u *Upstream) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	if u.rpc != nil {
		u.dropLocked()
	}
	return nil
}
