package entry

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"toybox/labels"
	"toybox/vat/relay"
)

// Descriptors. Run out of them, the entry could not take the socket the
// next connect hands over: recvmsg(2) drops it (MSG_CTRUNC), and a
// connection that lost a descriptor cannot go on, so the capability
// connection ended, and with it every later connect of the vat's, while
// the wall ran on. The proxy and the forwards refuse a new connection
// before that.
const (
	fdsPerConn  = 2  // the client's socket and the switchboard's (a splice pipe only while bytes move)
	fdReserve   = 64 // the capability socket, the runtime's own, a connection being refused, headroom
	maxRefusing = 32 // refusals being answered at once; past them a connection is closed unanswered
	pipeShare   = 16 // at most one descriptor in pipeShare goes to splice pipes
	logEvery    = 10 * time.Second
)

// gate bounds the connections the proxy, the forwards and transparent
// egress (placed) hold open together.
type gate struct {
	max       int          // Config.MaxConns; 0: from the descriptor limit
	listeners int          // the listening sockets the entry holds
	open      atomic.Int64 // connections held
	refusing  atomic.Int64 // refusals being answered
	log       *slog.Logger
	said      rateLog
}

// limit is how many connections may be open at once: MaxConns, or what
// the soft RLIMIT_NOFILE leaves beside the reserve, the listeners and the
// splice pipes (a share of it, which the relays are held to). It is read
// at each connection: an operator may change the limit while the wall
// runs.
func (g *gate) limit() (conns int64, nofile uint64) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		rl.Cur = 1024
	}
	pipes := int(min(rl.Cur/pipeShare/2, relay.MaxPipes))
	relay.SetMaxPipes(pipes)
	if g.max > 0 {
		return int64(g.max), rl.Cur
	}
	n := (int64(rl.Cur) - fdReserve - int64(g.listeners) - 2*int64(pipes)) / fdsPerConn
	return max(n, 0), rl.Cur
}

// take reports whether one more connection may be open, and holds its
// place (done gives it back); if not, it says why.
func (g *gate) take() (func(), error) {
	n, nofile := g.limit()
	if g.open.Add(1) > n {
		g.open.Add(-1)
		if g.max > 0 {
			return nil, labels.Refusef("toybox-entry holds %d connections, its limit; close one first", n)
		}
		return nil, labels.Refusef("toybox-entry holds %d connections, as many as its descriptor limit allows (RLIMIT_NOFILE %d); close one first", n, nofile)
	}
	var once sync.Once
	return func() { once.Do(func() { g.open.Add(-1) }) }, nil
}

// admit hands c to serve with its place held, or refuses it: answer, when
// not nil, tells the client why (the proxy's clients speak HTTP; a
// forward's do not, and are closed).
func (g *gate) admit(c net.Conn, serve func(), answer func(error)) {
	done, err := g.take()
	if err == nil {
		go func() {
			defer done()
			serve()
		}()
		return
	}
	if n, ok := g.said.allow(time.Now()); ok {
		g.log.Warn("connection refused", keyReason, err.Error(), "unlogged", n)
	}
	if answer == nil || g.refusing.Add(1) > maxRefusing {
		if answer != nil {
			g.refusing.Add(-1)
		}
		_ = c.Close()
		return
	}
	go func() {
		defer g.refusing.Add(-1)
		answer(err)
	}()
}

// rateLog lets one record through per logEvery, and counts the others,
// so that a storm of one kind of record cannot push what caused it out of
// the wall's log tail.
type rateLog struct {
	mu       sync.Mutex
	last     time.Time
	unlogged int
}

// allow reports whether a record may be written now, and how many were
// held back since the last one.
func (r *rateLog) allow(now time.Time) (unlogged int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && now.Sub(r.last) < logEvery {
		r.unlogged++
		return 0, false
	}
	r.last = now
	n := r.unlogged
	r.unlogged = 0
	return n, true
}
