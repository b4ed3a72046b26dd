package wall

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// swapIn puts the folder tmp in place of dir, atomically when dir exists
// (a wall opening dir sees the old view or the new one, never half of
// one); tmp then holds the old view, for the caller to remove.
func swapIn(tmp, dir string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT):
		return os.Rename(tmp, dir)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		// No exchange on this filesystem: move the old view aside (never
		// empty it: a running wall may show it), then put tmp in place.
		// A spawn opening dir in between fails and says so.
		if err := os.Rename(dir, fmt.Sprintf("%s.old-%d", dir, time.Now().UnixNano())); err != nil {
			return err
		}
		return os.Rename(tmp, dir)
	}
	return &os.LinkError{Op: "renameat2", Old: tmp, New: dir, Err: err}
}
