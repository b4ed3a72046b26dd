//go:build !linux

package store

import (
	"fmt"
	"io/fs"
	"os"
)

// renameNoReplace renames oldpath to newpath unless newpath exists. Off
// Linux the check and the rename are two steps.
func renameNoReplace(oldpath, newpath string) error {
	if _, err := os.Lstat(newpath); err == nil {
		return fmt.Errorf("renaming to %s: %w", newpath, fs.ErrExist)
	}
	return os.Rename(oldpath, newpath)
}
