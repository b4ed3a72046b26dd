package wall

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// replaceDir puts the folder tmp in place of dir, atomically when dir
// exists (a wall opening dir sees the old one or the new one, never half of
// one), and sets the old one aside as dir.old-N, never emptying it: running
// walls may still show it (a view or a /dev is bound, not copied). It
// returns where the old one now is ("" when there was none).
//
// Once it returns nil, tmp is not the caller's to remove: it may hold the
// old folder.
func replaceDir(tmp, dir string) (old string, err error) {
	aside := fmt.Sprintf("%s.old-%d", dir, time.Now().UnixNano())
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		// tmp now holds the old one, which walls may still show: it is
		// set aside, never removed here. Should that rename fail, it stays
		// under tmp's hidden name; the new one is in place either way.
		if os.Rename(tmp, aside) != nil {
			return tmp, nil
		}
		return aside, nil
	case errors.Is(err, unix.ENOENT):
		return "", os.Rename(tmp, dir)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		// No exchange on this filesystem: the old one aside, then the new
		// one in place. A spawn opening dir in between fails and says so.
		if err := os.Rename(dir, aside); err != nil {
			return "", err
		}
		return aside, os.Rename(tmp, dir)
	}
	return "", &os.LinkError{Op: "renameat2", Old: tmp, New: dir, Err: err}
}

// viewHold is the views one wall binds, counted in use (its Host's).
type viewHold struct {
	use *viewUse
	ids []fileID
}

// newViewHold returns the view count of one wall started with h.
func (h *Host) newViewHold() *viewHold { return &viewHold{use: &h.views} }

// open opens the view op binds (as openBind does) and counts the wall
// among its users. Opening and counting are one step to retire: a view
// a start opened before a rebuild set it aside is counted before the
// rebuild looks, and a start that comes after the rebuild opens the new
// one.
func (h *viewHold) open(op *Op) (*os.File, error) {
	h.use.Lock()
	defer h.use.Unlock()
	f, id, err := openBind(op)
	if err != nil {
		return nil, err
	}
	h.use.walls[id]++
	h.ids = append(h.ids, id)
	return f, nil
}

// release uncounts the wall (once: later calls do nothing) and removes
// every view set aside that no running wall binds any more.
func (h *viewHold) release() error {
	h.use.Lock()
	var gone []string
	for _, id := range h.ids {
		if h.use.walls[id]--; h.use.walls[id] > 0 {
			continue
		}
		delete(h.use.walls, id)
		if dir, ok := h.use.aside[id]; ok {
			delete(h.use.aside, id)
			gone = append(gone, dir)
		}
	}
	h.ids = nil
	h.use.Unlock()
	var err error
	for _, dir := range gone {
		if rerr := os.RemoveAll(dir); err == nil && rerr != nil {
			err = fmt.Errorf("removing the /etc view set aside at %s: %w", dir, rerr)
		}
	}
	return err
}

// retire removes the view a rebuild set aside at dir, or, while
// running walls bind it, leaves it to the last of them to remove.
func (u *viewUse) retire(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	id := idOf(fi)
	u.Lock()
	if u.walls[id] > 0 {
		u.aside[id] = dir
		u.Unlock()
		return nil
	}
	u.Unlock()
	return os.RemoveAll(dir)
}

// forgetAside drops what is noted as set aside below dir (SweepViews
// removes it all).
func (u *viewUse) forgetAside(dir string) {
	u.Lock()
	defer u.Unlock()
	for id, d := range u.aside {
		if strings.HasPrefix(d, dir+string(filepath.Separator)) {
			delete(u.aside, id)
		}
	}
}
