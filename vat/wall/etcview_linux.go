package wall

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// replaceDir puts the folder tmp in place of dir, atomically when dir
// exists (a wall opening dir sees the old one or the new one, never half of
// one), and sets the old one aside as dir.old-N, never emptying it: running
// walls may still show it (a view or a /dev is bound, not copied).
// SweepViews clears what was set aside below <state>/etc.
//
// Once it returns nil, tmp is not the caller's to remove: it may hold the
// old folder.
func replaceDir(tmp, dir string) error {
	aside := fmt.Sprintf("%s.old-%d", dir, time.Now().UnixNano())
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		// tmp now holds the old one, which walls may still show: it is
		// set aside, never removed here. Should that rename fail, it stays
		// under tmp's hidden name until the supervisor next starts
		// (SweepViews); the new one is in place either way.
		_ = os.Rename(tmp, aside)
		return nil
	case errors.Is(err, unix.ENOENT):
		return os.Rename(tmp, dir)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		// No exchange on this filesystem: the old one aside, then the new
		// one in place. A spawn opening dir in between fails and says so.
		if err := os.Rename(dir, aside); err != nil {
			return err
		}
		return os.Rename(tmp, dir)
	}
	return &os.LinkError{Op: "renameat2", Old: tmp, New: dir, Err: err}
}
