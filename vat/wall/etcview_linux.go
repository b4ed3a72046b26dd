package wall

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// A wall's /etc is a bind of the view folder its start opened (by fd), so
// removing the entries of a view empties the /etc of every wall that binds
// it. A view set aside by a rebuild is therefore removed only once no
// running wall binds it: at once when none does, else when the last of
// them ends. One left behind by a crash goes at the next start
// (SweepViews).
var viewUse = struct {
	sync.Mutex
	walls map[fileID]int    // running walls that bind the view, by its identity
	aside map[fileID]string // views set aside while bound, and where they are
}{walls: map[fileID]int{}, aside: map[fileID]string{}}

// viewHold is the views one wall binds.
type viewHold struct{ ids []fileID }

// open opens the view op binds (as openBind does) and counts the wall
// among its users. Opening and counting are one step to retireView: a view
// a start opened before a rebuild set it aside is counted before the
// rebuild looks, and a start that comes after the rebuild opens the new
// one.
func (h *viewHold) open(op *Op) (*os.File, error) {
	viewUse.Lock()
	defer viewUse.Unlock()
	f, id, err := openBind(op)
	if err != nil {
		return nil, err
	}
	viewUse.walls[id]++
	h.ids = append(h.ids, id)
	return f, nil
}

// release uncounts the wall (once: later calls do nothing) and removes
// every view set aside that no running wall binds any more.
func (h *viewHold) release() error {
	viewUse.Lock()
	var gone []string
	for _, id := range h.ids {
		if viewUse.walls[id]--; viewUse.walls[id] > 0 {
			continue
		}
		delete(viewUse.walls, id)
		if dir, ok := viewUse.aside[id]; ok {
			delete(viewUse.aside, id)
			gone = append(gone, dir)
		}
	}
	h.ids = nil
	viewUse.Unlock()
	var err error
	for _, dir := range gone {
		if rerr := os.RemoveAll(dir); err == nil && rerr != nil {
			err = fmt.Errorf("removing the /etc view set aside at %s: %w", dir, rerr)
		}
	}
	return err
}

// retireView removes the view a rebuild set aside at dir, or, while
// running walls bind it, leaves it to the last of them to remove.
func retireView(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	id := idOf(fi)
	viewUse.Lock()
	if viewUse.walls[id] > 0 {
		viewUse.aside[id] = dir
		viewUse.Unlock()
		return nil
	}
	viewUse.Unlock()
	return os.RemoveAll(dir)
}

// forgetAside drops what is noted as set aside below dir (SweepViews
// removes it all).
func forgetAside(dir string) {
	viewUse.Lock()
	defer viewUse.Unlock()
	for id, d := range viewUse.aside {
		if strings.HasPrefix(d, dir+string(filepath.Separator)) {
			delete(viewUse.aside, id)
		}
	}
}
