package supervisor

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Public listener bounds (toybox serve; see ConnGuard).
const (
	// MaxPublicConns is how many connections the public listener holds
	// at once; more wait in the listen queue.
	MaxPublicConns = 4096
	// MaxClientConns is how many of them one client address may hold;
	// a connection past it is closed at once.
	MaxClientConns = 1024
	// publicShedAt is where idle connections start to make room: past
	// it, each new connection closes the longest-idle one.
	publicShedAt = MaxPublicConns - 256
)

// ConnGuard keeps one client from holding the public listener: it sheds
// idle keep-alive connections (longest idle first) once the listener holds
// shedAt, and closes a client's connection past perClient. A client that
// opens connections and leaves them idle otherwise took every slot for the
// two minutes of IdleTimeout, and nobody else got in.
type ConnGuard struct {
	perClient, shedAt int
	countLoopback     bool // count loopback clients too (tests)

	mu       sync.Mutex
	total    int
	byClient map[string]int
	idle     map[*guardedConn]time.Time
}

// NewConnGuard returns the public listener's guard, with toybox's bounds.
func NewConnGuard() *ConnGuard { return newConnGuard(MaxClientConns, publicShedAt) }

// MaxStatusConns is how many connections the status listener (toybox serve
// --status, loopback only) holds at once; more wait in the listen queue.
// A status page or a metrics scraper holds a few.
const MaxStatusConns = 64

// NewStatusGuard returns the status listener's guard: past three quarters
// of MaxStatusConns each new connection closes the longest-idle one, so
// that a local process that opens connections and leaves them idle does
// not hold the page, or the supervisor's descriptors, from everyone else.
func NewStatusGuard() *ConnGuard {
	return newConnGuard(MaxStatusConns, MaxStatusConns*3/4)
}

func newConnGuard(perClient, shedAt int) *ConnGuard {
	return &ConnGuard{perClient: perClient, shedAt: shedAt, byClient: map[string]int{}, idle: map[*guardedConn]time.Time{}}
}

// Listener wraps l (which should bound the total itself, as
// netutil.LimitListener does); the server using it must use ConnState.
func (g *ConnGuard) Listener(l net.Listener) net.Listener { return &guardedListener{Listener: l, g: g} }

// ConnState is the http.Server's ConnState hook: it tracks which
// connections are idle.
func (g *ConnGuard) ConnState(c net.Conn, st http.ConnState) {
	gc, ok := c.(*guardedConn)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if st == http.StateIdle {
		g.idle[gc] = time.Now()
	} else {
		delete(g.idle, gc)
	}
}

// admit counts c in, or reports that its client holds too many. Past
// shedAt it returns the longest-idle connection, for the caller to close.
func (g *ConnGuard) admit(c *guardedConn) (ok bool, shed *guardedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.client != "" && g.byClient[c.client] >= g.perClient {
		return false, nil
	}
	g.total++
	if c.client != "" {
		g.byClient[c.client]++
	}
	if g.total > g.shedAt {
		var oldest time.Time
		for ic, since := range g.idle {
			if shed == nil || since.Before(oldest) {
				shed, oldest = ic, since
			}
		}
		if shed != nil {
			delete(g.idle, shed)
		}
	}
	return true, shed
}

func (g *ConnGuard) release(c *guardedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.total--
	delete(g.idle, c)
	if c.client != "" {
		if g.byClient[c.client]--; g.byClient[c.client] <= 0 {
			delete(g.byClient, c.client)
		}
	}
}

type guardedListener struct {
	net.Listener
	g *ConnGuard
}

func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		gc := &guardedConn{Conn: c, g: l.g}
		// A loopback client is this host's own: a reverse proxy in front
		// (every visitor shares its address; it limits its clients
		// itself), or a local tool. Only idle shedding applies to it.
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && (l.g.countLoopback || !a.IP.IsLoopback()) {
			gc.client = clientKey(a.AddrPort().Addr())
		}
		ok, shed := l.g.admit(gc)
		if !ok {
			_ = c.Close()
			continue
		}
		if shed != nil {
			_ = shed.Close()
		}
		return gc, nil
	}
}

// clientKey names a client for MaxClientConns: its IPv4 address, or the
// /64 its IPv6 address lies in (one host has a whole /64 to pick from).
func clientKey(a netip.Addr) string {
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.WithZone("").Prefix(64)
	return p.String()
}

type guardedConn struct {
	net.Conn
	g      *ConnGuard
	client string // clientKey of the remote address ("" for loopback or a unix socket)
	once   sync.Once
}

// NetConn returns the connection c wraps (as *tls.Conn's does), for
// edge.ConnContext to find its framing.
func (c *guardedConn) NetConn() net.Conn { return c.Conn }

func (c *guardedConn) Close() error {
	c.once.Do(func() { c.g.release(c) })
	return c.Conn.Close()
}
