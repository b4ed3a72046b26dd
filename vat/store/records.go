package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"toybox/labels"
)

// goodSuffix names the good copy of a record: <state>/vats/<id>.json.good,
// written after each record the same way (atomically, 0600). When the
// record itself cannot be read, the good copy is what the vat runs from.
const goodSuffix = ".good"

// Damaged is an installed vat whose record cannot be read: a truncated or
// garbage <state>/vats/<id>.json, or one that names another vat. Its id
// stays taken and its uid reserved until its record is repaired, written
// again by an install, or removed.
type Damaged struct {
	// ID is the vat's id, from the file's name.
	ID labels.VatID
	// Err says why the record cannot be read.
	Err error
	// Good is the record's good copy (<id>.json.good), when there is one
	// that reads and names this vat; nil otherwise.
	Good *Record
	// UIDs are the host uids the record held as far as its bytes and its
	// good copy tell: each stays reserved. Empty when none can be learnt.
	UIDs []int
	// Codes are the code references ("sha256:<hex>") its bytes and its
	// good copy name: that code stays stored.
	Codes []string
}

// RecordPath is the path of the record of id.
func (s *Store) RecordPath(id labels.VatID) string {
	return filepath.Join(s.cfg.StateDir, "vats", string(id)+".json")
}

// SaveRecord writes <state>/vats/<id>.json atomically (0600), then its good
// copy. A good copy that cannot be written (a full disk) is removed and
// logged: the record itself is saved, and a good copy of the older state
// would name code Prune no longer keeps, or a grant the owner changed.
func (s *Store) SaveRecord(r Record) error {
	if err := recheck(r.ID); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	p := s.RecordPath(r.ID)
	if err := writeAtomic(p, b); err != nil {
		return err
	}
	if err := writeAtomic(p+goodSuffix, b); err != nil {
		rerr := os.Remove(p + goodSuffix)
		if rerr == nil || errors.Is(rerr, fs.ErrNotExist) {
			rerr = syncDir(filepath.Dir(p))
		}
		s.log.Warn("removing the good copy of a vat record: it cannot be written", "vat", r.ID, "err", errors.Join(err, rerr))
	}
	return nil
}

// DeleteRecord removes the record of id and its good copy (the code and
// data stay).
func (s *Store) DeleteRecord(id labels.VatID) error {
	if err := recheck(id); err != nil {
		return err
	}
	p := s.RecordPath(id)
	for _, f := range []string{p, p + goodSuffix} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return syncDir(filepath.Dir(p))
}

// ReadRecords is Records of the state dir stateDir, read without opening
// the store: no folder is made and nothing removed, so a reader beside a
// running supervisor (toybox doctor) may call it.
func ReadRecords(stateDir string) ([]Record, []Damaged, error) {
	return (&Store{cfg: Config{StateDir: stateDir}}).Records()
}

// Records lists every installed vat: the records that read, and the vats
// whose record cannot be read (damaged), with what could be learnt of them.
// A damaged record is never skipped: its vat is still installed. The error
// is for the folder itself, or a file there that names no vat id.
func (s *Store) Records() ([]Record, []Damaged, error) {
	dir := filepath.Join(s.cfg.StateDir, "vats")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var out []Record
	var bad []Damaged
	var errs []error
	for _, e := range ents {
		name := e.Name()
		base, ok := strings.CutSuffix(name, ".json")
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		id, err := labels.ParseVatID(base) // a file's name is where a vat id enters from disk
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w: %w", name, ErrBadID, err))
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			var r Record
			if r, err = readRecord(id, b); err == nil {
				out = append(out, r)
				continue
			}
		}
		bad = append(bad, s.damaged(id, b, err))
	}
	return out, bad, errors.Join(errs...)
}

// readRecord decodes b, the record of id.
func readRecord(id labels.VatID, b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, err
	}
	if r.ID != id {
		return Record{}, fmt.Errorf("%w: it names vat %q", ErrBadID, r.ID)
	}
	return r, nil
}

var (
	// A uid the bytes name in full: followed by what ends a JSON number
	// (a record cut inside the number names another uid).
	uidRe  = regexp.MustCompile(`"uid"\s*:\s*([0-9]{1,10})\s*[,}\s]`)
	codeRe = regexp.MustCompile(`sha256:[0-9a-f]{64}`)
)

// damaged is what can be learnt of vat id, whose record (b) cannot be read
// for err.
func (s *Store) damaged(id labels.VatID, b []byte, err error) Damaged {
	d := Damaged{ID: id, Err: err}
	uids := map[int]bool{}
	codes := map[string]bool{}
	for _, m := range uidRe.FindAllSubmatch(b, -1) {
		if n, err := strconv.Atoi(string(m[1])); err == nil && n > 0 {
			uids[n] = true
		}
	}
	for _, m := range codeRe.FindAll(b, -1) {
		codes[string(m)] = true
	}
	if gb, err := os.ReadFile(s.RecordPath(id) + goodSuffix); err == nil {
		if g, err := readRecord(id, gb); err == nil {
			d.Good = &g
			if g.UID > 0 {
				uids[g.UID] = true
			}
			if g.Code != "" {
				codes[g.Code] = true
			}
		}
	}
	for u := range uids {
		d.UIDs = append(d.UIDs, u)
	}
	sort.Ints(d.UIDs)
	for c := range codes {
		d.Codes = append(d.Codes, c)
	}
	sort.Strings(d.Codes)
	return d
}

// Orphans lists the ids whose data or runtime folder is left with no
// record (removed vats; an earlier version kept them under their uids). A
// damaged record is a record: its folders are not orphans. A folder whose
// name is no vat id is no vat's, and is left alone.
func (s *Store) Orphans() ([]labels.VatID, error) {
	recs, bad, err := s.Records()
	if err != nil {
		return nil, err
	}
	have := map[labels.VatID]bool{}
	for _, r := range recs {
		have[r.ID] = true
	}
	for _, d := range bad {
		have[d.ID] = true
	}
	seen := map[labels.VatID]bool{}
	var out []labels.VatID
	for _, dir := range []string{filepath.Join(s.cfg.StateDir, "data"), filepath.Join(s.cfg.StateDir, "run")} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if id, err := labels.ParseVatID(e.Name()); err == nil && !have[id] && !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out, nil
}
