package supervisor

import (
	"time"

	"toybox/labels"
	"toybox/vat/grant"
)

// Observer is told what the supervisor does, for the operator's view (the
// status page and the metrics). Its methods must not block.
type Observer interface {
	// Decided is one egress decision of vat id.
	Decided(id string, d grant.Decision)
	// Spawned is one spawn of vat id: it listened after d (ok), or it
	// ended or timed out before listening.
	Spawned(id string, d time.Duration, ok bool)
	// Installed is one install or upgrade of vat id, from the first byte
	// of its code to its answer.
	Installed(id string, d time.Duration, ok bool)
}

type noObserver struct{}

func (noObserver) Decided(string, grant.Decision)        {}
func (noObserver) Spawned(string, time.Duration, bool)   {}
func (noObserver) Installed(string, time.Duration, bool) {}

func (s *Supervisor) observer() Observer {
	if s.cfg.Observer == nil {
		return noObserver{}
	}
	return s.cfg.Observer
}

// onDecision is the OnDecision of vat id's grant.
func (s *Supervisor) onDecision(id string) func(grant.Decision) {
	o := s.observer()
	return func(d grant.Decision) { o.Decided(id, d) }
}

// tookGrant records gv as the grant of v's running spawn, made from g. A
// grant changed meanwhile (Regrant, between the spawn's read of it and
// now) is applied to it at once.
func (s *Supervisor) tookGrant(v *vat, gv *grant.Vat, g []labels.Set) {
	v.mu.Lock()
	v.gv = gv
	cur := v.grant
	v.mu.Unlock()
	if !sameGrant(cur, g) {
		if err := gv.SetGrants(cur); err != nil {
			s.log.Warn("applying the changed grant to a new spawn", keyVat, v.id, keyErr, err)
		}
	}
}

func sameGrant(a, b []labels.Set) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// RelayedSockets returns how many connections of vat id's app the
// supervisor relays now (0 for a vat it does not know).
func (s *Supervisor) RelayedSockets(id labels.VatID) int64 {
	v, ok := s.get(id)
	if !ok {
		return 0
	}
	v.mu.Lock()
	gv := v.gv
	v.mu.Unlock()
	if gv == nil {
		return 0
	}
	return gv.Sockets()
}
