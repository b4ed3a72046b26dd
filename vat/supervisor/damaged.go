package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"toybox/vat/store"
	"toybox/vat/words"
)

// ErrUIDUnknown: a damaged record's uid cannot be learnt, so no uid can be
// given to a new vat (it might be that one).
var ErrUIDUnknown = errors.New("a damaged vat record's uid is unknown")

// damageText says what is wrong with vat d's record and how to repair it.
func (s *Supervisor) damageText(d store.Damaged, uids []int) string {
	p := filepath.Join("vats", string(d.ID)+".json")
	var b strings.Builder
	fmt.Fprintf(&b, "its record %s cannot be read (%v)", p, d.Err)
	if d.Good != nil {
		fmt.Fprintf(&b, "; it runs from the record's good copy %s.good (installed %s)", p, d.Good.Installed.Format("2006-01-02T15:04:05Z"))
	}
	switch {
	case len(uids) == 1:
		fmt.Fprintf(&b, "; its uid %d stays reserved", uids[0])
	case len(uids) > 1:
		fmt.Fprintf(&b, "; its uids %v stay reserved", uids)
	case s.cfg.UIDBase >= 0 && d.Good == nil:
		b.WriteString("; its uid is unknown, so no new vat is given one until this is repaired")
	}
	fmt.Fprintf(&b, ". Repair: fix %s (JSON: id, code, egress, env, installed, uid) and restart toybox, install the vat again (PUT /%s: its data and uid carry over), or remove it (DELETE /%s)", p, d.ID, d.ID)
	return b.String()
}

// reservedUIDs are the uids damaged record d held: those its bytes and good
// copy name and, under a root supervisor, the owner of its data folder when
// that is a vat's uid.
func (s *Supervisor) reservedUIDs(d store.Damaged) []int {
	uids := append([]int(nil), d.UIDs...)
	if s.cfg.UIDBase < 0 {
		return uids
	}
	if fi, err := os.Lstat(s.cfg.Store.DataDir(d.ID)); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			u := int(st.Uid)
			if u >= s.cfg.UIDBase && u < s.cfg.UIDBase+VatIDSpan && !containsInt(uids, u) {
				uids = append(uids, u)
			}
		}
	}
	return uids
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// loadDamaged takes in vat d, whose record cannot be read. With a good
// copy it returns that record to load as any other, and the text its status
// keeps. Without one it lists the vat, off (words.OffDamaged), its id and
// uids reserved, and returns nil.
func (s *Supervisor) loadDamaged(d store.Damaged) (*store.Record, string) {
	uids := s.reservedUIDs(d)
	text := s.damageText(d, uids)
	if d.Good != nil {
		s.log.Error("vat record damaged: running from its good copy", keyVat, d.ID, keyErr, d.Err)
		rec := *d.Good
		return &rec, text
	}
	s.log.Error("vat record damaged", keyVat, d.ID, keyErr, d.Err, keyReason, text)
	rec := store.Record{ID: d.ID}
	if len(uids) > 0 {
		rec.UID = uids[0]
	}
	if len(d.Codes) > 0 {
		rec.Code = d.Codes[0]
	}
	v := &vat{id: d.ID, logs: newRing(s.cfg.LogBytes), rec: rec, word: words.OffDamaged, damaged: text, lastError: text}
	v.reserved = uids
	v.uidUnknown = len(uids) == 0 && s.cfg.UIDBase >= 0
	v.keepCodes = d.Codes
	s.mu.Lock()
	s.vats[d.ID] = v
	s.mu.Unlock()
	return nil, ""
}

// takeDamaged is for an install over v, a vat whose record cannot be read:
// it returns the func that puts v back as it was, should the install fail
// (its record still damaged on disk).
func (s *Supervisor) takeDamaged(v *vat) func() {
	v.mu.Lock()
	rec, word, lastError, damaged := v.rec, v.word, v.lastError, v.damaged
	v.mu.Unlock()
	return func() {
		v.mu.Lock()
		v.rec, v.code, v.grant, v.dropped = rec, store.Code{}, nil, nil
		v.word, v.lastError, v.damaged = word, lastError, damaged
		v.pid, v.tier, v.doors = 0, "", nil
		v.mu.Unlock()
	}
}

// unreadable reports whether v's record cannot be read and has no good
// copy: nothing of it runs, so an install over it is a fresh one. The
// caller holds v.mu.
func (v *vat) unreadable() bool {
	return v.damaged != "" && v.code.Manifest == nil
}
