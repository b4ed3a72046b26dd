package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSubordinateCheck(t *testing.T) {
	dir := t.TempDir()
	subuid, subgid := filepath.Join(dir, "subuid"), filepath.Join(dir, "subgid")
	if c := subordinateCheck(subuid, subgid); !c.OK {
		t.Errorf("no files: %+v; want ok", c)
	}
	// useradd's 14th default range holds the code group and the first vat ids.
	for _, p := range []string{subuid, subgid} {
		if err := os.WriteFile(p, []byte("alice:100000:65536\nnick:951968:65536\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := subordinateCheck(subuid, subgid)
	if c.OK || !strings.Contains(c.Detail, "user nick's subordinate") || strings.Contains(c.Detail, "alice") || !strings.Contains(c.Fix, "usermod") {
		t.Errorf("a clashing range: %+v; want a failure naming nick, not alice, with the fix", c)
	}
}
