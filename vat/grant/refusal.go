package grant

import (
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
)

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
func (v *Vat) refused(op, target, reason string) {
	v.log.Info(decisionMsg, keyOp, op, keyTarget, target, keyAllow, false, keyReason, reason, "by", "supervisor")
	v.last.set(Refusal{Time: time.Now(), Op: op, Target: target, Reason: reason, By: "supervisor"})
}

// noteRefusal keeps a refusal the switchboard decided (and logged) as
// the vat's last; err is what the relay returns for it.
func (v *Vat) noteRefusal(op, target string, err error) {
	reason, ok := labels.RefusalReason(err)
	if !ok {
		return
	}
	v.last.set(Refusal{Time: time.Now(), Op: op, Target: target, Reason: reason, By: "switchboard"})
}

// requestTarget writes r as the records write a target: scheme://host:port.
func requestTarget(r labels.Request) string { return Decision{Target: r}.TargetText() }
