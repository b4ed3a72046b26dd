package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestPrintVats: toybox status --lang es prints its own words in Spanish
// too, and no line ends in blanks (a vat with nothing to say after its
// grant had the column's padding after it).
func TestPrintVats(t *testing.T) {
	var page pageStatus
	if err := json.Unmarshal([]byte(`{"vats": [
		{"id": "alice", "word": "walled", "code": "sha256:2da5fc8b1294c78d78e0", "grant": ["nothing: it has no grant"], "facts": [{"key": "restarts", "values": ["0"]}]},
		{"id": "erin", "word": "walled", "code": "sha256:86783a224e779e1d80e4", "grant": ["this computer at 127.0.0.1:8000"], "facts": [{"key": "restarts", "values": ["2"]}, {"key": "last_exit", "values": ["exit status 1"]}]}
	]}`), &page); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		lang string
		want []string
	}{
		{"en", []string{
			"alice  walled  sha256:2da5fc8b1294…  restarts 0  nothing: it has no grant",
			"erin   walled  sha256:86783a224e77…  restarts 2  this computer at 127.0.0.1:8000  last exit: exit status 1",
		}},
		{"es", []string{
			"alice  walled  sha256:2da5fc8b1294…  reinicios 0  nothing: it has no grant",
			"erin   walled  sha256:86783a224e77…  reinicios 2  this computer at 127.0.0.1:8000  última salida: exit status 1",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.lang, func(t *testing.T) {
			var b bytes.Buffer
			printVats(&b, page, "", tt.lang)
			got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("printVats(%s) =\n%q\nwant\n%q", tt.lang, got, tt.want)
			}
		})
	}
}
