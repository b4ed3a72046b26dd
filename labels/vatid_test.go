package labels

import (
	"fmt"
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

func TestParseVatID(t *testing.T) {
	for _, tt := range vatIDTests {
		t.Run(tt.id, func(t *testing.T) {
			if got := ValidVatID(tt.id); got != tt.ok {
				t.Errorf("ValidVatID(%q) = %v; want %v", tt.id, got, tt.ok)
			}
			id, err := ParseVatID(tt.id)
			if (err == nil) != tt.ok {
				t.Fatalf("ParseVatID(%q) = %v; want ok %v", tt.id, err, tt.ok)
			}
			if err != nil {
				if want := fmt.Sprintf("%q is not a vat id (%s)", tt.id, VatIDSyntax); err.Error() != want {
					t.Errorf("ParseVatID(%q) = %q; want %q", tt.id, err, want)
				}
				if id != "" {
					t.Errorf("ParseVatID(%q) = %q with an error; want no id", tt.id, id)
				}
			} else if id.String() != tt.id {
				t.Errorf("ParseVatID(%q) = %q; want it unchanged", tt.id, id)
			}
		})
	}
}

// TestParseVatIDClips: a long bad id does not make a long message.
func TestParseVatIDClips(t *testing.T) {
	_, err := ParseVatID(strings.Repeat("A", 1<<20))
	if err == nil || len(err.Error()) > 300 {
		t.Errorf("ParseVatID(1 MiB) = %d bytes of message; want at most 300", len(err.Error()))
	}
}

// FuzzParseVatID: ParseVatID and ValidVatID agree with the syntax they
// name, spelled as a loop here so the two cannot share a mistake, and a
// parsed id is the text it came from.
func FuzzParseVatID(f *testing.F) {
	for _, tt := range vatIDTests {
		f.Add(tt.id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		want := len(id) >= 1 && len(id) <= 63 && strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == "" && id[0] != '-'
		if got := ValidVatID(id); got != want {
			t.Errorf("ValidVatID(%q) = %v; want %v", id, got, want)
		}
		got, err := ParseVatID(id)
		if (err == nil) != want {
			t.Fatalf("ParseVatID(%q) = %v; want ok %v", id, err, want)
		}
		if err == nil && string(got) != id {
			t.Errorf("ParseVatID(%q) = %q; want it unchanged", id, got)
		}
		if err != nil && (got != "" || !strings.Contains(err.Error(), " is not a vat id ("+VatIDSyntax+")")) {
			t.Errorf("ParseVatID(%q) = %q, %q; want no id and the one message", id, got, err)
		}
	})
}
