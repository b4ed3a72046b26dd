package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "walls.json")
	for _, content := range []string{"first\n", "second, longer\n", ""} {
		if err := WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatalf("WriteFile(%q): %v", content, err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
		fi, _ := os.Stat(p)
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("mode = %v; want 0600", fi.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("folder holds %d entries; want only the file (no temporary left)", len(entries))
	}
	if err := WriteFile(filepath.Join(dir, "missing", "x"), []byte("x"), 0o600); err == nil {
		t.Error("WriteFile into a missing folder succeeded")
	}
}
