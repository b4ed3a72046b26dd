// Package switches decides whether a vat runs inside its wall. The kill
// switch (TOYBOX_WALLS=off), the per-host default (TOYBOX_WALLS_DEFAULT),
// the operator's table (approved commands, shared host resources, state
// folders; a root-owned file) and the owner's choice per vat
// (<state>/walls.json, mode 0600) are read here and nowhere else, in that
// order. Nothing a vat can write is consulted.
package switches

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"toybox/vat/atomicfile"

	"toybox/vat/words"
)

// FileName is the owner's choices file inside the state directory.
const FileName = "walls.json"

// Config is what cmd/ read from the environment.
type Config struct {
	// Kill is the value of TOYBOX_WALLS. "off" turns every wall off;
	// "" or "on" leaves them to the next rules. Anything else is an error.
	Kill string
	// Default is the value of TOYBOX_WALLS_DEFAULT: "" or "walled" (walls
	// on), "off" (not walled on this computer). Anything else is an error.
	Default string
	// StateDir holds walls.json. If empty, no owner choice is ever found
	// and SetChoice fails.
	StateDir string
	// Table is the operator's table (LoadTable). If nil, nothing is
	// approved, shared or kept as state.
	Table *Table
	// NoBwrap reports whether this computer has no bubblewrap to run,
	// asked at every decision. If nil, it has.
	NoBwrap func() bool
}

// Decision is whether one vat runs walled, and the word that says why not.
type Decision struct {
	Walled bool
	// Off: it cannot run at all (walls are on and there is no bubblewrap);
	// Word says so and Reason holds the fix.
	Off bool
	// Word is the status word when not walled, or off (zero when walled:
	// the wall's tier decides the word then).
	Word   words.Word
	Reason string
}

// Inputs are the switches for one vat: pure values.
type Inputs struct {
	Kill        bool // TOYBOX_WALLS=off
	HostOff     bool // TOYBOX_WALLS_DEFAULT=off
	NoBwrap     bool // this computer has no bubblewrap
	Approved    bool // the operator's table approves its code
	OwnerUnwall bool // walls.json says this vat runs without its wall
}

// NoBwrapFix is the reason a vat stays off on a computer without
// bubblewrap.
const NoBwrapFix = "bubblewrap is not installed on this computer (fix: apt-get install bubblewrap, then restart toybox; toybox doctor checks it)"

// Decide applies the order: kill switch, per-host default, approved
// commands, owner's choice, then walled, which needs bubblewrap.
func Decide(in Inputs) Decision {
	switch {
	case in.Kill:
		return Decision{Word: words.NotWalledOperator, Reason: "TOYBOX_WALLS=off (the kill switch) is set"}
	case in.HostOff && in.NoBwrap:
		return Decision{Word: words.NotWalledNoBwrap, Reason: "TOYBOX_WALLS_DEFAULT=off on this computer, which has no bubblewrap"}
	case in.HostOff:
		return Decision{Word: words.NotWalledHost, Reason: "TOYBOX_WALLS_DEFAULT=off on this computer"}
	case in.Approved:
		return Decision{Word: words.NotWalledApproved, Reason: "the operator approved its code to run without a wall"}
	case in.OwnerUnwall:
		return Decision{Word: words.NotWalledChoice, Reason: "the owner chose to run it without its wall"}
	case in.NoBwrap:
		return Decision{Off: true, Word: words.OffNoBwrap, Reason: NoBwrapFix}
	}
	return Decision{Walled: true, Reason: "walls are on"}
}

// Switches is the loaded configuration. Safe for concurrent use.
type Switches struct {
	kill, hostOff bool
	stateDir      string
	table         *Table
	noBwrap       func() bool
	mu            sync.Mutex // serialises writes of walls.json

	// known is the digest of walls.json as toybox last read (for
	// ChangedOutside) or wrote it; outside is set when the file was
	// found changed since, by something else (guarded by mu).
	known   string
	knownOK bool
	outside bool
}

// New validates cfg.
func New(cfg Config) (*Switches, error) {
	s := &Switches{stateDir: cfg.StateDir, table: cfg.Table, noBwrap: cfg.NoBwrap}
	switch cfg.Kill {
	case "", "on":
	case "off":
		s.kill = true
	default:
		return nil, fmt.Errorf("TOYBOX_WALLS=%q: %w (want off, on or unset)", cfg.Kill, ErrBadSwitch)
	}
	switch cfg.Default {
	case "", "walled", "on":
	case "off":
		s.hostOff = true
	default:
		return nil, fmt.Errorf("TOYBOX_WALLS_DEFAULT=%q: %w (want walled, off or unset)", cfg.Default, ErrBadSwitch)
	}
	return s, nil
}

// Shares returns the shared host resources vat id holds (the operator's
// table), in the table's order.
func (s *Switches) Shares(id string) []Share {
	if s.table == nil {
		return nil
	}
	var out []Share
	for _, sh := range s.table.Shares {
		if slices.Contains(sh.Vats, id) {
			out = append(out, sh)
		}
	}
	return out
}

// StateFolders returns the host folders vat id keeps state in (the
// operator's table).
func (s *Switches) StateFolders(id string) []string {
	if s.table == nil {
		return nil
	}
	return slices.Clone(s.table.State[id])
}

