package strictjson

import (
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	known := []string{"network", "ownEnvFile"}
	for _, tt := range []struct {
		in, wantErr string
	}{
		{`{"network":"none","x":[{"a":1},{"a":2}]}`, ""},
		{`{"network":"none","network":"internet"}`, "appears twice"},
		{`{"a":{"b":1,"b":2}}`, "appears twice"},
		{`[{"NetWork":1}]`, "case-sensitive"},
		{`{"ownenvfile":true}`, `the key is "ownEnvFile"`},
		{`{"other":1,"OTHER":2}`, ""}, // not a known key: left to the decoder's unknown-field check
		{strings.Repeat("[", 100) + strings.Repeat("]", 100), "nested too deeply"},
		{`{"a":`, "EOF"},
	} {
		err := Keys([]byte(tt.in), known)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("Keys(%.40s) = %v; want %q", tt.in, err, tt.wantErr)
		}
	}
}
