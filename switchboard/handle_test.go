package switchboard

import (
	"strings"
	"testing"

	"toybox/labels"
)

// TestConstrainRefusesBadVatID: labels read from the wire are where a vat
// id enters the switchboard. A constrain whose vat label is no vat id is
// refused with the one message labels.ParseVatID gives, and no handle is
// made.
func TestConstrainRefusesBadVatID(t *testing.T) {
	f := newFixture(t, nil)
	c := dial(t, f.public)
	for _, id := range []string{"../x", "Bad", "-x", "a.b", strings.Repeat("a", 64)} {
		_, perr := labels.ParseVatID(id)
		if perr == nil {
			t.Fatalf("ParseVatID(%q) took it; the test needs a bad id", id)
		}
		h, err := constrain(t, c.root, labels.Set{Vat: id})
		if err == nil {
			h.Release()
			t.Errorf("constrain(vat %q) succeeded; want it refused", id)
			continue
		}
		if !strings.Contains(err.Error(), "constrain: bad label: "+perr.Error()) {
			t.Errorf("constrain(vat %q) = %v; want %q", id, err, perr)
		}
	}
}
