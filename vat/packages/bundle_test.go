package packages_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toybox/vat/packages"
	"toybox/vat/store"
)

// storedBundle stores a small package bundle in a real code store and
// returns its folder and digest.
func storedBundle(t *testing.T) (string, string) {
	t.Helper()
	tree := t.TempDir()
	files := map[string]string{
		"manifest.json":                        `{"command": ["node_modules/p/bin.js"]}`,
		packages.LockPath:                      `{"format": 1}`,
		"node_modules/p/package.json":          `{"name": "p"}`,
		"node_modules/p/bin.js":                "#!/bin/sh\necho hi\n",
		"node_modules/p/lib/a.js":              "exports.a = 1;\n",
		"node_modules/p/node_modules/q/q.js":   "exports.q = 2;\n",
		"node_modules/p/node_modules/q/README": strings.Repeat("q", 10000),
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tree, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, "bin.js") {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(tree, p), []byte(c), mode); err != nil {
			t.Fatal(err)
		}
	}
	fl, err := packages.Manifest(tree)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := packages.WriteBundle(&b, tree, fl); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	code, err := st.Put(bytes.NewReader(b.Bytes()), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !packages.IsBundle(code.Dir) {
		t.Fatal("the stored bundle is not seen as a package bundle")
	}
	if err := packages.Verify(code.Dir, code.Digest); err != nil {
		t.Fatalf("Verify of the bundle as stored: %v", err)
	}
	return code.Dir, code.Digest
}

// TestVerifyRefusesChanges: every change to an installed tree is found
// before a start, named by its path.
func TestVerifyRefusesChanges(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, dir string)
		want   string
	}{
		{"a flipped byte", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "node_modules/p/lib/a.js")
			b, _ := os.ReadFile(p)
			b[3] ^= 1
			writeKeep(t, p, b)
		}, "node_modules/p/lib/a.js differs"},
		{"a longer file", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "node_modules/p/node_modules/q/q.js")
			b, _ := os.ReadFile(p)
			writeKeep(t, p, append(b, '\n'))
		}, "q.js differs"},
		{"a file added", func(t *testing.T, dir string) {
			writeKeep(t, filepath.Join(dir, "node_modules/p/lib/evil.js"), []byte("x"))
		}, "evil.js was added"},
		{"a file removed", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "node_modules/p/lib/a.js")); err != nil {
				t.Fatal(err)
			}
		}, "a.js is missing"},
		{"a mode changed", func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, "node_modules/p/lib/a.js"), 0o750); err != nil {
				t.Fatal(err)
			}
		}, "changed its mode"},
		{"a link in place of a file", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "node_modules/p/lib/a.js")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/etc/passwd", p); err != nil {
				t.Fatal(err)
			}
		}, "is no longer a file"},
		{"the file manifest rewritten", func(t *testing.T, dir string) {
			p := filepath.Join(dir, packages.FilesPath)
			b, _ := os.ReadFile(p)
			writeKeep(t, p, bytes.Replace(b, []byte(`"kind":"file"`), []byte(`"kind":"exec"`), 1))
		}, "changed its mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, digest := storedBundle(t)
			tt.change(t, dir)
			err := packages.Verify(dir, digest)
			if !errors.Is(err, packages.ErrChanged) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Verify after %s = %v; want ErrChanged naming %q", tt.name, err, tt.want)
			}
		})
	}
}

// writeKeep writes b over p, keeping its mode (the store seals code read
// only for its owner and group).
func writeKeep(t *testing.T, p string, b []byte) {
	t.Helper()
	fi, err := os.Stat(p)
	mode := os.FileMode(0o640)
	if err == nil {
		mode = fi.Mode().Perm()
	}
	_ = os.Chmod(filepath.Dir(p), 0o750)
	if err := os.WriteFile(p, b, mode|0o200); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}
