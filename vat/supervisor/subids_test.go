package supervisor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestSubordinateClashes(t *testing.T) {
	dir := t.TempDir()
	subuid := filepath.Join(dir, "subuid")
	subgid := filepath.Join(dir, "subgid")
	// useradd's defaults: 65536 ids per user from 100000; the 14th user's
	// range (951968-1017503) holds 999999 and 1000000.
	var b strings.Builder
	for i := range 14 {
		b.WriteString("user" + string(rune('a'+i)) + ":" + strconv.Itoa(100000+i*65536) + ":65536\n")
	}
	if err := os.WriteFile(subuid, []byte("# comment\n"+b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(subgid, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got := SubordinateClashes(subuid, subgid, 1000000, 999999)
	if len(got) != 3 {
		t.Fatalf("clashes = %q; want the 14th user's uids, gids and the code group", got)
	}
	for _, want := range []string{"user usern's subordinate user ids 951968-1017503 include the vats' ids 1000000-1065535", "subordinate group ids 951968-1017503 include the code group 999999"} {
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("clashes = %q; want one saying %q", got, want)
		}
	}
	if got := SubordinateClashes(subuid, subgid, 2000000000, 1999999999); len(got) != 0 {
		t.Errorf("ids above every range: clashes %q", got)
	}
	if got := SubordinateClashes(filepath.Join(dir, "none"), filepath.Join(dir, "none"), 1000000, 999999); len(got) != 0 {
		t.Errorf("no files: clashes %q", got)
	}
}
