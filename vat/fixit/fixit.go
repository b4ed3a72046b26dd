// Package fixit keeps the failure records behind the status page's Fix-it
// cards. A card carries only a record's random ref; the vat it acts on is
// read from the record, never from the card. Records live in memory, so a
// card made before a restart of toybox names nothing.
package fixit

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"toybox/labels"
)

// Record is one failure of one vat's wall.
type Record struct {
	// Ref names the record on its card: 128 random bits, in hex.
	Ref string
	// Vat is the vat the record is about.
	Vat labels.VatID
	// Code is the code the vat failed with ("sha256:…"): an upgrade
	// since makes the record stale.
	Code string
	// Reason is why its wall failed.
	Reason string
	// At is when the record was raised.
	At time.Time
}

// Records holds the current failure record of each vat. The zero value is
// ready to use. Safe for concurrent use.
type Records struct {
	mu    sync.Mutex
	byRef map[string]*Record
	byVat map[labels.VatID]*Record
}

// Raise returns the current record of vat for its failure with code and
// reason: the one raised before for the same failure, or a new one (which
// replaces any other record of the vat: an older card names nothing).
func (rs *Records) Raise(vat labels.VatID, code, reason string) Record {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byRef == nil {
		rs.byRef, rs.byVat = map[string]*Record{}, map[labels.VatID]*Record{}
	}
	if r := rs.byVat[vat]; r != nil {
		if r.Code == code && r.Reason == reason {
			return *r
		}
		delete(rs.byRef, r.Ref)
	}
	r := &Record{Ref: newRef(), Vat: vat, Code: code, Reason: reason, At: time.Now()}
	rs.byRef[r.Ref] = r
	rs.byVat[vat] = r
	return *r
}

// Settle forgets vat's record: it no longer fails (it runs, it was
// removed, its owner chose).
func (rs *Records) Settle(vat labels.VatID) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if r := rs.byVat[vat]; r != nil {
		delete(rs.byRef, r.Ref)
		delete(rs.byVat, vat)
	}
}

// Take returns the record ref names and forgets it: a card acts once. ok
// is false for a ref no record has (forged, used, replaced, or from
// before a restart).
func (rs *Records) Take(ref string) (Record, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.byRef[ref]
	if r == nil {
		return Record{}, false
	}
	delete(rs.byRef, ref)
	delete(rs.byVat, r.Vat)
	return *r, true
}

func newRef() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
