//go:build linux

package systemd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseUnit: the unit reader never panics, and what it accepts is
// well formed: every key sits in a named section, has no '=' or space and is
// not empty, and every value is trimmed.
func FuzzParseUnit(f *testing.F) {
	for _, name := range append(append([]string{}, unitNames...), "toybox.sysusers") {
		data, err := os.ReadFile(filepath.Join(repoRoot(f), "systemd", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("[Service]\nExecStart=\n"))
	f.Add([]byte("Key=before any section\n"))
	f.Add([]byte("[Unit\nA=b\n"))
	f.Add([]byte("[S]\nA=b \\\n c\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := parseUnit(data)
		if err != nil {
			return
		}
		for section, keys := range u {
			if section == "" {
				t.Errorf("parseUnit(%q) accepted a key outside any section", data)
			}
			for k, vs := range keys {
				if k == "" || strings.ContainsAny(k, "= \t") {
					t.Errorf("parseUnit(%q): key %q in [%s] is malformed", data, k, section)
				}
				for _, v := range vs {
					if v != strings.TrimSpace(v) || v == "" {
						t.Errorf("parseUnit(%q): value %q of %s is not trimmed or is empty", data, v, k)
					}
				}
			}
		}
	})
}
