package wire

import (
	"fmt"

	"capnproto.org/go/capnp/v3"
	rpccp "capnproto.org/go/capnp/v3/std/capnp/rpc"
)

// Cap'n Proto pointers may alias: a few hundred bytes can describe a DAG
// whose deep copy is tens of MiB. go-capnp reads a message within its
// traversal limit, 64 MiB whatever the message's size, and answers a
// message it does not implement with an unimplemented one holding a deep
// copy of it: a vat that sent eight such messages of 536 bytes, and read
// nothing, grew the supervisor by 264 MiB. So the guard ends the
// connection of a peer that sends one (unserved), and ties what any
// reader may traverse of a message to the message's size (readLimit).

// What all the readers of one of the peer's messages may traverse of it,
// in all: the guard, go-capnp, the server its call is for, and a copy of
// its arguments for a call go-capnp passes on to another connection. Each
// struct or list read counts its size, each time it is read, and a list
// of empty structs counts a word for each element. A message read once,
// whole, counts its size. Measured over the tests of the supervisor's
// grants and doors, the switchboard and toybox-entry (62,575 messages):
// at most 1.2 times the size of a message over 512 bytes, and 695 bytes
// for a smaller one.
const (
	readFactor = 3       // two and a half times the most a large message was read
	readFloor  = 4 << 10 // six times the most a small message was read: its envelope (a Call and its parts), looked at again and again
)

// readLimit is what the readers of a message of size bytes may traverse.
func readLimit(size uint64) uint64 { return readFactor*size + readFloor }

// setReadLimit ties what may be read of msg to its size. A message with
// no root (nil) has nothing to read.
func setReadLimit(msg *capnp.Message) {
	if msg == nil {
		return
	}
	size, err := msg.TotalSize()
	if err != nil {
		size = 0 // a message whose segments cannot be read cannot be read
	}
	msg.ResetReadLimit(readLimit(size))
}

// unserved says what in m this side does not serve, or "" when it serves
// all of it: a message type of level 3 or 4 (provide, accept, join,
// thirdPartyAnswer), an obsolete one (save, delete), a union value this
// schema does not know, or results sent elsewhere than to the caller. For
// each, go-capnp v3.1.0-alpha.2 either sends back a deep copy of the
// message, or of the call or disembargo in it, or takes a third-party
// descriptor for one of the peer's own. No peer of toybox has any need of
// them: nothing here ever asks for them. unimplemented, abort, bootstrap,
// finish and release are served whole; a return's canceled, which a C++
// peer sends, is taken as an error. The parts go-capnp cannot read are
// left to it: it says what is wrong with them.
func unserved(m rpccp.Message) string {
	switch w := m.Which(); w {
	case rpccp.Message_Which_unimplemented, rpccp.Message_Which_abort, rpccp.Message_Which_bootstrap,
		rpccp.Message_Which_finish, rpccp.Message_Which_release:
		return ""
	case rpccp.Message_Which_call:
		c, err := m.Call()
		if err != nil {
			return ""
		}
		if s := c.SendResultsTo().Which(); s != rpccp.Call_sendResultsTo_Which_caller {
			return fmt.Sprintf("a call whose results go to %s", s)
		}
		if t, err := c.Target(); err == nil {
			if why := unservedTarget(t); why != "" {
				return "a call to " + why
			}
		}
		if p, err := c.Params(); err == nil {
			return unservedPayload(p)
		}
	case rpccp.Message_Which_return:
		r, err := m.Return()
		if err != nil {
			return ""
		}
		switch r.Which() {
		case rpccp.Return_Which_results:
			if p, err := r.Results(); err == nil {
				return unservedPayload(p)
			}
		case rpccp.Return_Which_exception, rpccp.Return_Which_canceled:
		default:
			return fmt.Sprintf("a return of %s", r.Which())
		}
	case rpccp.Message_Which_resolve:
		r, err := m.Resolve()
		if err != nil {
			return ""
		}
		switch r.Which() {
		case rpccp.Resolve_Which_cap:
			if d, err := r.Cap(); err == nil {
				return unservedDescriptor(d)
			}
		case rpccp.Resolve_Which_exception:
		default:
			return fmt.Sprintf("a resolve to %s", r.Which())
		}
	case rpccp.Message_Which_disembargo:
		d, err := m.Disembargo()
		if err != nil {
			return ""
		}
		switch x := d.Context().Which(); x {
		case rpccp.Disembargo_context_Which_senderLoopback, rpccp.Disembargo_context_Which_receiverLoopback:
		default:
			return fmt.Sprintf("a disembargo of context %s", x)
		}
		if t, err := d.Target(); err == nil {
			if why := unservedTarget(t); why != "" {
				return "a disembargo of " + why
			}
		}
	default:
		return fmt.Sprintf("a %s message", w)
	}
	return ""
}

// unservedTarget says what of t is not served, or "".
func unservedTarget(t rpccp.MessageTarget) string {
	switch t.Which() {
	case rpccp.MessageTarget_Which_importedCap:
		return ""
	case rpccp.MessageTarget_Which_promisedAnswer:
		if pa, err := t.PromisedAnswer(); err == nil {
			return unservedOps(pa)
		}
		return ""
	default:
		return fmt.Sprintf("a target of %s", t.Which())
	}
}

// unservedOps says which op of a promised answer's transform is not
// served, or "". The guard has bounded the transform's length already.
func unservedOps(pa rpccp.PromisedAnswer) string {
	ops, err := pa.Transform()
	if err != nil {
		return ""
	}
	for i := 0; i < ops.Len(); i++ {
		switch op := ops.At(i).Which(); op {
		case rpccp.PromisedAnswer_Op_Which_noop, rpccp.PromisedAnswer_Op_Which_getPointerField:
		default:
			return fmt.Sprintf("a promised answer with an op of %s", op)
		}
	}
	return ""
}

// unservedPayload says which capability of p's table is not served, or "".
// The guard has bounded the table's length already (Limits.Caps).
func unservedPayload(p rpccp.Payload) string {
	table, err := p.CapTable()
	if err != nil {
		return ""
	}
	for i := 0; i < table.Len(); i++ {
		if why := unservedDescriptor(table.At(i)); why != "" {
			return why
		}
	}
	return ""
}

// unservedDescriptor says what of d is not served, or "".
func unservedDescriptor(d rpccp.CapDescriptor) string {
	switch d.Which() {
	case rpccp.CapDescriptor_Which_none, rpccp.CapDescriptor_Which_senderHosted, rpccp.CapDescriptor_Which_senderPromise,
		rpccp.CapDescriptor_Which_receiverHosted:
		return ""
	case rpccp.CapDescriptor_Which_receiverAnswer:
		if pa, err := d.ReceiverAnswer(); err == nil {
			return unservedOps(pa)
		}
		return ""
	default:
		return fmt.Sprintf("a capability of kind %s", d.Which())
	}
}
