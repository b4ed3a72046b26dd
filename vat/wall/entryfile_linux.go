package wall

import (
	"fmt"
	"path/filepath"
)

// OpenEntry opens the toybox-entry at path, which must be absolute, for
// every wall to run (Spec.Entry). Symlinks on the way (a link in a bin
// folder) are followed here, once; the file must be a regular one. The
// caller keeps the Entry for as long as it starts walls.
func OpenEntry(path string) (*Entry, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%w: entry path %q is not absolute", ErrSpec, path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("%w: toybox-entry: %w", ErrSpec, err)
	}
	f, id, err := openBind(&Op{Kind: OpExecFD, Src: real, Why: "toybox-entry"})
	if err != nil {
		return nil, fmt.Errorf("%w: toybox-entry: %w", ErrSpec, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%w: toybox-entry: %w", ErrSpec, err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("%w: toybox-entry %s is not a regular file", ErrSpec, path)
	}
	return &Entry{f: f, path: real, id: id}, nil
}
