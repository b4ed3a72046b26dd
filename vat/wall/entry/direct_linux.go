package entry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/rpc"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
)

// The direct path: the entry's connects take one Cap'n Proto hop. fd 3's
// Vat.direct hands the entry one switchboard connection per member of the
// vat's grant, each bootstrapped with that member's constrained Handle
// (labels vat and origin included), so the switchboard decides, logs and
// connects as it does for the supervisor's relay, and the connected socket
// comes back once. The union of a list grant is the entry trying each
// member in turn (those whose labels refuse the target are passed over
// without asking, as the relay does); what every member refuses goes to
// the relay (fd 3's Handle), which refuses it with its own words and
// reports it. The
// switchboard shuts a member's connection when the supervisor releases
// that member's handle (the grant changed, the vat stopped) or the
// switchboard restarts; the entry then asks fd 3 again.

// directRetry is how often at most the entry asks fd 3 for its direct
// connections; between asks, connects go through the relay.
const directRetry = time.Second

// reportEvery is how long a direct connect's report waits to go to the
// supervisor with the others of its batch.
const reportEvery = 250 * time.Millisecond

// maxReportBatch bounds one batch of reports (the supervisor takes up to
// 4096); past it reports are counted and dropped.
const maxReportBatch = 1024

// direct holds the entry's direct switchboard connections.
type direct struct {
	vat    schema.Vat // fd 3's bootstrap: asked for the connections
	conn   *wire.Conn // fd 3's connection, where they arrive
	logger *slog.Logger
	stop   context.CancelFunc // ends the watch (grantChanged)

	ask sync.Mutex // one ask at a time; others take the relay meanwhile

	mu      sync.Mutex
	closed  bool
	members []*directConn // nil: none held
	// retired are connections of an earlier grant, kept open while the
	// switchboard keeps them (what was made on them stays up), never used
	// again. A member the new grant still covers keeps its connection
	// (the same member in the new set takes its place).
	retired  []*directConn
	gen      uint64    // the grant generation members are of
	stale    bool      // a member was lost, or the grant changed: ask again
	watching bool      // a grantChanged call waits
	asked    time.Time // when last asked
	reports  []directReport
	dropped  int // reports past maxReportBatch since the last batch
	flush    bool
}

// directConn is one member's connection.
type directConn struct {
	key    string     // the member's labels
	labels labels.Set // the same, canonical; zero when they were not
	wc     *wire.Conn
	rc     *rpc.Conn
	h      schema.Handle
}

// refuses reports whether m's member refuses t on its labels alone: the
// switchboard's first judgment of any connect (labels.Admit, before a
// lookup or the address class), made here without the round trip that
// would only bring the refusal back. A grant of several hosts would
// otherwise pay one round trip per member listed before the one that
// admits t. Members whose labels did not read as canonical are asked.
func (m *directConn) refuses(t target) bool {
	if m.labels.IsZero() {
		return false
	}
	return !m.labels.Admit(labels.Request{Scheme: t.scheme, Host: t.host, Port: t.port}).Allow
}

func (m *directConn) close() {
	m.h.Release()
	_ = m.rc.Close()
}

// gone reports whether the switchboard has closed m.
func (m *directConn) gone() bool {
	select {
	case <-m.rc.Done():
		return true
	default:
		return false
	}
}

type directReport struct {
	t       target
	allowed bool
	reason  string
}

// SetDirect lets the proxy ask vat (fd 3's bootstrap, whose descriptors
// arrive on p's conn) for direct switchboard connections. It takes vat;
// Close releases it.
func (p *Proxy) SetDirect(vat schema.Vat) {
	p.direct = &direct{vat: vat, conn: p.conn, logger: p.logger}
}

// close drops every direct connection and the Vat.
func (d *direct) close() {
	d.mu.Lock()
	d.closed = true
	ms := append(d.members, d.retired...)
	d.members, d.retired = nil, nil
	stop := d.stop
	d.mu.Unlock()
	if stop != nil {
		stop()
	}
	for _, m := range ms {
		m.close()
	}
	d.vat.Release()
}

