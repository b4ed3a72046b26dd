package switchboard

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
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

// logDecision writes the one record of a decision.
func (h *handle) logDecision(op, target string, addrs []netip.Addr, vetted string, allow bool, reason string) {
	reason = strings.TrimPrefix(reason, RefusedPrefix)
	as := make([]string, len(addrs))
	for i, a := range addrs {
		as[i] = a.String()
	}
	h.p.srv.log.LogAttrs(context.Background(), slog.LevelInfo, "egress decision",
		slog.String(keySocket, h.p.socket),
		slog.Int64(keyPeerPID, int64(h.p.pid)),
		slog.Int64(keyPeerUID, int64(h.p.uid)),
		slog.String(keyLabels, h.labels.String()),
		slog.String(keyOp, op),
		slog.String(keyTarget, target),
		slog.Any(keyAddresses, as),
		slog.String(keyVetted, vetted),
		slog.Bool(keyAllow, allow),
		slog.String(keyReason, reason),
	)
}
