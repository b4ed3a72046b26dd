package doors

import (
	"strings"
	"testing"
)

var targets = []struct {
	path string
	want string // "" = acceptable
}{
	{"/kiosk/state", ""},
	{"/", ""},
	{"/a-b_c.d~e/f:g@h/!$&'()*+,;=", ""},
	{"/kiosk/state/", ""},
	{"/..hidden/x", ""},
	{"/a/...", ""},
	{"", "empty"},
	{"kiosk", "does not start with a slash"},
	{"//kiosk", "('//')"},
	{"/kiosk//state", "('//')"},
	{"/..", "'..' segment"},
	{"/a/../b", "'..' segment"},
	{"/a/.", "'.' segment"},
	{"/%2e%2e/b", "percent sign"},
	{"/a%", "percent sign"},
	{"/a?", "query"},
	{"/a?b=c", "query"},
	{"/a#b", "fragment"},
	{"/a\\b", "backslash"},
	{"/a\x7f", "control character"},
	{"/a\tb", "control character"},
	{"/a\nb", "control character"},
	{"/é", "non-ASCII"},
	{"/a b", "character ' '"},
	{"/a\"b", "character '\"'"},
	{"/a<b>", "character '<'"},
	{"/a[0]", "character '['"},
	{"/a{b}", "character '{'"},
	{"/a|b", "character '|'"},
	{"/a^b", "character '^'"},
	{"/a`b", "character '`'"},
	{"/" + strings.Repeat("a", maxPathLen), "longer than"},
}

func TestTargetProblem(t *testing.T) {
	for _, tt := range targets {
		t.Run(tt.path, func(t *testing.T) {
			got := targetProblem(tt.path)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("targetProblem(%q) = %q; want %q", tt.path, got, tt.want)
			}
		})
	}
}

func TestParseEntry(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"GET /kiosk/state", ""},
		{"DELETE /x", ""},
		{"get /x", "not one a door accepts"},
		{"OPTIONS /x", "not one a door accepts"},
		{"GET", "is not \"METHOD /path\""},
		{" /x", "the method is empty"},
		{"GET /x y", "character ' '"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			e, err := ParseEntry(tt.in)
			if tt.want == "" {
				if err != nil || e.Name() != tt.in {
					t.Errorf("ParseEntry(%q) = %q, %v; want itself", tt.in, e.Name(), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseEntry(%q) = %v; want error containing %q", tt.in, err, tt.want)
			}
		})
	}
}

// FuzzTargetProblem: whatever is accepted has one leading slash, no empty,
// "." or ".." segment, and nothing a URL parser or the backend could decode
// or split.
func FuzzTargetProblem(f *testing.F) {
	for _, tt := range targets {
		f.Add(tt.path)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if targetProblem(p) != "" {
			return
		}
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "//") || strings.ContainsAny(p, "%?#\\ \x00\r\n") {
			t.Errorf("accepted %q", p)
		}
		for _, seg := range strings.Split(p[1:], "/") {
			if seg == "." || seg == ".." {
				t.Errorf("accepted %q with segment %q", p, seg)
			}
		}
	})
}
