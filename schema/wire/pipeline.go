package wire

import (
	"context"
	"errors"
	"sync"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/server"
)

// A call the peer pipelines on the answer of a call still running here
// waits in that call's answer queue. go-capnp v3.1.0-alpha.2's queue
// (capnp.AnswerQueue, behind every server.Server) dereferences nil when
// one of them is refused at once as the answer comes (its field holds no
// capability, a null one, or the capability lacks its method), in the
// server's goroutine: the whole process panicked. A vat with no grant
// that asked for egress().handle().describe() in one go, as generated
// clients do, stopped the supervisor of every vat. So every server this
// side serves on a Conn's connection is wrapped (servedHook), and calls
// pipelined on its answers wait in a pipeline of this package instead,
// which takes a refusal as an answer.

// Errors a call pipelined on an answer gets when it names no capability.
var (
	errNoCapability = errors.New("pipelined on a field that holds no capability")
	errRefused      = errors.New("pipelined on a call that was refused")
)

// serveSafely wraps c, a capability this side serves on a connection:
// calls pipelined on its answers wait in a pipeline, each answer waits
// for room on the connection (a throttle), and the servers its answers
// hand over are wrapped in their turn. It takes ownership of c.
func serveSafely(c capnp.Client, t throttle) capnp.Client {
	if !c.IsValid() {
		return c
	}
	return capnp.NewClient(&servedHook{c: c, t: t})
}

// servedHook is the ClientHook of serveSafely.
type servedHook struct {
	c capnp.Client
	t throttle
}

// throttle holds back the answers of the servers served on one
// connection while the peer has not taken what was written to it: a
// peer that sends a thousand calls in one write and reads nothing has
// them all read before the first answer is written, and each answer,
// were it built, would wait in go-capnp's send queue (a thousand calls
// for an answer of 1 MiB each held 1.2 GiB). An answer waits, before
// go-capnp has it, while more than limit bytes wait for the peer (see
// behind.go), and with it the server's next call. The zero throttle
// holds nothing back.
type throttle struct {
	c     *Conn
	limit int64
}

// wait returns once at most t.limit bytes wait for the peer, or its
// connection has closed.
func (t throttle) wait() {
	if t.c != nil {
		t.c.waitQueued(t.limit)
	}
}

func (s *servedHook) Send(ctx context.Context, sd capnp.Send) (*capnp.Answer, capnp.ReleaseFunc) {
	return s.c.SendCall(ctx, sd)
}

func (s *servedHook) Recv(ctx context.Context, r capnp.Recv) capnp.PipelineCaller {
	p := &pipeline{}
	r.Returner = &settling{Returner: r.Returner, p: p, t: s.t}
	// The server's own answer queue sees no pipelined call: they wait in
	// p. A call refused at once (nil) has settled p already.
	_ = s.c.RecvCall(ctx, r)
	return p
}

func (s *servedHook) Brand() capnp.Brand { return capnp.Brand{Value: s} }
func (s *servedHook) Shutdown()          { s.c.Release() }
func (s *servedHook) String() string     { return "served " + s.c.String() }

// settling is the Returner of a call to a served capability: once the
// call has its answer, the calls pipelined on it (p) go where they name.
type settling struct {
	capnp.Returner
	p       *pipeline
	t       throttle
	results capnp.Struct
}

func (s *settling) AllocResults(sz capnp.ObjectSize) (capnp.Struct, error) {
	st, err := s.Returner.AllocResults(sz)
	s.results = st
	return st, err
}

func (s *settling) PrepareReturn(err error) {
	s.t.wait() // in the server's goroutine, holding no lock of go-capnp's
	if err == nil {
		wrapServers(s.results, s.t)
	}
	s.Returner.PrepareReturn(err)
	if err != nil {
		s.p.settle(refused(err))
		return
	}
	s.p.settle(answered(s.results.ToPtr()))
}

// wrapServers wraps each server among the capabilities results hands
// over (before they are exported), so that calls on them are servedHook
// safely too.
func wrapServers(results capnp.Struct, t throttle) {
	msg := results.Message()
	if msg == nil {
		return
	}
	table := msg.CapTable()
	for i := 0; i < table.Len(); i++ {
		c := table.At(i)
		b := c.Snapshot()
		_, isServer := server.IsServer(b.Brand())
		b.Release()
		if isServer {
			table.Set(capnp.CapabilityID(i), serveSafely(c, t)) // c moves into the wrapper
		}
	}
}

// pipeline holds the calls pipelined on one answer until it comes, then
// passes each on, in order, to where it settled.
type pipeline struct {
	mu      sync.Mutex
	to      capnp.PipelineCaller // where calls go, once settled
	drained chan struct{}        // closed once the queue has gone there
	queue   []pipelined
}