// current returns the direct connections, asking fd 3 for them when none
// are held and the last ask is directRetry old. Nil: use the relay. When
// some are held but one was lost, they are asked for again meanwhile.
func (d *direct) current(ctx context.Context) []*directConn {
	d.mu.Lock()
	ms, due := d.members, !d.closed && (d.members == nil || d.stale) && time.Since(d.asked) >= directRetry
	d.mu.Unlock()
	if !due {
		return ms
	}
	if ms != nil {
		go d.refresh(context.Background(), false)
		return ms
	}
	d.refresh(ctx, false)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.members
}

// refresh asks fd 3 for the grant's connections and takes them in place
// of those held: a member held already keeps its connection (the new one
// is closed unused), a member that left goes to retired. At most one ask
// runs at a time: another caller returns at once, unless now (the grant
// changed), which waits its turn. Unless now, an ask comes at most once
// per directRetry. It reports whether it took a new set.
func (d *direct) refresh(ctx context.Context, now bool) bool {
	if now {
		d.ask.Lock()
	} else if !d.ask.TryLock() {
		return false
	}
	defer d.ask.Unlock()
	d.mu.Lock()
	if d.closed || (!now && time.Since(d.asked) < directRetry) {
		d.mu.Unlock()
		return false
	}
	d.asked = time.Now()
	d.mu.Unlock()
	fresh, gen, err := d.fetch(ctx)
	if err != nil {
		d.logger.Warn("direct switchboard connections unavailable: connects go through the supervisor", keyReason, err.Error())
		return false
	}
	var unused []*directConn
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		for _, m := range fresh {
			m.close()
		}
		return false
	}
	held := map[string]*directConn{}
	for _, m := range d.members {
		if !m.gone() {
			held[m.key] = m
		}
	}
	kept := map[*directConn]bool{}
	ms := make([]*directConn, 0, len(fresh))
	for _, m := range fresh {
		if old := held[m.key]; old != nil && !kept[old] {
			kept[old] = true
			unused = append(unused, m)
			ms = append(ms, old)
			continue
		}
		ms = append(ms, m)
	}
	var retired []*directConn
	for _, m := range slices.Concat(d.retired, d.members) {
		switch {
		case kept[m]:
		case m.gone():
			unused = append(unused, m)
		default:
			retired = append(retired, m)
		}
	}
	d.retired = retired
	d.members, d.gen, d.stale = ms, gen, false
	if len(ms) == 0 {
		d.members = nil
	}
	watch := !d.watching
	d.watching = true
	var wctx context.Context
	if watch {
		wctx, d.stop = context.WithCancel(context.Background())
	}
	d.mu.Unlock()
	for _, m := range unused {
		m.close()
	}
	if watch {
		go d.watch(wctx)
	}
	return true
}

// watch keeps one grantChanged call waiting on fd 3 and asks for the
// connections again each time it answers: a member a regrant adds takes
// one hop from then on (until then, the relay serves it). It ends with
// the direct connections (close) or fd 3.
func (d *direct) watch(ctx context.Context) {
	defer func() {
		d.mu.Lock()
		d.watching = false
		d.mu.Unlock()
	}()
	for ctx.Err() == nil {
		d.mu.Lock()
		gen := d.gen
		d.mu.Unlock()
		fut, rel := d.vat.GrantChanged(ctx, func(p schema.Vat_grantChanged_Params) error {
			p.SetGen(gen)
			return nil
		})
		_, err := fut.Struct()
		rel()
		if err != nil {
			if ctx.Err() == nil && !capnp.IsDisconnected(err) {
				d.logger.Warn("watching the grant for changes ended: a member a regrant adds goes through the supervisor", keyReason, err.Error())
			}
			return
		}
		d.mu.Lock()
		d.stale = true
		d.mu.Unlock()
		if !d.refresh(ctx, true) {
			// Not taken (fd 3 or the switchboard failed it): the next
			// grantChanged answers at once; ask no faster than connects do.
			select {
			case <-time.After(directRetry):
			case <-ctx.Done():
			}
		}
	}
}

