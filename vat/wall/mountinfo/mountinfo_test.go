package mountinfo

import "testing"

// TestUnescape: mountinfo writes a space, tab, newline and
// backslash of a path in octal; a state dir whose path holds one still
// names its walls' install folders.
func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/srv/toybox/code/ab`:      `/srv/toybox/code/ab`,
		`/srv/my\040state/code/ab`: `/srv/my state/code/ab`,
		`/a\011b\012c\134d`:        "/a\tb\nc\\d",
		`/trailing\04`:             `/trailing\04`,
		`/not\999octal`:            `/not\999octal`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
