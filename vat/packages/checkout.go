package packages

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// checkoutSkipped are the folders a checkout's copy leaves out at any
// depth: history, and what a package manager rebuilds.
var checkoutSkipped = []string{".git", "node_modules", ".venv", "__pycache__"}

// ErrCopy: a checkout's copy that differs from its source.
var ErrCopy = errors.New("the copy differs from its source")

// CopyCheckout copies the folder src into dst (which must not exist)
// without .git, node_modules, .venv and __pycache__, then compares source
// and copy entry by entry: type, link target, size and mode. Regular
// files, folders and links are copied; any other kind is refused. lim
// bounds the copy.
func CopyCheckout(src, dst string, lim Limits) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	n, size := 0, int64(0)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() && slices.Contains(checkoutSkipped, d.Name()) {
			return filepath.SkipDir
		}
		if n++; n > lim.entries() {
			return fmt.Errorf("%s has more than %d entries", src, lim.entries())
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		switch {
		case fi.IsDir():
			return os.Mkdir(out, fi.Mode().Perm()|0o700)
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(t, out)
		case fi.Mode().IsRegular():
			if size += fi.Size(); size > lim.bytes() {
				return fmt.Errorf("%s holds more than %d bytes", src, lim.bytes())
			}
			return copyFile(p, out, fi.Mode().Perm())
		}
		return fmt.Errorf("%s is a %v, not a file, folder or link", p, fi.Mode().Type())
	})
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return CompareCopy(src, dst)
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Chmod(mode); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// CompareCopy compares a checkout src with its copy dst entry by entry
// (the skipped folders aside): the same names, each of the same type,
// link target, size and mode. The first difference is the error.
func CompareCopy(src, dst string) error {
	a, err := listCheckout(src)
	if err != nil {
		return err
	}
	b, err := listCheckout(dst)
	if err != nil {
		return err
	}
	for rel, ea := range a {
		eb, ok := b[rel]
		switch {
		case !ok:
			return fmt.Errorf("%w: %s is missing from the copy", ErrCopy, rel)
		case ea != eb:
			return fmt.Errorf("%w: %s: %+v in the source, %+v in the copy", ErrCopy, rel, ea, eb)
		}
	}
	for rel := range b {
		if _, ok := a[rel]; !ok {
			return fmt.Errorf("%w: %s is in the copy only", ErrCopy, rel)
		}
	}
	return nil
}

type checkoutEntry struct {
	Type   fs.FileMode
	Mode   fs.FileMode
	Size   int64
	Target string
}

func listCheckout(dir string) (map[string]checkoutEntry, error) {
	out := map[string]checkoutEntry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() && slices.Contains(checkoutSkipped, d.Name()) {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := checkoutEntry{Type: fi.Mode().Type()}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			e.Size, e.Mode = fi.Size(), fi.Mode().Perm()
		}
		out[rel] = e
		return nil
	})
	return out, err
}

// CheckoutBundle writes the bundle of a checkout's copy in dir to w: its
// manifest.json (command, env keys, mcp) beside the copied files, and the
// file manifest checked before every start, as for a package.
func CheckoutBundle(w io.Writer, dir string, command, env []string, mcp []byte) error {
	if _, err := os.Lstat(filepath.Join(dir, "manifest.json")); err == nil {
		return fmt.Errorf("%w: the folder has a manifest.json of its own: install it as a bundle instead", ErrBadConfig)
	}
	mb, err := bundleManifest(command, env, mcp)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), mb, 0o644); err != nil {
		return err
	}
	fl, err := Manifest(dir)
	if err != nil {
		return err
	}
	return WriteBundle(w, dir, fl)
}
