//go:build unix

package doors

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// ownerProblem says why the table file's owner is not trusted, or "".
func ownerProblem(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "has no owner information"
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Sprintf("is owned by uid %d, neither root nor this process's user", st.Uid)
	}
	return ""
}
