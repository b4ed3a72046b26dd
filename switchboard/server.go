package switchboard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/flowcontrol"

	"toybox/labels"
	"toybox/schema/wire"
	"toybox/switchboard/addrclass"
)

// chunkSize is the size of one stream write.
const chunkSize = 64 << 10

// Server is the switchboard service. It is safe for concurrent use; one
// Server may serve many sockets.
type Server struct {
	cfg      Config
	log      *slog.Logger
	classes  atomic.Pointer[addrclass.Classifier]
	stop     chan struct{} // closes the own-address refresher
	stopOnce sync.Once
	resolver *net.Resolver
	dialer   net.Dialer
	tlsConf  *tls.Config
	http     *http.Transport
	tracker  *tracker
	wsHeld   atomic.Int64 // WebSocket message bytes every peer holds (peer.holdWS)
	conns    atomic.Int64 // connections every peer holds (Limits.TotalConns)

	// classMu serialises building the classifier: the own-address
	// refresher and Reload both do. own is the host's addresses it was
	// last built with; deny and denyNames the operator's deny list.
	classMu   sync.Mutex
	own       []netip.Addr
	deny      []netip.Prefix
	denyNames []string

	// helds are every connection a handle holds (Reload judges each
	// again).
	heldMu sync.Mutex
	helds  map[*held]struct{}
}

// New returns a Server for cfg. It reads the host's interface addresses
// when cfg.OwnAddrs is nil. The caller must Close it.
func New(cfg Config) (*Server, error) {
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.ResponderTimeout == 0 {
		cfg.ResponderTimeout = 30 * time.Second
	}
	if cfg.ResolveTimeout == 0 {
		cfg.ResolveTimeout = 5 * time.Second
	}
	deny := make([]netip.Prefix, 0, len(cfg.Deny))
	for _, p := range cfg.Deny {
		u, err := unmapPrefix(p)
		if err != nil {
			return nil, fmt.Errorf("%w: Deny %s: %w", ErrConfig, p, err)
		}
		deny = append(deny, u)
	}
	cfg.Deny = deny
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	own := cfg.OwnAddrs
	if own == nil {
		var err error
		if own, err = addrclass.InterfaceAddrs(); err != nil {
			return nil, err
		}
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if len(cfg.RootCAs) > 0 && !roots.AppendCertsFromPEM(cfg.RootCAs) {
		return nil, fmt.Errorf("%w: RootCAs holds no PEM certificate", ErrConfig)
	}
	s := &Server{
		cfg:      cfg,
		log:      log,
		stop:     make(chan struct{}),
		resolver: newResolver(cfg.Resolver),
		dialer:   net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second},
		tlsConf:  &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		deny:     cfg.Deny, denyNames: cfg.DenyNames,
		helds: map[*held]struct{}{},
	}
	s.setOwn(own)
	s.http = s.newTransport()
	t, err := newTracker()
	if err != nil {
		return nil, err
	}
	s.tracker = t
	if cfg.OwnAddrs == nil || len(cfg.PublicNames) > 0 {
		st := &ownState{ifaces: own, named: map[string][]netip.Addr{}}
		// The public names are resolved before the first call is served:
		// until then this host's public address would pass for public.
		// A name that does not resolve now is said in the log and tried
		// again with every refresh.
		if len(cfg.PublicNames) > 0 {
			s.refreshOwnOnce(st, false)
		}
		go s.refreshOwn(st)
	}
	return s, nil
}

// ownRefresh is how often the host's interface addresses are read again
// when Config.OwnAddrs is nil (addresses change: DHCP, VPNs, containers).
const ownRefresh = 15 * time.Second

func (s *Server) setOwn(own []netip.Addr) {
	s.classMu.Lock()
	defer s.classMu.Unlock()
	s.own = own
	s.storeClassesLocked()
}

func (s *Server) storeClassesLocked() {
	s.classes.Store(&addrclass.Classifier{
		Deny: s.deny, DenyNames: s.denyNames, Own: s.own, PublicNames: s.cfg.PublicNames,
	})
}

func (s *Server) classify() *addrclass.Classifier { return s.classes.Load() }

// ownState is what refreshOwn knows between rounds: the last interface
// addresses read and the last answers for each public name (kept when a
// read or a lookup fails).
type ownState struct {
	ifaces []netip.Addr
	named  map[string][]netip.Addr
}

// refreshOwn keeps the host's own addresses current: the interfaces (when
// Config.OwnAddrs is nil) and the addresses this host's public names
// resolve to (a public address behind NAT reaches this host too).
func (s *Server) refreshOwn(st *ownState) {
	t := time.NewTicker(ownRefresh)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.refreshOwnOnce(st, true)
	}
}

