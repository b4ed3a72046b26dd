package owner

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestStateVats(t *testing.T) {
	state := t.TempDir()
	vats := filepath.Join(state, "vats")
	for _, d := range []string{vats, filepath.Join(vats, "dir-vat"), filepath.Join(vats, "Bad_Dir")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"myvat.json", "other-vat.json", "-bad.json", "notes.txt", ".incoming-1.json"} {
		if err := os.WriteFile(filepath.Join(vats, f), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := StateVats(state, nil)()
	slices.Sort(got)
	want := []string{"dir-vat", "myvat", "other-vat"}
	if !slices.Equal(got, want) {
		t.Errorf("StateVats() = %v; want %v", got, want)
	}
	if got := StateVats(filepath.Join(state, "missing"), nil)(); got != nil {
		t.Errorf("StateVats(missing) = %v; want nil", got)
	}
}
