package switchboard

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"toybox/labels"
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
	keyUnlogged  = "unlogged"
	// keyUnloggedAllowed counts the allowed decisions not logged since
	// the peer's last record.
	keyUnloggedAllowed = "unlogged_allowed"
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
	unlogged, unloggedAllowed, ok := h.p.decisionLog(allow, time.Now())
	if !ok {
		return // counted: the peer's next record says how many
	}
	reason = strings.TrimPrefix(reason, labels.RefusedPrefix)
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
	if unlogged > 0 {
		r.AddAttrs(slog.Int(keyUnlogged, unlogged))
	}
	if unloggedAllowed > 0 {
		r.AddAttrs(slog.Int(keyUnloggedAllowed, unloggedAllowed))
	}
	_ = hd.Handle(ctx, r)
}

// One peer's refusals are logged at most refusalsPerWindow per
// refusalWindow, and its allowed decisions at most allowedPerWindow, each
// kind against its own count: a storm of one never costs the other its
// records. Past that they are counted, and the peer's next record says how
// many of each went unlogged (unlogged, unlogged_allowed), as does the
// record of its end. A vat looping on refused checks made 7500 records a
// second, past journald's default rate limit for the unit, which would drop
// every other vat's records; one in a storm of allowed connects made
// 0.5 MiB of them a second.
const (
	refusalWindow     = 5 * time.Second
	refusalsPerWindow = 100
	allowedPerWindow  = 100
)

// decisionLog reports whether a decision gets its record, and how many of
// the peer's refusals and allowed decisions went unlogged before it (given
// back once).
func (p *peer) decisionLog(allow bool, now time.Time) (unlogged, unloggedAllowed int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Sub(p.refusalsFrom) >= refusalWindow {
		p.refusalsFrom, p.refusals, p.allowed = now, 0, 0
	}
	if allow {
		if p.allowed >= allowedPerWindow {
			p.unloggedAllowed++
			return 0, 0, false
		}
		p.allowed++
	} else {
		if p.refusals >= refusalsPerWindow {
			p.unlogged++
			return 0, 0, false
		}
		p.refusals++
	}
	unlogged, p.unlogged = p.unlogged, 0
	unloggedAllowed, p.unloggedAllowed = p.unloggedAllowed, 0
	return unlogged, unloggedAllowed, true
}

// logURL is how a request's or a WebSocket's URL is named in the log:
// scheme://host:port/path, the port said even when it is the scheme's
// default (as connect's and check's targets are). Userinfo, query and
// fragment are left out: they carry credentials (user:pass@, ?key=) the
// journal must not keep. A URL that does not read as an absolute URL is
// named by a placeholder, never by its text.
func logURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" || u.Host == "" {
		return fmt.Sprintf("(unparsable URL, %d bytes)", len(raw))
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		scheme := u.Scheme
		switch scheme {
		case "ws":
			scheme = "http"
		case "wss":
			scheme = "https"
		}
		if p := labels.DefaultPort(scheme); p != 0 {
			port = strconv.Itoa(int(p))
		}
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return u.Scheme + "://" + host + u.EscapedPath()
}
