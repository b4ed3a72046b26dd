//go:build !linux

package store

import (
	"io/fs"
	"os"
	"path/filepath"
)

// RemoveTree is os.RemoveAll where there is no renameat2 (see the Linux
// version for why a vat's folders are not removed with it there).
func RemoveTree(path string) error { return os.RemoveAll(path) }

// chownTree hands everything below dir and then dir itself to uid:gid
// without following links (dir last: see the Linux version). It takes no
// steps up, so beforeClimb never runs.
func chownTree(dir string, uid, gid int, _ func()) error {
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		return err
	}
	return os.Lchown(dir, uid, gid)
}
