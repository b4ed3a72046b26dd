package supervisor

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"

	"toybox/labels"
	"toybox/vat/grant"
	"toybox/vat/manifest"
)

// Regrant sets vat id's egress grant (the owner's ?egress=, "" for the
// manifest's alone) and applies it to the running vat without a restart:
// its Handles judge every later call by the new grant, and the connections
// the new grant does not admit are shut (grant.Vat.SetGrants). A change
// that changes the wall itself (from no grant to one, or back, or a
// forwarded loopback port) restarts the vat instead, and restarted says so;
// so does a switchboard that does not confirm the old handles' revocation
// in time (grant.ErrRevokeUnconfirmed). The record is saved first: a grant that cannot be saved changes nothing.
func (s *Supervisor) Regrant(id labels.VatID, egress string) (st Status, restarted bool, err error) {
	v, err := s.lockVat(id, false)
	if err != nil {
		return Status{}, false, err
	}
	unlock := v.op.Unlock
	defer func() { unlock() }()
	v.mu.Lock()
	code, rec, oldG, damaged := v.code, v.rec, v.grant, v.damaged
	v.mu.Unlock()
	if damaged != "" {
		return s.status(v), false, fmt.Errorf("%w: vat %s: %s", ErrBadInput, id, damaged)
	}
	if code.Manifest == nil {
		return s.status(v), false, fmt.Errorf("%w: vat %s has no loadable code", ErrBadInput, id)
	}
	if _, err := s.checkGrant(id, code.Manifest, egress); err != nil {
		return Status{}, false, err
	}
	g, dropped, err := s.grantFor(code, egress)
	if err != nil {
		return Status{}, false, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	rec.Egress = egress
	if err := s.cfg.Store.SaveRecord(rec); err != nil {
		return Status{}, false, fmt.Errorf("saving the vat record: %w", err)
	}
	s.logDropped(string(id), dropped)
	v.mu.Lock()
	v.rec, v.grant, v.dropped = rec, g, dropped
	gv := v.gv
	v.mu.Unlock()
	s.log.Info("egress grant changed", keyVat, id, "grant", fmt.Sprint(g))
	if !reflect.DeepEqual(code.Manifest.Net(oldG), code.Manifest.Net(g)) {
		unlock()
		unlock = func() {}
		st, err := s.Restart(id)
		return st, true, err
	}
	if gv != nil {
		switch err := gv.SetGrants(g); {
		case errors.Is(err, grant.ErrRevokeUnconfirmed):
			// What the old grant made may stand until the switchboard
			// gets to it: the wall goes, and with it every connection
			// its entry and app hold.
			s.log.Warn("the old grant's revocation is unconfirmed: the wall starts again", keyVat, id, keyErr, err)
			unlock()
			unlock = func() {}
			st, err := s.Restart(id)
			return st, true, err
		case err != nil:
			// The spawn that held it has ended: the next one is
			// made from the new grant.
			s.log.Info("the grant changed while its spawn ended", keyVat, id, keyErr, err)
		}
	}
	return s.status(v), false, nil
}

// RegrantResult is what PATCH /<vat> answers.
type RegrantResult struct {
	Status
	// Restarted says the change needed a new wall (a way out where there
	// was none, or none where there was one, or another forwarded port).
	Restarted bool `json:"restarted"`
}

// handleRegrant serves PATCH /<vat>?egress=<grant> (and PUT with only
// ?egress= and no body).
func (s *Supervisor) handleRegrant(w http.ResponseWriter, r *http.Request, id labels.VatID) {
	q := r.URL.Query()
	if err := onlyParams(q, "egress"); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	if !q.Has("egress") {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: a grant change needs ?egress= (empty: the manifest's alone)", ErrBadInput))
		return
	}
	egress := q.Get("egress")
	if egress != "" {
		if _, err := labels.ParseGrant(egress); err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: %w: egress: %w", ErrBadInput, manifest.ErrBadGrant, err))
			return
		}
	}
	st, restarted, err := s.Regrant(id, egress)
	if err != nil {
		writeErr(w, statusFor(err), err)
		return
	}
	writeJSON(w, http.StatusOK, RegrantResult{Status: st, Restarted: restarted})
}

// onlyEgress reports whether a PUT is a grant change: no body, and no
// parameter but egress.
func onlyEgress(r *http.Request) bool {
	if r.ContentLength != 0 {
		return false
	}
	q := r.URL.Query()
	return len(q) == 1 && q.Has("egress")
}
