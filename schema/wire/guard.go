package wire

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"capnproto.org/go/capnp/v3/rpc/transport"
	rpccp "capnproto.org/go/capnp/v3/std/capnp/rpc"
)

// Limits bound what one peer can make this side of a connection hold.
// go-capnp bounds none of it: a peer that pipelines calls and never
// finishes them, never reads, or asks again and again for a capability and
// never releases one (each a server with its own goroutine here) grows
// this process until it dies: a vat on fd 3 against the supervisor that
// hosts every vat. A zero field takes its default.
type Limits struct {
	// Unfinished is how many questions (Bootstrap or Call messages) the
	// peer may leave without their Finish more than finishGrace after
	// their Return (each keeps an answer, results included, in the
	// connection's tables; go-capnp itself sends a Finish 250 ms after the
	// Return, so a fast caller always has some unfinished), and a sixteenth
	// of how many it may leave unfinished in all, whatever their age. Past
	// either the connection ends with ErrUnfinished. If zero,
	// DefaultUnfinished.
	Unfinished int
	// Backlog is how many messages this side may have begun for the peer
	// and not yet written: its own calls, and the answers to the peer's
	// calls (go-capnp begins one when the call arrives, so a call still
	// running counts). Answers to a peer that does not read pile up
	// there. Past it, this side stops reading the peer until the peer
	// has read: a peer that only writes soon blocks. Keep it above the
	// calls a peer may have running (the switchboard's limits.calls, a
	// vat's Unfinished). If zero, DefaultBacklog.
	Backlog int
	// BacklogBytes is how many bytes of this side's messages may wait for
	// the peer to read them, beyond what the socket holds (Conn.Queued).
	// Past it, the answers of this side's servers wait before they are
	// queued (and with them each server's next call), so a peer that
	// never reads makes this side hold that much, the answers of the
	// calls it has running, and past Backlog it is no longer read. If
	// zero, DefaultBacklogBytes.
	BacklogBytes int64
	// Exports is how many capabilities this side may have handed the
	// peer and not had released. Past it the connection ends with
	// ErrExports. If zero, DefaultExports.
	Exports int
	// Caps is how many capabilities one message of the peer's (a call, a
	// return, a resolve) may carry. Each becomes an import here, and a
	// Release back when dropped: a million in one message queued a
	// million Releases for a peer that did not read them. Past it the
	// connection ends with ErrCaps. If zero, DefaultCaps.
	Caps int
	// CallBytes is how many bytes of the peer's calls this side may hold
	// unanswered (calls pipelined on a promise still pending wait in
	// full). Past it the connection ends with ErrCallBytes. If zero,
	// DefaultCallBytes.
	CallBytes int64
	// AnswerBytes is how many bytes of this side's answers (the Return
	// messages sent) the peer may leave unfinished: each is held, results
	// included, until its Finish. Past it the connection ends with
	// ErrAnswerBytes as soon as the Return that goes past it is sent (a
	// peer that sent its calls and went quiet is not waited for). A
	// caller that finishes 250 ms after each Return, as go-capnp does,
	// holds what it is answered in that time. If zero, DefaultAnswerBytes.
	AnswerBytes int64
}

// The defaults of Limits.
const (
	DefaultUnfinished   = 16384
	DefaultBacklog      = 4096
	DefaultBacklogBytes = 4 << 20 // four of a door's largest answers; twenty times what a unix socket holds by default (208 KiB)
	DefaultExports      = 1 << 17 // above what the switchboard lets one connection hold: its own limits answer first, with their reasons
	DefaultCaps         = 1024
	DefaultCallBytes    = 1 << 30
	DefaultAnswerBytes  = 1 << 30
)

func (l Limits) withDefaults() Limits {
	orDefault(&l.Unfinished, DefaultUnfinished)
	orDefault(&l.Backlog, DefaultBacklog)
	orDefault(&l.BacklogBytes, DefaultBacklogBytes)
	orDefault(&l.Exports, DefaultExports)
	orDefault(&l.Caps, DefaultCaps)
	orDefault(&l.CallBytes, DefaultCallBytes)
	orDefault(&l.AnswerBytes, DefaultAnswerBytes)
	return l
}