func (s *Server) refreshOwnOnce(st *ownState, readIfaces bool) {
	own := s.cfg.OwnAddrs
	if own == nil {
		if readIfaces {
			if got, err := addrclass.InterfaceAddrs(); err == nil {
				st.ifaces = got
			} else {
				s.log.Warn("reading this host's addresses", "error", err.Error())
			}
		}
		own = st.ifaces
	}
	own = slices.Clone(own)
	for _, name := range s.cfg.PublicNames {
		addrs, err := s.lookup(context.Background(), name) // bounded by ResolveTimeout
		if err != nil {
			s.log.Warn("resolving this host's public name", "name", name, "error", err.Error())
		} else {
			st.named[name] = addrs
		}
		own = append(own, st.named[name]...)
	}
	s.setOwn(own)
}

// Close stops the Server's shutdown tracker. Connections still handed over
// stay as they are; Serve's return already revoked its own.
func (s *Server) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	s.http.CloseIdleConnections()
	return s.tracker.close()
}

// Serve accepts connections on l until ctx is done, serving each a root
// Handle with labels root (root.Network must be "public" or "local"). name
// names the socket in logs. Each connection gets its own root handle,
// bound to that connection so that connect can pass descriptors on it.
// Serve closes l when it returns; connections it accepted are closed and
// their handles revoked.
func (s *Server) Serve(ctx context.Context, name string, l *net.UnixListener, root labels.Set) error {
	c, err := labels.Canonical(root)
	if err != nil {
		_ = l.Close()
		return fmt.Errorf("%w: root labels of socket %s: %w", ErrConfig, name, err)
	}
	if c.Network != labels.NetworkPublic && c.Network != labels.NetworkLocal {
		_ = l.Close()
		return fmt.Errorf("%w: socket %s: root network must be public or local, not %q", ErrConfig, name, c.Network)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		_ = l.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accepting on socket %s: %w", name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, name, uc, c)
		}()
	}
}

// ServeConn serves one already accepted unix connection (taking ownership
// of it) until it closes or ctx is done.
func (s *Server) ServeConn(ctx context.Context, name string, uc *net.UnixConn, root labels.Set) error {
	c, err := labels.Canonical(root)
	if err != nil || (c.Network != labels.NetworkPublic && c.Network != labels.NetworkLocal) {
		_ = uc.Close()
		return fmt.Errorf("%w: root labels of socket %s must be valid with network public or local", ErrConfig, name)
	}
	s.serveConn(ctx, name, uc, c)
	return nil
}

func (s *Server) serveConn(ctx context.Context, name string, uc *net.UnixConn, root labels.Set) {
	wc := wire.NewConn(uc, false)
	p := &peer{srv: s, socket: name, wc: wc, lim: s.cfg.Limits, flow: flowcontrol.NewFixedLimiter(s.cfg.Limits.ConnWindow)}
	if pid, uid, _, err := wc.PeerCred(); err == nil {
		p.pid, p.uid = pid, uid
	} else {
		p.pid, p.uid = -1, ^uint32(0)
	}
	rootH := p.newHandle(root, nil, false)
	// limits.bytes counts the calls the peer has running; calls it
	// pipelines on a promise still pending (a stream write that never
	// returns) wait in full outside it. The transport bounds those: twice
	// limits.bytes, past which the peer's connection ends.
	conn := wc.RPCWith(capnp.Client(rootH.client()), wire.Logger(s.log), wire.Limits{CallBytes: 2 * p.lim.Bytes})
	select {
	case <-conn.Done():
	case <-ctx.Done():
	}
	_ = conn.Close()
	rootH.revoke()
	p.mu.Lock()
	unlogged, unloggedAllowed := p.unlogged, p.unloggedAllowed
	p.mu.Unlock()
	if unlogged > 0 || unloggedAllowed > 0 {
		s.log.Info("egress decisions not logged", keySocket, name, keyPeerPID, p.pid, keyUnlogged, unlogged, keyUnloggedAllowed, unloggedAllowed)
	}
}

// peer is one accepted connection: its credentials and what it holds.
type peer struct {
	srv    *Server
	socket string
	direct bool // made by Handle.socket: serves no further socket()
	// from is the connection a direct one was made on (Handle.socket),
	// nil for an accepted one. What a direct connection holds open (its
	// connections, handles and WebSocket bytes) counts against from's
	// limits, with from's own (holder): one vat's relay connection and
	// its entry's direct connections, one per member of its grant, are
	// held to limits.conns, limits.handles and the WebSocket bound
	// together, not each. Calls and bytes in flight are each
	// connection's own.
	from *peer
	wc   *wire.Conn
	pid  int32
	uid  uint32
	lim  Limits
	flow flowcontrol.FlowLimiter // shared by every stream we write to (streamFlow)

	mu      sync.Mutex
	calls   int
	bytes   int64
	conns   int
	handles int
	wsHeld  int64 // WebSocket message bytes held (maxWSHeld)

	refusalsFrom    time.Time // the decision log's window (decisionLog)
	refusals        int       // refusals logged in it
	allowed         int       // allowed decisions logged in it
	unlogged        int       // refusals counted, not logged, since the last record
	unloggedAllowed int       // allowed decisions counted, not logged, since the last record
}

