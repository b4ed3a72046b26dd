package switchboard

import (
	"context"
	"net"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/flowcontrol"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
)

// directSuffix names, in the log's socket key, a connection made by
// Handle.socket on the socket of the peer that asked for it.
const directSuffix = "+direct"

// Socket makes a new connection to the switchboard whose bootstrap is a
// handle with h's labels, made from h (so revoked with it), and hands its
// other end over on h's connection. The connection counts as one handle
// of the asking peer until it closes; it closes when its bootstrap is
// revoked (h or a handle h derives from released, or the asking peer's
// connection closed), or when the holder closes it.
//
// A connection socket made makes no other: its holder is untrusted (the
// entry in a wall), and each such connection counts calls and pipelined
// bytes against limits of its own, so connections made from it, and from
// those, would multiply them without end. What it holds open counts
// against the asking connection's limits (peer.from).
func (h *handle) Socket(ctx context.Context, call schema.Handle_socket) error {
	if err := h.live(); err != nil {
		return err
	}
	if h.p.direct {
		err := labels.Refuse("socket() is not served on a connection socket() made: ask the switchboard socket the supervisor holds")
		h.logDecision("socket", "", nil, "", false, err.Error())
		return err
	}
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	if err := h.p.acquireHandle(); err != nil {
		h.logDecision("socket", "", nil, "", false, err.Error())
		return err
	}
	mine, theirs, err := streamPair()
	if err != nil {
		h.p.releaseHandle()
		return err
	}
	fc, err := net.FileConn(mine)
	_ = mine.Close()
	if err != nil {
		_ = theirs.Close()
		h.p.releaseHandle()
		return err
	}
	seq, err := h.p.wc.SendOwned(theirs) // takes it
	if err != nil {
		_ = fc.Close()
		h.p.releaseHandle()
		return err
	}
	res.SetFd(seq)
	go func() {
		defer h.p.releaseHandle()
		h.p.srv.serveDirect(h, fc.(*net.UnixConn))
	}()
	return nil
}

// serveDirect serves uc, a connection Handle.socket made from parent,
// until it closes or its bootstrap handle is revoked. Its calls count
// against limits of its own, as an accepted connection's do, and what it
// holds open against parent's connection's; its log
// records name the asking peer (socket, pid, uid).
func (s *Server) serveDirect(parent *handle, uc *net.UnixConn) {
	wc := wire.NewConn(uc, false)
	pp := parent.p
	p := &peer{srv: s, socket: pp.socket + directSuffix, direct: true, from: pp, wc: wc, pid: pp.pid, uid: pp.uid, lim: s.cfg.Limits, flow: flowcontrol.NewFixedLimiter(s.cfg.Limits.ConnWindow)}
	boot := p.newHandle(parent.labels, parent, false)
	conn := wc.RPCWith(capnp.Client(boot.client()), wire.Logger(s.log), wire.Limits{CallBytes: 2 * p.lim.Bytes})
	select {
	case <-conn.Done():
	case <-boot.ctx.Done():
	}
	_ = conn.Close()
	boot.revoke()
}
