package wire

import (
	"context"

	"capnproto.org/go/capnp/v3/flowcontrol"
)

// StreamLimiter returns the flow limiter for one stream written to a peer:
// at most window bytes of the stream's own writes in flight, and, together
// with every other stream limited by shared, at most what shared allows.
// A stream whose reader has stopped holds only its own window of shared, so
// the connection's other streams go on until several have stopped; shared
// still bounds what one connection can leave queued at the peer.
//
// A message larger than window (a WebSocket message may be 16 MiB) counts
// as one whole window: it goes alone. shared must be at least window (a
// fixed limiter panics on a message larger than itself, which ended the
// switchboard on a 2 MiB WebSocket message).
//
// Every message counts for at least MessageCost, whatever its size.
func StreamLimiter(shared flowcontrol.FlowLimiter, window int64) flowcontrol.FlowLimiter {
	return &streamLimiter{own: flowcontrol.NewFixedLimiter(window), shared: shared, window: uint64(window)}
}

// MessageCost is the least one message counts for against a stream's
// window and the shared one: about what go-capnp holds for a call in
// flight whatever its payload (its question, message and answer; ~7 KiB
// each, measured in the switchboard). Counted by its bytes alone, an empty
// WebSocket message took 128 bytes of a 1 MiB window, so a stream whose
// reader never answered held 8,192 calls in flight (~60 MiB of the
// writer's memory) and a connection's 8 MiB window ten times that.
const MessageCost = 8 << 10

type streamLimiter struct {
	own, shared flowcontrol.FlowLimiter
	window      uint64
}

// StartMessage takes room in the stream's own window first, so a stream
// waiting on its own reader never holds any of shared.
func (l *streamLimiter) StartMessage(ctx context.Context, size uint64) (func(), error) {
	size = min(max(size, MessageCost), l.window)
	ownDone, err := l.own.StartMessage(ctx, size)
	if err != nil {
		return nil, err
	}
	sharedDone, err := l.shared.StartMessage(ctx, size)
	if err != nil {
		ownDone()
		return nil, err
	}
	return func() {
		sharedDone()
		ownDone()
	}, nil
}

// Release releases the stream's own limiter; shared belongs to whoever made
// it.
func (l *streamLimiter) Release() { l.own.Release() }