// holder is the peer whose counts bound what p holds open: p's own, or
// for a direct connection the connection it was made on (peer.from).
func (p *peer) holder() *peer {
	if p.from != nil {
		return p.from
	}
	return p
}

// holdWS takes n more bytes of WebSocket message data for this
// connection's WebSockets, or says why not.
func (p *peer) holdWS(n int64) error {
	p = p.holder()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wsHeld+n > maxWSHeld {
		return fmt.Errorf("%w: this connection's WebSockets (with those of the connections socket() made on it) hold %d bytes of messages not yet delivered (at most %d)", ErrLimit, p.wsHeld, maxWSHeld)
	}
	p.wsHeld += n
	p.srv.wsHeld.Add(n)
	return nil
}

// releaseWS gives back n bytes holdWS took.
func (p *peer) releaseWS(n int64) {
	p = p.holder()
	p.mu.Lock()
	p.wsHeld -= n
	p.mu.Unlock()
	p.srv.wsHeld.Add(-n)
}

// streamFlow is the flow limiter of one stream written to this peer: its
// own window, within the connection's.
func (p *peer) streamFlow() flowcontrol.FlowLimiter {
	return wire.StreamLimiter(p.flow, p.lim.Window)
}

// acquireHandle admits one more handle made by constrain.
func (p *peer) acquireHandle() error {
	p = p.holder()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handles >= p.lim.Handles {
		return fmt.Errorf("%w: %d handles held on this connection (with the connections socket() made on it)", ErrLimit, p.handles)
	}
	p.handles++
	return nil
}

func (p *peer) releaseHandle() {
	p = p.holder()
	p.mu.Lock()
	p.handles--
	p.mu.Unlock()
}

// acquireCall admits one more outstanding call of size bytes.
func (p *peer) acquireCall(size int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls >= p.lim.Calls {
		return fmt.Errorf("%w: %d calls outstanding on this connection", ErrLimit, p.calls)
	}
	if p.bytes+size > p.lim.Bytes {
		return fmt.Errorf("%w: %d bytes of calls outstanding on this connection (limit %d)", ErrLimit, p.bytes+size, p.lim.Bytes)
	}
	p.calls++
	p.bytes += size
	return nil
}

func (p *peer) releaseCall(size int64) {
	p.mu.Lock()
	p.calls--
	p.bytes -= size
	p.mu.Unlock()
}

func (p *peer) acquireConn() error {
	p = p.holder()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns >= p.lim.Conns {
		return fmt.Errorf("%w: %d connections open on this connection (with the connections socket() made on it)", ErrLimit, p.conns)
	}
	if n := p.srv.conns.Add(1); n > int64(p.lim.TotalConns) {
		p.srv.conns.Add(-1)
		return fmt.Errorf("%w: the switchboard holds %d connections in all (limits.totalConns)", ErrLimit, n-1)
	}
	p.conns++
	return nil
}

func (p *peer) releaseConn() {
	p = p.holder()
	p.mu.Lock()
	p.conns--
	p.mu.Unlock()
	p.srv.conns.Add(-1)
}

// sharedConn is one count of limits.conns (acquireConn) kept by several
// things: a connection, or a request in flight, and the stream handed
// back for it (a server with a goroutine of its own, which lives until
// the peer releases it). The count is given back when the last lets go.
type sharedConn struct {
	p    *peer
	refs atomic.Int32
}

// newSharedConn takes over a count acquireConn took, kept once.
func newSharedConn(p *peer) *sharedConn {
	c := &sharedConn{p: p}
	c.refs.Store(1)
	return c
}

// keep keeps the count once more.
func (c *sharedConn) keep() { c.refs.Add(1) }

// drop lets go of the count once; the last drop gives it back.
func (c *sharedConn) drop() {
	if c.refs.Add(-1) == 0 {
		c.p.releaseConn()
	}
}

// limitHook wraps a server so that calls from the peer count against its
// limits; a call past a limit is rejected at once, before it is queued.
type limitHook struct {
	capnp.ClientHook
	p *peer
}

func (h limitHook) Recv(ctx context.Context, r capnp.Recv) capnp.PipelineCaller {
	var size int64
	if m := r.Args.Message(); m != nil {
		if n, err := m.TotalSize(); err == nil {
			size = int64(n)
		}
	}
	if err := h.p.acquireCall(size); err != nil {
		r.Reject(err)
		return nil
	}
	r.Returner = &countingReturner{Returner: r.Returner, done: func() { h.p.releaseCall(size) }}
	return h.ClientHook.Recv(ctx, r)
}

type countingReturner struct {
	capnp.Returner
	once sync.Once
	done func()
}

func (c *countingReturner) Return() {
	c.Returner.Return()
	c.once.Do(c.done)
}

// export wraps a server hook in the peer's limits and returns the client.
// The caller owns the returned client.
func (p *peer) export(h capnp.ClientHook) capnp.Client {
	return capnp.NewClient(limitHook{ClientHook: h, p: p})
}
