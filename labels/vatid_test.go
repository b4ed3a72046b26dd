package labels

import (
	"strings"
	"testing"
)

var vatIDTests = []struct {
	id string
	ok bool
}{
	{"a", true},
	{"0", true},
	{"alice-2", true},
	{strings.Repeat("a", 63), true},
	{"", false},
	{"-alice", false},
	{"Alice", false},
	{"al_ice", false},
	{"al.ice", false},
	{"../kiosk", false},
	{"alice\n", false},
	{strings.Repeat("a", 64), false},
}

func TestCheckVatID(t *testing.T) {
	for _, tt := range vatIDTests {
		t.Run(tt.id, func(t *testing.T) {
			if got := ValidVatID(tt.id); got != tt.ok {
				t.Errorf("ValidVatID(%q) = %v; want %v", tt.id, got, tt.ok)
			}
			err := CheckVatID(tt.id)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckVatID(%q) = %v; want ok %v", tt.id, err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "is not a vat id ("+VatIDSyntax+")") {
				t.Errorf("CheckVatID(%q) = %q; want it to name the syntax", tt.id, err)
			}
		})
	}
}

// TestCheckVatIDClips: a long bad id does not make a long message.
func TestCheckVatIDClips(t *testing.T) {
	err := CheckVatID(strings.Repeat("A", 1<<20))
	if err == nil || len(err.Error()) > 300 {
		t.Errorf("CheckVatID(1 MiB) = %d bytes of message; want at most 300", len(err.Error()))
	}
}

// FuzzCheckVatID: ValidVatID agrees with the syntax it names, spelled as a
// loop here so the two cannot share a mistake.
func FuzzCheckVatID(f *testing.F) {
	for _, tt := range vatIDTests {
		f.Add(tt.id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		want := len(id) >= 1 && len(id) <= 63 && strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == "" && id[0] != '-'
		if got := ValidVatID(id); got != want {
			t.Errorf("ValidVatID(%q) = %v; want %v", id, got, want)
		}
		if (CheckVatID(id) == nil) != want {
			t.Errorf("CheckVatID(%q) = %v; want ok %v", id, CheckVatID(id), want)
		}
	})
}
