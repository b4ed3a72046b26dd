//go:build !linux

package wall

import "os"

// fileID is a file's identity; unknown off Linux.
type fileID struct{ dev, ino uint64 }

func idOf(os.FileInfo) fileID { return fileID{} }

// kernelReal cannot say off Linux: the caller walks the path.
func kernelReal(string, bool, bool) (string, bool) { return "", false }

// classPerm: off Linux only the bits for others are known to apply.
func classPerm(fi os.FileInfo, _, _, _ int) os.FileMode { return fi.Mode().Perm() & 0o007 }

func mayReadExec(fi os.FileInfo, uid, gid, extra int) bool {
	return classPerm(fi, uid, gid, extra)&0o005 == 0o005
}

func readOnlyMount(string) bool { return false }