// fetch asks fd 3 for one connection per member, and the grant's
// generation.
func (d *direct) fetch(ctx context.Context) ([]*directConn, uint64, error) {
	fut, rel := d.vat.Direct(ctx, nil)
	defer rel()
	res, err := fut.Struct()
	if err != nil {
		return nil, 0, err
	}
	seqs, err := res.Fds()
	if err != nil {
		return nil, 0, err
	}
	members, err := res.Members()
	if err != nil {
		return nil, 0, err
	}
	ms := make([]*directConn, 0, seqs.Len())
	fail := func(err error) ([]*directConn, uint64, error) {
		for _, m := range ms {
			m.close()
		}
		return nil, 0, err
	}
	if members.Len() != seqs.Len() {
		return fail(fmt.Errorf("%d direct connections for %d members", seqs.Len(), members.Len()))
	}
	for i := 0; i < seqs.Len(); i++ {
		f, err := d.conn.TakeFD(seqs.At(i))
		if err != nil {
			return fail(err)
		}
		lf, err := members.At(i).Fields()
		if err != nil {
			_ = f.Close()
			return fail(err)
		}
		wc, err := wire.FromFile(f, true)
		if err != nil {
			return fail(err)
		}
		// Its peer is the switchboard, as fd 3's is the supervisor: no
		// backlog bound (serveNet).
		rc := wc.RPCWith(capnp.Client{}, nil, wire.Limits{Backlog: math.MaxInt})
		m := &directConn{key: labels.Set(lf).String(), wc: wc, rc: rc, h: schema.Handle(rc.Bootstrap(ctx))}
		if c, err := labels.Canonical(labels.Set(lf)); err == nil && c == labels.Set(lf) {
			m.labels = c
		}
		ms = append(ms, m)
	}
	return ms, res.Gen(), nil
}

// drop forgets m, a direct connection the switchboard closed or revoked
// (its member left the grant, the vat stopped, the switchboard went), and
// closes it. The others stay: closing one would shut every connection made
// on it. Once none is left, the next connect asks fd 3 again.
func (d *direct) drop(m *directConn) {
	d.mu.Lock()
	d.stale = true
	kept := make([]*directConn, 0, len(d.members))
	for _, x := range d.members {
		if x != m {
			kept = append(kept, x)
		}
	}
	if len(kept) == 0 {
		kept = nil
	}
	d.members = kept
	d.mu.Unlock()
	m.close()
}

// errRelay says a connect is for the relay to decide.
var errRelay = errors.New("for the relay")

// connect asks each direct connection in turn for a connection to t and
// returns the socket of the first that admits it. errRelay: none is held,
// every one refused t (the relay decides, and words the refusal; a member
// the grant gained since the entry asked is the relay's to serve), or one
// was revoked or lost (it is dropped). Any other error is the
// switchboard's: admitted, and it failed. With inProgress the socket may
// come back still connecting (a non-blocking connect()).
func (d *direct) connect(ctx context.Context, t target, hello []byte, inProgress bool) (int, error) {
	ms := d.current(ctx)
	if ms == nil {
		return -1, errRelay
	}
	for _, m := range ms {
		if m.refuses(t) {
			continue
		}
		fut, rel := m.h.Connect(ctx, func(ps schema.Handle_connect_Params) error {
			if err := setTarget(ps.NewTarget, t); err != nil {
				return err
			}
			if len(hello) > 0 {
				if err := ps.SetTlsHello(hello); err != nil {
					return err
				}
			}
			ps.SetWantFd(true)
			ps.SetInProgress(inProgress)
			return nil
		})
		res, err := fut.Struct()
		var seq uint64
		if err == nil {
			seq = res.Fd()
			if seq == 0 {
				if up := res.Upstream(); up.IsValid() {
					up.Release()
				}
				err = errors.New("the switchboard returned no socket")
			}
		}
		rel()
		switch {
		case err == nil:
			fd, err := m.wc.TakeRawFD(seq)
			if err != nil {
				d.drop(m)
				return -1, errRelay
			}
			d.report(t, true, "")
			return fd, nil
		case refused(err):
			continue // another member may admit it
		case capnp.IsDisconnected(err) || strings.Contains(err.Error(), "handle revoked"):
			d.drop(m)
			return -1, errRelay
		case ctx.Err() != nil:
			return -1, err
		default:
			d.report(t, false, err.Error())
			return -1, err
		}
	}
	return -1, errRelay // every member refused: the relay decides
}

