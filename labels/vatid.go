package labels

import "fmt"

// VatIDSyntax is the syntax of a vat id, as messages name it. A vat id
// names a folder, a cgroup, a socket and a DNS label, so it stays short,
// lower case and free of dots and slashes.
const VatIDSyntax = "[a-z0-9][a-z0-9-]{0,62}"

// ValidVatID reports whether id is a well-formed vat id (VatIDSyntax).
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

// CheckVatID returns nil when id is a vat id, or else the one error every
// part of toybox gives for a bad one: it quotes id (clipped) and names
// VatIDSyntax. Callers wrap it with their own sentinel.
func CheckVatID(id string) error {
	if ValidVatID(id) {
		return nil
	}
	const clip = 200 // a path or a file name may be long; the message is not
	if len(id) > clip {
		id = id[:clip] + "..."
	}
	return fmt.Errorf("%q is not a vat id (%s)", id, VatIDSyntax)
}
