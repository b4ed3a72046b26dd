package supervisor

import (
	"errors"
	"slices"
	"testing"

	"toybox/vat/packages"
)

// TestParsePackageParam: ?package= takes a spec or a launcher line as a
// JSON list, read by the one parser (its refusals included).
func TestParsePackageParam(t *testing.T) {
	tests := []struct {
		name, in   string
		pkg        string
		args       []string
		wantRefuse bool
	}{
		{"spec", "npm:tb-mcp-hello@^1", "npm:tb-mcp-hello@^1", nil, false},
		{"launcher", `["npx","-y","@scope/srv@1.2.3","/data","--flag"]`, "npm:@scope/srv@1.2.3", []string{"/data", "--flag"}, false},
		{"uvx launcher", `["uvx","mcp-server-fetch==1.0"]`, "pypi:mcp-server-fetch==1.0", nil, false},
		{"launcher --package", `["npx","--package","evil","srv"]`, "", nil, true},
		{"not a list of strings", `["npx",1]`, "", nil, true},
		{"two lists", `["npx","a"]["b"]`, "", nil, true},
		{"not a launcher", `["node","x.js"]`, "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp, err := parsePackageParam(tt.in)
			if tt.wantRefuse {
				if !errors.Is(err, packages.ErrBadSpec) {
					t.Fatalf("parsePackageParam(%s) = %v, %v; want ErrBadSpec", tt.in, sp, err)
				}
				return
			}
			if err != nil || sp.String() != tt.pkg || !slices.Equal(sp.Args, tt.args) {
				t.Errorf("parsePackageParam(%s) = %s %q, %v; want %s %q", tt.in, sp, sp.Args, err, tt.pkg, tt.args)
			}
		})
	}
}