// pipelined is a call waiting in a pipeline; next holds the calls
// pipelined on its own answer.
type pipelined struct {
	ctx       context.Context
	transform []capnp.PipelineOp
	r         capnp.Recv
	next      *pipeline
}

func (p *pipeline) PipelineRecv(ctx context.Context, transform []capnp.PipelineOp, r capnp.Recv) capnp.PipelineCaller {
	p.mu.Lock()
	if p.to == nil {
		next := &pipeline{}
		p.queue = append(p.queue, pipelined{ctx: ctx, transform: transform, r: r, next: next})
		p.mu.Unlock()
		return next
	}
	to, drained := p.to, p.drained
	p.mu.Unlock()
	<-drained // behind the calls queued before it
	return orRefused(to.PipelineRecv(ctx, transform, r))
}

func (p *pipeline) PipelineSend(ctx context.Context, transform []capnp.PipelineOp, s capnp.Send) (*capnp.Answer, capnp.ReleaseFunc) {
	return sendAsRecv(p.PipelineRecv, ctx, transform, s)
}

// settle passes the queue on to to (never nil), then lets later calls go
// there directly. A second settle is ignored.
func (p *pipeline) settle(to capnp.PipelineCaller) {
	drained := make(chan struct{})
	p.mu.Lock()
	if p.to != nil {
		p.mu.Unlock()
		return
	}
	q := p.queue
	p.queue, p.to, p.drained = nil, to, drained
	p.mu.Unlock()
	for _, c := range q {
		c.next.settle(orRefused(to.PipelineRecv(c.ctx, c.transform, c.r)))
	}
	close(drained)
}

// orRefused is pc, or for nil (a call refused at once, which has its
// answer) a caller that refuses what is pipelined on it.
func orRefused(pc capnp.PipelineCaller) capnp.PipelineCaller {
	if pc == nil {
		return refused(errRefused)
	}
	return pc
}

// recvFunc is a PipelineCaller made of its PipelineRecv.
type recvFunc func(ctx context.Context, transform []capnp.PipelineOp, r capnp.Recv) capnp.PipelineCaller

func (f recvFunc) PipelineRecv(ctx context.Context, transform []capnp.PipelineOp, r capnp.Recv) capnp.PipelineCaller {
	return f(ctx, transform, r)
}

func (f recvFunc) PipelineSend(ctx context.Context, transform []capnp.PipelineOp, s capnp.Send) (*capnp.Answer, capnp.ReleaseFunc) {
	return sendAsRecv(f, ctx, transform, s)
}

// refused refuses every call pipelined on it with err.
func refused(err error) capnp.PipelineCaller {
	return recvFunc(func(_ context.Context, _ []capnp.PipelineOp, r capnp.Recv) capnp.PipelineCaller {
		r.Reject(err)
		return refused(err)
	})
}

// answered passes each call pipelined on results to the capability its
// transform names there, and refuses one that names none.
func answered(results capnp.Ptr) capnp.PipelineCaller {
	return recvFunc(func(ctx context.Context, transform []capnp.PipelineOp, r capnp.Recv) capnp.PipelineCaller {
		sub, err := capnp.Transform(results, transform)
		if err != nil {
			r.Reject(err)
			return refused(err)
		}
		iface := sub.Interface()
		var c capnp.Client
		if iface.IsValid() {
			c = sub.Message().CapTable().Get(iface)
		}
		if !c.IsValid() {
			r.Reject(errNoCapability)
			return refused(errNoCapability)
		}
		return orRefused(c.RecvCall(ctx, r))
	})
}

// sendAsRecv makes a local pipelined call (a Send) a Recv for recv, as
// capnp.AnswerQueue does.
func sendAsRecv(recv func(context.Context, []capnp.PipelineOp, capnp.Recv) capnp.PipelineCaller, ctx context.Context, transform []capnp.PipelineOp, s capnp.Send) (*capnp.Answer, capnp.ReleaseFunc) {
	ret := new(capnp.StructReturner)
	r := capnp.Recv{Method: s.Method, Returner: ret, ReleaseArgs: func() {}}
	if s.PlaceArgs != nil {
		_, seg := capnp.NewMultiSegmentMessage(nil)
		args, err := capnp.NewRootStruct(seg, s.ArgsSize)
		if err != nil {
			return capnp.ErrorAnswer(s.Method, err), func() {}
		}
		if err := s.PlaceArgs(args); err != nil {
			return capnp.ErrorAnswer(s.Method, err), func() {}
		}
		r.Args, r.ReleaseArgs = args, args.Message().Release
	}
	return ret.Answer(s.Method, recv(ctx, transform, r))
}
