package doors

import (
	"fmt"
	"strings"

	"toybox/labels"
)

// CheckManifest decides, at install, whether vat vatID's manifest may name
// the door sets in named (its "doors" key). It is pure: no I/O, no logging.
//
// A manifest may name only its own id's set, once; never another vat's set,
// never an entry of its own (entries live in the operator's table). A vat that
// is not first-party in the table, or has no set there, may name no door at
// all. Naming nothing is always allowed. The error wraps ErrInstallRefused
// and says why.
func (t *Table) CheckManifest(vatID labels.VatID, named []string) error {
	if len(named) == 0 {
		return nil
	}
	if len(named) > 1 {
		return fmt.Errorf("%w: vat %s names %d door sets; a manifest may name only its own (\"doors\": [%q])", ErrInstallRefused, vatID, len(named), vatID)
	}
	name := named[0]
	if name != string(vatID) {
		if strings.ContainsAny(name, " /") {
			return fmt.Errorf("%w: vat %s names %q: a manifest cannot add door entries; door sets live in the operator's table, and a manifest may name only its own (%q)", ErrInstallRefused, vatID, clip(name), vatID)
		}
		return fmt.Errorf("%w: vat %s names the door set %q, which is not its own; a manifest may name only its own (%q)", ErrInstallRefused, vatID, clip(name), vatID)
	}
	s, ok := t.Set(string(vatID))
	if !ok {
		return fmt.Errorf("%w: vat %s names a door set, but the operator's door table has none for it: doors are for first-party vats only", ErrInstallRefused, vatID)
	}
	if !s.FirstParty {
		return fmt.Errorf("%w: vat %s is not first-party in the operator's door table: doors are for first-party vats only", ErrInstallRefused, vatID)
	}
	return nil
}
