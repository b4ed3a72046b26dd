package grant

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"toybox/labels"
)

// Refusal is an egress refusal of a vat's: where it was decided (the
// supervisor, on the vat's grant, or the switchboard), what was asked
// and why not.
type Refusal struct {
	Time   time.Time `json:"time"`
	Op     string    `json:"op"`
	Target string    `json:"target"`
	Reason string    `json:"reason"`
	By     string    `json:"by"` // "supervisor" or "switchboard"
}

// Log keys of a decision's record: the switchboard's and toybox-entry's.
const (
	decisionMsg = "egress decision"
	keyOp       = "op"
	keyTarget   = "target"
	keyAllow    = "allow"
	keyReason   = "reason"
	keyUnlogged = "unlogged"
)

// A vat's refusals are logged at most refusalLogRate a second after a
// burst of refusalLogBurst (tokens.Records): a vat that loops on refused
// calls cannot fill the disk, or push the other vats' records past
// journald's rate limit for the unit. The next record says how many were
// not logged.
const (
	refusalLogRate  = 20
	refusalLogBurst = 100
)

// maxKeptBytes bounds a decision's target and reason as the supervisor
// keeps and logs them: a reason quotes what the vat asked for (a URL, a
// scheme), which a call may make megabytes long, and 50 decisions are kept
// per vat (package activity).
const maxKeptBytes = 512

// clip returns s cut to maxKeptBytes, saying how many bytes it dropped.
func clip(s string) string {
	if len(s) <= maxKeptBytes {
		return s
	}
	return fmt.Sprintf("%s... (%d more bytes not kept)", strings.ToValidUTF8(s[:maxKeptBytes], ""), len(s)-maxKeptBytes)
}

// lastRefusal is a vat's most recent Refusal.
type lastRefusal struct {
	mu sync.Mutex
	r  Refusal
}

func (l *lastRefusal) set(r Refusal) {
	l.mu.Lock()
	l.r = r
	l.mu.Unlock()
}

// LastRefusal returns the vat's most recent refusal, and false if it has
// had none.
func (v *Vat) LastRefusal() (Refusal, bool) {
	v.last.mu.Lock()
	defer v.last.mu.Unlock()
	return v.last.r, !v.last.r.Time.IsZero()
}

// refused logs a refusal the supervisor decided (no member of the grant
// admits the target), one record with the keys the switchboard's and the
// entry's records use, and keeps it as the vat's last.
// Past the vat's rate of records the refusal is counted instead, and the
// next record says how many went unlogged.
func (v *Vat) refused(op, target, reason string) {
	target, reason = clip(target), clip(reason)
	if ok, unlogged := v.refusals.Admit(time.Now()); ok {
		attrs := []any{keyOp, op, keyTarget, target, keyAllow, false, keyReason, reason, "by", "supervisor"}
		if unlogged > 0 {
			attrs = append(attrs, keyUnlogged, unlogged)
		}
		v.log.Info(decisionMsg, attrs...)
	}
	v.last.set(Refusal{Time: time.Now(), Op: op, Target: target, Reason: reason, By: "supervisor"})
}

// noteRefusal keeps a refusal the switchboard decided (and logged) as
// the vat's last; err is what the relay returns for it.
func (v *Vat) noteRefusal(op, target string, err error) {
	reason, ok := labels.RefusalReason(err)
	if !ok {
		return
	}
	v.last.set(Refusal{Time: time.Now(), Op: op, Target: clip(target), Reason: clip(reason), By: "switchboard"})
}

// requestTarget writes r as the records write a target: scheme://host:port.
func requestTarget(r labels.Request) string { return Decision{Target: r}.TargetText() }