// Approvals returns how many commands the operator's table approves.
func (s *Switches) Approvals() int { return s.table.Approvals() }

// HostWalled reports whether walls are on for this computer at all (neither
// the kill switch nor the per-host default turned them off); an owner may
// still have chosen to unwall a single vat.
func (s *Switches) HostWalled() bool { return !s.kill && !s.hostOff }

// file is walls.json.
type file struct {
	// Unwalled lists the vats their owner chose to run without a wall.
	Unwalled []string `json:"unwalled"`
	// Notices holds the markers of notices sent once per computer, with
	// when each went out.
	Notices map[string]time.Time `json:"notices,omitempty"`
}

// For decides for vat id running code ("sha256:<hex>"). A walls.json that
// cannot be read or parsed is an error: the caller keeps the vat off
// rather than guess.
func (s *Switches) For(id, code string) (Decision, error) {
	in := Inputs{Kill: s.kill, HostOff: s.hostOff, Approved: s.table.approves(code)}
	if s.noBwrap != nil {
		in.NoBwrap = s.noBwrap()
	}
	if !in.Kill && !in.HostOff && !in.Approved {
		f, err := s.load()
		if err != nil {
			return Decision{}, err
		}
		for _, u := range f.Unwalled {
			if u == id {
				in.OwnerUnwall = true
			}
		}
	}
	return Decide(in), nil
}

func (s *Switches) load() (file, error) {
	f, _, err := s.loadRaw()
	return f, err
}

// loadRaw reads and parses walls.json, and returns the digest of what it
// read ("" for no file).
func (s *Switches) loadRaw() (file, string, error) {
	var f file
	if s.stateDir == "" {
		return f, "", nil
	}
	b, err := os.ReadFile(filepath.Join(s.stateDir, FileName))
	if errors.Is(err, fs.ErrNotExist) {
		return f, "", nil
	}
	if err != nil {
		return f, "", fmt.Errorf("reading %s: %w", FileName, err)
	}
	d := digest(b)
	if err := json.Unmarshal(b, &f); err != nil {
		return f, d, fmt.Errorf("parsing %s: %w", FileName, err)
	}
	return f, d, nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// noteLocked takes the digest of walls.json as just read: one that is not
// what toybox last read or wrote means something else changed it.
func (s *Switches) noteLocked(d string) {
	if s.knownOK && d != s.known {
		s.outside = true
	}
	s.known, s.knownOK = d, true
}

// write writes f as walls.json (s.mu held) and remembers what it wrote.
func (s *Switches) write(f file) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := writeAtomic(filepath.Join(s.stateDir, FileName), b); err != nil {
		return err
	}
	s.known, s.knownOK = digest(b), true
	return nil
}

// ChangedOutside reports whether walls.json was changed by something other
// than toybox since the last call (or since toybox last wrote it). The
// first call only takes note of the file as it is. A vat reads the new
// settings the next time it starts.
func (s *Switches) ChangedOutside() (bool, error) {
	if s.stateDir == "" {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, d, err := s.loadRaw()
	if err != nil && d == "" {
		return false, err
	}
	s.noteLocked(d)
	changed := s.outside
	s.outside = false
	return changed, nil
}

// Marked reports whether the once-per-computer notice called name has gone
// out (walls.json holds its marker).
func (s *Switches) Marked(name string) (bool, error) {
	f, err := s.load()
	if err != nil {
		return false, err
	}
	_, ok := f.Notices[name]
	return ok, nil
}

// Mark records that the notice called name went out.
func (s *Switches) Mark(name string, at time.Time) error {
	if s.stateDir == "" {
		return ErrNoStateDir
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, d, err := s.loadRaw()
	if err != nil {
		return err
	}
	s.noteLocked(d)
	if f.Notices == nil {
		f.Notices = map[string]time.Time{}
	}
	f.Notices[name] = at.UTC()
	return s.write(f)
}

// Kill reports whether the kill switch is set.
func (s *Switches) Kill() bool { return s.kill }

// HostOff reports whether the per-host default keeps walls off.
func (s *Switches) HostOff() bool { return s.hostOff }

// SetChoice records the owner's choice for vat id: walled true removes it
// from the unwalled list. The file is written atomically with mode 0600,
// and not at all when the choice is already so.
func (s *Switches) SetChoice(id string, walled bool) error {
	if s.stateDir == "" {
		return ErrNoStateDir
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, d, err := s.loadRaw()
	if err != nil {
		return err
	}
	s.noteLocked(d)
	set := map[string]bool{}
	for _, u := range f.Unwalled {
		set[u] = true
	}
	if set[id] != walled {
		// Already so: nothing to write. A new copy needs room, and a
		// removal (which clears the choice) must work on a full disk.
		return nil
	}
	if walled {
		delete(set, id)
	} else {
		set[id] = true
	}
	f.Unwalled = f.Unwalled[:0]
	for u := range set {
		f.Unwalled = append(f.Unwalled, u)
	}
	sort.Strings(f.Unwalled)
	return s.write(f)
}

func writeAtomic(path string, b []byte) error {
	return atomicfile.WriteFile(path, b, 0o600)
}
