package switchboard

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"time"
)

// Log attribute keys: constant, one record per decision.
const (
	keySocket    = "socket"
	keyPeerPID   = "peer_pid"
	keyPeerUID   = "peer_uid"
	keyLabels    = "labels"
	keyOp        = "op"
	keyTarget    = "target"
	keyAddresses = "addresses"
	keyVetted    = "vetted"
	keyAllow     = "allow"
	keyReason    = "reason"
)

// logDecision writes the one record of a decision. The record goes to the
// handler directly: Logger.LogAttrs would also walk the stack for a source
// position no handler here prints.
func (h *handle) logDecision(op, target string, addrs []netip.Addr, vetted string, allow bool, reason string) {
	ctx := context.Background()
	hd := h.p.srv.log.Handler()
	if !hd.Enabled(ctx, slog.LevelInfo) {
		return
	}
	reason = strings.TrimPrefix(reason, RefusedPrefix)
	as := make([]string, len(addrs))
	for i, a := range addrs {
		as[i] = a.String()
	}
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "egress decision", 0)
	r.AddAttrs(
		slog.String(keySocket, h.p.socket),
		slog.Int64(keyPeerPID, int64(h.p.pid)),
		slog.Int64(keyPeerUID, int64(h.p.uid)),
		slog.String(keyLabels, h.text),
		slog.String(keyOp, op),
		slog.String(keyTarget, target),
		slog.Any(keyAddresses, as),
		slog.String(keyVetted, vetted),
		slog.Bool(keyAllow, allow),
		slog.String(keyReason, reason),
	)
	_ = hd.Handle(ctx, r)
}