// check asks each direct connection in turn for its decision on t
// without dialling, and returns nil at the first that admits it.
// errRelay: none is held, every one refused t (the relay decides and
// words the refusal, and reports it), or one was revoked or lost.
func (d *direct) check(ctx context.Context, t target) error {
	ms := d.current(ctx)
	if ms == nil {
		return errRelay
	}
	for _, m := range ms {
		if m.refuses(t) {
			continue
		}
		fut, rel := m.h.Check(ctx, func(ps schema.Handle_check_Params) error {
			return setTarget(ps.NewTarget, t)
		})
		res, err := fut.Struct()
		allow := false
		if err == nil {
			var dec schema.Decision
			if dec, err = res.Decision(); err == nil {
				allow = dec.Allow()
			}
		}
		rel()
		switch {
		case err == nil && allow:
			return nil
		case err == nil || refused(err):
			continue // another member may admit it
		case capnp.IsDisconnected(err) || strings.Contains(err.Error(), "handle revoked"):
			d.drop(m)
			return errRelay
		case ctx.Err() != nil:
			return err
		default:
			return errRelay
		}
	}
	return errRelay
}

// report queues what became of one direct connect for the supervisor.
func (d *direct) report(t target, allowed bool, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.reports) >= maxReportBatch {
		d.dropped++
		return
	}
	d.reports = append(d.reports, directReport{t: t, allowed: allowed, reason: reason})
	if !d.flush {
		d.flush = true
		time.AfterFunc(reportEvery, d.send)
	}
}

// send passes the queued reports to the supervisor.
func (d *direct) send() {
	d.mu.Lock()
	rs, dropped := d.reports, d.dropped
	d.reports, d.dropped, d.flush = nil, 0, false
	closed := d.closed
	d.mu.Unlock()
	if closed || len(rs) == 0 {
		return
	}
	if dropped > 0 {
		d.logger.Warn("direct connect reports dropped", "dropped", dropped)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fut, rel := d.vat.ReportDirect(ctx, func(ps schema.Vat_reportDirect_Params) error {
		l, err := ps.NewReports(int32(len(rs)))
		if err != nil {
			return err
		}
		for i, r := range rs {
			e := l.At(i)
			if err := setTarget(e.NewTarget, r.t); err != nil {
				return err
			}
			e.SetAllowed(r.allowed)
			if err := e.SetReason(r.reason); err != nil {
				return err
			}
		}
		return nil
	})
	defer rel()
	if _, err := fut.Struct(); err != nil {
		d.logger.Warn("reporting direct connects to the supervisor", keyReason, err.Error())
	}
}

// dialDirect is dial's one-hop path: the socket the switchboard connected
// for t on a direct connection, logged under path, or errRelay when the
// relay must be asked (logged by the relay's path then). inProgress is
// dialFile's: the socket may come back still connecting.
func (p *Proxy) dialDirect(ctx context.Context, t target, hello []byte, inProgress bool, path string) (int, error) {
	if p.direct == nil || p.noFD {
		return -1, errRelay
	}
	f, err := p.direct.connect(ctx, t, hello, inProgress)
	switch {
	case errors.Is(err, errRelay):
	case err != nil:
		p.log(t, false, err.Error(), path)
	default:
		p.log(t, true, "", path)
	}
	return f, err
}

// fileUpstream makes an upstream of fd, a socket the switchboard connected
// (taking fd).
func (p *Proxy) fileUpstream(t target, fd int) (*upstream, error) {
	f := os.NewFile(uintptr(fd), "upstream")
	nc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		p.log(t, false, "using the connected socket: "+err.Error(), "")
		return nil, fmt.Errorf("using the connected socket: %w", err)
	}
	return &upstream{nc: nc, proxy: p, target: t}, nil
}

// refused reports whether err carries a refusal (labels.RefusalReason),
// as the switchboard's text or as a labels.Refusal.
func refused(err error) bool {
	_, ok := labels.RefusalReason(err)
	return ok
}
