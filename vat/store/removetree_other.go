//go:build !linux

package store

import (
	"io/fs"
	"os"
	"path/filepath"
)

// removeTree is os.RemoveAll where there is no renameat2 (see the Linux
// version for why a vat's folders are not removed with it there).
func removeTree(path string) error { return os.RemoveAll(path) }

// chownTree hands dir and everything below it to uid:gid without following
// links.
func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}
