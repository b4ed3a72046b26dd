package wall

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The fast resolution agrees with the walk, and never resolves what the
// walk refuses: a symlinked own folder, a file, a missing path.
func TestKernelRealDir(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "real", "dir")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "real"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(root, "dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path     string
		noFollow bool
		want     string // "" = the fast path cannot say
	}{
		{dir, false, dir},
		{dir, true, dir},
		{filepath.Join(root, "link", "dir"), false, dir},
		{filepath.Join(root, "link", "dir"), true, dir}, // only the last element must not be a link
		{filepath.Join(root, "dirlink"), false, dir},
		{filepath.Join(root, "dirlink"), true, ""},
		{filepath.Join(root, "file"), false, ""},
		{filepath.Join(root, "missing"), false, ""},
	} {
		got, ok := kernelReal(tc.path, true, tc.noFollow)
		if tc.want == "" && ok || tc.want != "" && (!ok || got != tc.want) {
			t.Errorf("kernelReal(%s, dir, %v) = %q, %v; want %q", tc.path, tc.noFollow, got, ok, tc.want)
		}
		walked, err := realAbs("folder", tc.path, tc.noFollow)
		if tc.want != "" && (err != nil || walked != tc.want) {
			t.Errorf("realAbs(%s, %v) = %q, %v; want %q", tc.path, tc.noFollow, walked, err, tc.want)
		}
		if tc.want == "" && err == nil {
			t.Errorf("realAbs(%s, %v) = %q; want an error", tc.path, tc.noFollow, walked)
		}
	}
	// A file, through a link on the way: the same path the walk finds.
	if got, ok := kernelReal(filepath.Join(root, "link", "..", "file"), false, false); !ok || got != filepath.Join(root, "file") {
		t.Errorf("kernelReal(a file) = %q, %v", got, ok)
	}
	if _, err := realAbs("data folder", filepath.Join(root, "dirlink"), true); !errors.Is(err, ErrSymlink) {
		t.Errorf("a symlinked own folder: %v, want ErrSymlink", err)
	}
}
