package labels

import "fmt"

// VatIDSyntax is the syntax of a vat id, as messages name it. A vat id
// names a folder, a cgroup, a socket and a DNS label, so it stays short,
// lower case and free of dots and slashes.
const VatIDSyntax = "[a-z0-9][a-z0-9-]{0,62}"

// VatID is a vat's id, parsed: a VatID made by ParseVatID is well formed
// (VatIDSyntax). Code that takes one needs no check of its own.
//
// Make one only with ParseVatID where an id enters toybox: the admin API's
// path, the command line, a file name or a file read from disk, a label read
// from the wire. A conversion, VatID(s), skips the parse. Outside tests it
// is only for a constant or an id built from parts already checked.
type VatID string

// ParseVatID returns s as a VatID, or else the one error every part of
// toybox gives for a bad id: it quotes s (clipped) and names VatIDSyntax.
// Callers wrap it with their own sentinel.
func ParseVatID(s string) (VatID, error) {
	if ValidVatID(s) {
		return VatID(s), nil
	}
	const clip = 200 // a path or a file name may be long; the message is not
	if len(s) > clip {
		s = s[:clip] + "..."
	}
	return "", fmt.Errorf("%q is not a vat id (%s)", s, VatIDSyntax)
}

// String returns the id as text.
func (id VatID) String() string { return string(id) }

// ValidVatID reports whether id is a well-formed vat id (VatIDSyntax). It
// is for filters that skip what is no vat id without a message; a refusal
// comes from ParseVatID.
func ValidVatID(id string) bool {
	if id == "" || len(id) > 63 || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
