//go:build !linux

package store

import "os"

// removeTree is os.RemoveAll where there is no renameat2 (see the Linux
// version for why a vat's folders are not removed with it there).
func removeTree(path string) error { return os.RemoveAll(path) }