// orDefault sets *v to d when it is zero or negative.
func orDefault[T int | int64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// finishGrace is how long after its Return a question may wait for its
// Finish before it counts against Limits.Unfinished; unfinishedFactor is
// how many times Limits.Unfinished may wait in all.
const (
	finishGrace      = 2 * time.Second
	unfinishedFactor = 16
)

// Errors that end a connection whose peer went past its Limits.
var (
	ErrUnfinished  = errors.New("the peer left too many calls unfinished")
	ErrExports     = errors.New("the peer holds too many capabilities")
	ErrCaps        = errors.New("a message of the peer carries too many capabilities")
	ErrCallBytes   = errors.New("the peer's unanswered calls hold too many bytes")
	ErrAnswerBytes = errors.New("the answers the peer left unfinished hold too many bytes")
	// ErrUnserved ends a connection whose peer sent a message this side
	// does not serve (see unserved).
	ErrUnserved = errors.New("the peer sent a message this side does not serve")
	// ErrProtocol ends a connection whose peer sent what go-capnp
	// v3.1.0-alpha.2 does not survive: a call pipelined on its own answer
	// (a nil dereference), a promise resolved twice, to itself or in a
	// cycle (a panic, or a loop that never ends), a Return for a question
	// this side has not sent (a promise fulfilled, then rejected when its
	// call failed to go out: a panic). Each took the whole process down,
	// every other connection with it.
	ErrProtocol = errors.New("the peer broke the Cap'n Proto protocol")
)

// maxPromiseChain is how many of the peer's promises, each resolved to
// the next, a resolution may lead through before the next promise is an
// unresolved one. The peer's promises are checked for a cycle along it,
// and a longer chain is refused rather than walked.
const maxPromiseChain = 64

// maxTransform is how many ops the transform of a promised answer (the
// path a call pipelined on an answer takes through its results) may have.
// go-capnp allocates 32 bytes for each op of a transform it reads, before
// it looks at them, and an op of no size costs the message nothing: a
// call with a transform of 8 million empty ops, 152 bytes on the wire,
// made it allocate 256 MiB and spend half a second in the receive
// goroutine, and held the 256 MiB for as long as the call waited on an
// answer to come. No real transform is longer than a message is deep
// (go-capnp reads 64 levels), so a longer one ends the connection.
const maxTransform = 64

// notPromise stands, in guard.resolved, for a promise resolved to
// anything but another promise of the peer's.
const notPromise = -1

// guard is a transport that enforces Limits.
type guard struct {
	transport.Transport
	lim Limits
	// stopReading makes the read under way, and every later one, fail at
	// once; writes go on. It takes no lock of the guard's or go-capnp's.
	stopReading func()

	mu         sync.Mutex
	drained    *sync.Cond // backlog fell to the limit, or closed
	unfinished map[uint32]struct{}
	exports    map[uint32]uint32 // export id → references the peer holds
	// A Finish (releaseResultCaps, the default) gives back the
	// capabilities of its answer's results, so which those were is kept
	// from the Return until the Finish: answered holds every question
	// answered and not finished, finishedFirst those finished before
	// their Return was sent. Both are bounded by unfinished.
	answered      map[uint32]answer
	answerBytes   int64           // the sum of answered's sizes
	finishedFirst map[uint32]bool // → releaseResultCaps
	stale         int             // answered more than finishGrace ago, at the last count
	counted       time.Time       // when stale was counted
	backlog       int
	closed        bool
	callBytes     map[uint32]int64 // question → bytes of the peer's call, until its Return
	heldBytes     int64            // their sum
	// ended is why the connection must end, found on the send path
	// (answers past Limits.AnswerBytes): RecvMessage returns it.
	ended error
	// resolved holds each promise of the peer's it has resolved, and to
	// which of its promises (or notPromise), until this side releases
	// the import: a promise is resolved once.
	resolved map[uint32]int64
	// asked holds this side's questions (its Calls and Bootstraps) from
	// when their message is handed to the transport until the peer's
	// Return. A Return for any other is refused: go-capnp fulfils a
	// question's promise with the Return, and rejects it when its message
	// then fails to go out (a write failed, its context ended, the
	// connection closed first): twice resolved, a panic.
	asked map[uint32]struct{}
}

// answer is a question answered and not finished: the exports its results
// handed over, when, and the bytes of its Return.
type answer struct {
	ids  []uint32
	at   time.Time
	size int64
}

// newGuard guards t; stopReading (may be nil) interrupts t's reads, to end
// the connection for a reason found on the send path.
func newGuard(t transport.Transport, lim Limits, stopReading func()) *guard {
	g := &guard{
		Transport: t, lim: lim.withDefaults(), stopReading: stopReading,
		unfinished: map[uint32]struct{}{}, exports: map[uint32]uint32{},
		answered: map[uint32]answer{}, finishedFirst: map[uint32]bool{},
		callBytes: map[uint32]int64{}, resolved: map[uint32]int64{}, asked: map[uint32]struct{}{},
	}
	g.drained = sync.NewCond(&g.mu)
	return g
}

// release gives back n references to export id (the caller holds mu).
func (g *guard) release(id, n uint32) {
	if have, ok := g.exports[id]; ok {
		if have <= n {
			delete(g.exports, id)
		} else {
			g.exports[id] = have - n
		}
	}
}

func (g *guard) RecvMessage() (transport.IncomingMessage, error) {
	g.mu.Lock()
	for g.backlog > g.lim.Backlog && !g.closed && g.ended == nil {
		g.drained.Wait()
	}
	// Checked before each message read: what one message can make this
	// side export is bounded by the servers, and the next is not read.
	exports := len(g.exports)
	ended := g.ended
	g.mu.Unlock()
	if ended != nil {
		return nil, ended
	}
	if exports > g.lim.Exports {
		return nil, fmt.Errorf("%w: %d not released (limit %d)", ErrExports, exports, g.lim.Exports)
	}
	in, err := g.Transport.RecvMessage()
	g.mu.Lock()
	ended = g.ended
	answerBytes := g.answerBytes
	g.mu.Unlock()
	if ended != nil {
		// The read was stopped (or a message came meanwhile): the reason
		// is the guard's, not the read's error.
		if err == nil {
			in.Release()
		}
		return nil, ended
	}
	if err != nil {
		return in, err
	}
	// A second line: exported records ErrAnswerBytes, and stops the read,
	// as soon as a Return takes the total past the limit.
	if answerBytes > g.lim.AnswerBytes {
		in.Release()
		return nil, fmt.Errorf("%w: %d bytes (limit %d)", ErrAnswerBytes, answerBytes, g.lim.AnswerBytes)
	}
	m := in.Message()
	setReadLimit(m.Message())
	if n := capsCarried(m); n > g.lim.Caps {
		in.Release()
		return nil, fmt.Errorf("%w: %d (limit %d)", ErrCaps, n, g.lim.Caps)
	}
	if n, err := longestTransform(m); err != nil || n > maxTransform {
		in.Release()
		if err != nil {
			return nil, fmt.Errorf("%w: a promised answer's transform cannot be read: %w", ErrProtocol, err)
		}
		return nil, fmt.Errorf("%w: a promised answer's transform of %d ops (limit %d)", ErrProtocol, n, maxTransform)
	}
	if why := unserved(m); why != "" {
		in.Release()
		return nil, fmt.Errorf("%w: %s", ErrUnserved, why)
	}
	var q uint32
	var size int64
	switch m.Which() {
	case rpccp.Message_Which_release:
		r, err := m.Release()
		if err != nil {
			return in, nil
		}
		g.mu.Lock()
		g.release(r.Id(), r.ReferenceCount())
		g.mu.Unlock()
		return in, nil
	case rpccp.Message_Which_bootstrap:
		b, err := m.Bootstrap()
		if err != nil {
			return in, nil // go-capnp says what is wrong with it
		}
		q = b.QuestionId()
	case rpccp.Message_Which_call:
		c, err := m.Call()
		if err != nil {
			return in, nil
		}
		q = c.QuestionId()
		if onOwnAnswer(c) {
			in.Release()
			return nil, fmt.Errorf("%w: call %d is pipelined on its own answer", ErrProtocol, q)
		}
		if sz, err := m.Message().TotalSize(); err == nil {
			size = int64(sz)
		}
	case rpccp.Message_Which_return:
		r, err := m.Return()
		if err != nil {
			return in, nil
		}
		q := r.AnswerId()
		g.mu.Lock()
		_, asked := g.asked[q]
		delete(g.asked, q)
		g.mu.Unlock()
		if !asked {
			in.Release()
			return nil, fmt.Errorf("%w: a Return for question %d, which this side has not sent", ErrProtocol, q)
		}
		return in, nil
	case rpccp.Message_Which_resolve:
		r, err := m.Resolve()
		if err != nil {
			return in, nil
		}
		g.mu.Lock()
		err = g.resolve(r)
		g.mu.Unlock()
		if err != nil {
			in.Release()
			return nil, err
		}
		return in, nil
	case rpccp.Message_Which_finish:
		f, err := m.Finish()
		if err != nil {
			return in, nil
		}
		q := f.QuestionId()
		g.mu.Lock()
		if _, asked := g.unfinished[q]; asked {
			delete(g.unfinished, q)
			if a, ok := g.answered[q]; ok {
				delete(g.answered, q)
				g.answerBytes -= a.size
				if f.ReleaseResultCaps() {
					for _, id := range a.ids {
						g.release(id, 1)
					}
				}
			} else {
				g.finishedFirst[q] = f.ReleaseResultCaps()
			}
		}
		g.mu.Unlock()
		return in, nil
	default:
		return in, nil
	}
	now := time.Now()
	g.mu.Lock()
	g.unfinished[q] = struct{}{}
	n := len(g.unfinished)
	if size > 0 {
		g.heldBytes += size - g.callBytes[q]
		g.callBytes[q] = size
	}
	held := g.heldBytes
	if now.Sub(g.counted) >= time.Second {
		// Counted at most once a second: a peer gains at most a second's
		// calls on the count, and the total bounds those.
		g.stale = 0
		for _, a := range g.answered {
			if now.Sub(a.at) > finishGrace {
				g.stale++
			}
		}
		g.counted = now
	}
	stale := g.stale
	g.mu.Unlock()
	switch {
	case held > g.lim.CallBytes:
		in.Release()
		return nil, fmt.Errorf("%w: %d bytes (limit %d)", ErrCallBytes, held, g.lim.CallBytes)
	case n > unfinishedFactor*g.lim.Unfinished:
		in.Release()
		return nil, fmt.Errorf("%w: %d calls without a Finish (limit %d)", ErrUnfinished, n, unfinishedFactor*g.lim.Unfinished)
	case stale > g.lim.Unfinished:
		in.Release()
		return nil, fmt.Errorf("%w: %d calls answered more than %s ago and never finished (limit %d)", ErrUnfinished, stale, finishGrace, g.lim.Unfinished)
	}
	return in, nil
}

// onOwnAnswer reports whether c is pipelined on the answer to c itself.
func onOwnAnswer(c rpccp.Call) bool {
	t, err := c.Target()
	if err != nil || t.Which() != rpccp.MessageTarget_Which_promisedAnswer {
		return false
	}
	pa, err := t.PromisedAnswer()
	return err == nil && pa.QuestionId() == c.QuestionId()
}

// resolve records the peer's resolution r of one of its promises, or
// returns why it ends the connection: the promise was resolved already
// (and not released since), or it is resolved to itself, or to a promise
// that leads back to it or through more than maxPromiseChain others. The
// caller holds mu.
func (g *guard) resolve(r rpccp.Resolve) error {
	p := r.PromiseId()
	if _, ok := g.resolved[p]; ok {
		return fmt.Errorf("%w: promise %d resolved twice", ErrProtocol, p)
	}
	to := int64(notPromise)
	if r.Which() == rpccp.Resolve_Which_cap {
		d, err := r.Cap()
		if err != nil {
			return nil // go-capnp says what is wrong with it
		}
		switch d.Which() {
		case rpccp.CapDescriptor_Which_senderHosted:
			if d.SenderHosted() == p {
				return fmt.Errorf("%w: promise %d resolved to itself", ErrProtocol, p)
			}
		case rpccp.CapDescriptor_Which_senderPromise:
			to = int64(d.SenderPromise())
		}
	}
	for next, n := to, 0; next != notPromise; n++ {
		switch {
		case next == int64(p):
			return fmt.Errorf("%w: promise %d resolved in a cycle", ErrProtocol, p)
		case n == maxPromiseChain:
			return fmt.Errorf("%w: promise %d resolved through more than %d promises", ErrProtocol, p, maxPromiseChain)
		}
		var ok bool
		if next, ok = g.resolved[uint32(next)]; !ok {
			break
		}
	}
	g.resolved[p] = to
	return nil
}

// capsCarried is how many capabilities a message of the peer's carries in
// its cap table (a call's params, a return's results; a resolve, one).
func capsCarried(m rpccp.Message) int {
	var p rpccp.Payload
	var err error
	switch m.Which() {
	case rpccp.Message_Which_call:
		c, e := m.Call()
		if e != nil {
			return 0
		}
		p, err = c.Params()
	case rpccp.Message_Which_return:
		r, e := m.Return()
		if e != nil || r.Which() != rpccp.Return_Which_results {
			return 0
		}
		p, err = r.Results()
	case rpccp.Message_Which_resolve:
		return 1
	default:
		return 0
	}
	if err != nil {
		return 0
	}
	t, err := p.CapTable()
	if err != nil {
		return 0
	}
	return t.Len()
}

// longestTransform is how many ops the longest promised-answer transform
// in m has: the target of a call or a disembargo, or a receiverAnswer among
// the capabilities a call, a return or a resolve carries (go-capnp reads
// each of them). A transform that cannot be read is an error: a long one
// of empty ops goes past the message's read limit (readLimit). What else
// cannot be read is left to go-capnp, which cannot read it either.
func longestTransform(m rpccp.Message) (int, error) {
	longest := 0
	var unread error
	promised := func(pa rpccp.PromisedAnswer, err error) {
		if err != nil {
			return
		}
		t, err := pa.Transform()
		if err != nil {
			unread = err
			return
		}
		longest = max(longest, t.Len())
	}
	target := func(t rpccp.MessageTarget, err error) {
		if err == nil && t.Which() == rpccp.MessageTarget_Which_promisedAnswer {
			promised(t.PromisedAnswer())
		}
	}
	descriptor := func(d rpccp.CapDescriptor) {
		if d.Which() == rpccp.CapDescriptor_Which_receiverAnswer {
			promised(d.ReceiverAnswer())
		}
	}
	payload := func(p rpccp.Payload, err error) {
		if err != nil {
			return
		}
		table, err := p.CapTable()
		if err != nil {
			return
		}
		for i := 0; i < table.Len(); i++ {
			descriptor(table.At(i))
		}
	}
	switch m.Which() {
	case rpccp.Message_Which_call:
		if c, err := m.Call(); err == nil {
			target(c.Target())
			payload(c.Params())
		}
	case rpccp.Message_Which_return:
		if r, err := m.Return(); err == nil && r.Which() == rpccp.Return_Which_results {
			payload(r.Results())
		}
	case rpccp.Message_Which_resolve:
		if r, err := m.Resolve(); err == nil && r.Which() == rpccp.Resolve_Which_cap {
			if d, err := r.Cap(); err == nil {
				descriptor(d)
			}
		}
	case rpccp.Message_Which_disembargo:
		if d, err := m.Disembargo(); err == nil {
			target(d.Target())
		}
	}
	return longest, unread
}

// exported counts the capabilities m hands the peer: each time one is
// sent, the peer holds one more reference, which it gives back with a
// Release.
func (g *guard) exported(m rpccp.Message) {
	var table rpccp.CapDescriptor_List
	switch m.Which() {
	case rpccp.Message_Which_return:
		r, err := m.Return()
		if err != nil {
			return
		}
		var ids []uint32
		if r.Which() == rpccp.Return_Which_results {
			if p, err := r.Results(); err == nil {
				table, _ = p.CapTable()
				for i := 0; i < table.Len(); i++ {
					if id, ok := exportID(table.At(i)); ok {
						ids = append(ids, id)
					}
				}
			}
		}
		q := r.AnswerId()
		var size int64
		if sz, err := m.Message().TotalSize(); err == nil {
			size = int64(sz)
		}
		g.mu.Lock()
		if b, ok := g.callBytes[q]; ok {
			g.heldBytes -= b
			delete(g.callBytes, q)
		}
		countCaps := true
		if releaseCaps, finished := g.finishedFirst[q]; finished {
			delete(g.finishedFirst, q)
			countCaps = !releaseCaps // else given back as they were sent
		} else {
			g.answered[q] = answer{ids: ids, at: time.Now(), size: size}
			g.answerBytes += size
		}
		if countCaps {
			for _, id := range ids {
				g.exports[id]++
			}
		}
		// Past the limit the connection ends now, not at the peer's next
		// message: a peer that sent its calls in one write and went quiet
		// would keep every answer. The read is stopped (the answers already
		// on their way still go out) and RecvMessage returns the reason, so
		// go-capnp ends the connection with it, as for the other limits.
		stop := false
		if g.answerBytes > g.lim.AnswerBytes && g.ended == nil {
			g.ended = fmt.Errorf("%w: %d bytes (limit %d)", ErrAnswerBytes, g.answerBytes, g.lim.AnswerBytes)
			g.drained.Broadcast()
			stop = g.stopReading != nil
		}
		g.mu.Unlock()
		if stop {
			g.stopReading()
		}
		return
	case rpccp.Message_Which_call:
		c, err := m.Call()
		if err != nil {
			return
		}
		p, err := c.Params()
		if err != nil {
			return
		}
		table, _ = p.CapTable()
	case rpccp.Message_Which_resolve:
		r, err := m.Resolve()
		if err != nil || r.Which() != rpccp.Resolve_Which_cap {
			return
		}
		d, err := r.Cap()
		if err != nil {
			return
		}
		g.count(d)
		return
	case rpccp.Message_Which_release:
		// This side lets go of an import of the peer's (go-capnp gives
		// back every reference at once): the peer may use its id for a
		// new promise, to be resolved in its turn.
		if r, err := m.Release(); err == nil {
			g.mu.Lock()
			delete(g.resolved, r.Id())
			g.mu.Unlock()
		}
		return
	default:
		return
	}
	for i := 0; i < table.Len(); i++ {
		g.count(table.At(i))
	}
}

func (g *guard) count(d rpccp.CapDescriptor) {
	if id, ok := exportID(d); ok {
		g.mu.Lock()
		g.exports[id]++
		g.mu.Unlock()
	}
}

// exportID is the export a descriptor hands over, if it is one of this
// side's.
func exportID(d rpccp.CapDescriptor) (uint32, bool) {
	switch d.Which() {
	case rpccp.CapDescriptor_Which_senderHosted:
		return d.SenderHosted(), true
	case rpccp.CapDescriptor_Which_senderPromise:
		return d.SenderPromise(), true
	}
	return 0, false
}

func (g *guard) NewMessage() (transport.OutgoingMessage, error) {
	out, err := g.Transport.NewMessage()
	if err != nil {
		return out, err
	}
	g.mu.Lock()
	g.backlog++
	g.mu.Unlock()
	return &guardedOut{OutgoingMessage: out, g: g}, nil
}

// done counts one message built for the peer as written (or dropped).
func (g *guard) done() {
	g.mu.Lock()
	g.backlog--
	if g.backlog == g.lim.Backlog {
		g.drained.Broadcast()
	}
	g.mu.Unlock()
}

func (g *guard) Close() error {
	g.mu.Lock()
	g.closed = true
	g.drained.Broadcast()
	g.mu.Unlock()
	return g.Transport.Close()
}

// guardedOut counts itself out of the backlog once it is written or
// released, whichever comes first.
type guardedOut struct {
	transport.OutgoingMessage
	g    *guard
	once sync.Once
}

func (o *guardedOut) Send() error {
	m := o.Message()
	o.g.exported(m)
	q, asks := question(m)
	if asks {
		o.g.mu.Lock()
		o.g.asked[q] = struct{}{}
		o.g.mu.Unlock()
	}
	err := o.OutgoingMessage.Send()
	o.once.Do(o.g.done)
	if asks {
		o.g.mu.Lock()
		_, waiting := o.g.asked[q]
		switch {
		case err == nil:
		case waiting:
			delete(o.g.asked, q) // never sent: a Return for it is refused
		default:
			// The peer returned it while it went out: go-capnp has
			// fulfilled its promise, and must not reject it for the
			// failed write (a panic). The connection ends with the
			// write's failure all the same.
			err = nil
		}
		o.g.mu.Unlock()
	}
	return err
}

// question returns the question m asks the peer (a Call's or a
// Bootstrap's), if it asks one.
func question(m rpccp.Message) (uint32, bool) {
	switch m.Which() {
	case rpccp.Message_Which_call:
		if c, err := m.Call(); err == nil {
			return c.QuestionId(), true
		}
	case rpccp.Message_Which_bootstrap:
		if b, err := m.Bootstrap(); err == nil {
			return b.QuestionId(), true
		}
	}
	return 0, false
}

func (o *guardedOut) Release() {
	o.OutgoingMessage.Release()
	o.once.Do(o.g.done)
}
