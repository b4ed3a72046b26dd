//go:build !linux

package wall

import "os"

// fileID is a file's identity; unknown off Linux.
type fileID struct{ dev, ino uint64 }

func idOf(os.FileInfo) fileID { return fileID{} }

// kernelRealDir cannot say off Linux: the caller walks the path.
func kernelRealDir(string, bool) (string, bool) { return "", false }
