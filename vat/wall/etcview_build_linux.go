//go:build linux

package wall

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The wall's /etc is one read-only bind of a folder the supervisor builds
// (its "view"): copies of the allowlisted entries, the synthesised group,
// hosts and hostname, a link to the wall's own passwd, and an empty
// mountpoint for every later bind under /etc. One bind instead of a bind or
// a copy per entry: each mount bubblewrap makes costs the spawn two mount
// calls and a read of the mount table, and each copy a file written into
// the wall's root. Views are named by their content and shared; one is
// rebuilt only when a source changed, and an old one is set aside, never
// emptied while running walls still show it (Host.views).

// Limits of one view: an /etc folder larger than this is not copied.
const (
	maxEtcEntries = 20000
	maxEtcBytes   = 64 << 20
)

// SweepViews removes every /etc view in stateDir and every /dev folder set
// aside or left half-built there (the current one stays). Call it only
// when no wall runs (the supervisor, before its first spawn): a wall's
// /etc and /dev are binds of these, and emptying one empties them.
func (h *Host) SweepViews(stateDir string) error {
	dir := filepath.Join(stateDir, "etc")
	h.etcViews.Lock()
	for k := range h.etcViews.m {
		if filepath.Dir(k) == dir {
			delete(h.etcViews.m, k)
		}
	}
	h.etcViews.Unlock()
	h.views.forgetAside(dir)
	err := os.RemoveAll(dir)
	for _, pattern := range []string{"dev.old-*", ".dev.new-*"} {
		old, _ := filepath.Glob(filepath.Join(stateDir, pattern))
		for _, o := range old {
			if rerr := os.RemoveAll(o); err == nil {
				err = rerr
			}
		}
	}
	return err
}

// PrepareEtcView builds the /etc view most walls of stateDir will bind
// (one with no owner-chosen file below /etc), so that the first spawn does
// not wait for it. The supervisor calls it when it starts; a spawn that
// comes while it runs waits for the same build.
func (h *Host) PrepareEtcView(stateDir string) error {
	entries := h.baseEtc()
	return h.ensureEtcView(&Plan{Etc: entries, EtcView: h.EtcViewDir(stateDir, entries)})
}

// viewFor returns what h knows of the view at dir.
func (h *Host) viewFor(dir string) *etcView {
	h.etcViews.Lock()
	defer h.etcViews.Unlock()
	v := h.etcViews.m[dir]
	if v == nil {
		v = &etcView{}
		h.etcViews.m[dir] = v
	}
	return v
}

// ensureEtcView builds p's /etc view unless the one on disk was built from
// the same sources.
func (h *Host) ensureEtcView(p *Plan) error {
	if p.EtcView == "" {
		return nil
	}
	v := h.viewFor(p.EtcView)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.fp != "" && time.Since(v.checked) < etcRecheck {
		if _, err := os.Lstat(p.EtcView); err == nil {
			return nil
		}
	}
	fp := etcFingerprint(p.EtcView, p.Etc, v.files)
	if fp == v.fp && v.fp != "" {
		v.checked = time.Now()
		return nil
	}
	files, err := h.buildEtcView(p.EtcView, p.Etc)
	if err != nil {
		v.fp = ""
		return fmt.Errorf("building the wall's /etc: %w", err)
	}
	v.files = files
	v.fp = etcFingerprint(p.EtcView, p.Etc, files)
	v.checked = time.Now()
	return nil
}

// etcFingerprint summarises everything a view is built from: the entries,
// each source's identity and times, the regular files and folders found in copied
// folders, and the view folder itself (a view removed or replaced by
// someone else is built again).
func etcFingerprint(dir string, entries []EtcEntry, files []string) string {
	h := sha256.New()
	stamp := func(p string) {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			fmt.Fprintf(h, "%s:missing\n", p)
			return
		}
		fmt.Fprintf(h, "%s:%d:%d:%o:%d:%d.%d:%d.%d\n", p, st.Dev, st.Ino, st.Mode, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	stamp(dir)
	for _, e := range entries {
		fmt.Fprintf(h, "entry %s\n", e.key())
		if e.Src != "" {
			stamp(e.Src)
		}
	}
	for _, f := range files {
		stamp(f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// buildEtcView writes the view in a new folder next to dir and swaps it in,
// so a wall always binds a whole view. It returns the regular files and folders found in
// copied folders.
func (h *Host) buildEtcView(dir string, entries []EtcEntry) ([]string, error) {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".new-")
	if err != nil {
		return nil, err
	}
	swapped := false
	defer func() {
		if !swapped {
			_ = os.RemoveAll(tmp) // a half-built view nobody binds
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	b := &viewBuilder{root: tmp}
	sorted := slices.Clone(entries)
	slices.SortStableFunc(sorted, func(a, b EtcEntry) int { return strings.Compare(a.Path, b.Path) })
	for _, e := range sorted {
		if err := b.add(e); err != nil {
			return nil, fmt.Errorf("/etc/%s: %w", e.Path, err)
		}
	}
	if err := b.finish(); err != nil {
		return nil, err
	}
	old, err := replaceDir(tmp, dir)
	if err != nil {
		return nil, err
	}
	swapped = true
	if old != "" {
		// Not an error of this build: the new view is in place. What
		// could not be removed goes at the next start.
		_ = h.views.retire(old)
	}
	return b.files, nil
}

// viewBuilder writes one view. Every mode is set with chmod, not left to
// the umask (toybox.service runs with UMask=0077, which would leave the
// view unreadable by the walls' uids); a copied file or folder keeps only
// the read (and search) bits its source has, so nothing the host keeps from
// other users becomes readable through a view.
type viewBuilder struct {
	root    string
	files   []string
	entries int
	bytes   int64
	modes   []pathMode // folders, to chmod once filled (deepest last)
}

type pathMode struct {
	path string
	mode fs.FileMode
}

// dest returns the view path of rel, making its parent folders (0755).
func (b *viewBuilder) dest(rel string) (string, error) {
	rel = filepath.Clean(rel)
	if rel == "." || filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("not a path below /etc")
	}
	d := filepath.Join(b.root, rel)
	if err := b.mkdirs(filepath.Dir(d)); err != nil {
		return "", err
	}
	return d, nil
}

// mkdirs makes dir and its missing parents below the root, each 0755.
func (b *viewBuilder) mkdirs(dir string) error {
	if dir == b.root {
		return nil
	}
	if _, err := os.Lstat(dir); err == nil {
		return nil
	}
	if err := b.mkdirs(filepath.Dir(dir)); err != nil {
		return err
	}
	return b.mkdir(dir, 0o755)
}

// mkdir makes one folder, to be given mode once the view is filled.
func (b *viewBuilder) mkdir(dir string, mode fs.FileMode) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	b.modes = append(b.modes, pathMode{dir, mode})
	return nil
}

// finish gives every folder its mode, the deepest first (a folder without
// write permission cannot be changed below, but chmod needs only search).
func (b *viewBuilder) finish() error {
	for i := len(b.modes) - 1; i >= 0; i-- {
		if err := os.Chmod(b.modes[i].path, b.modes[i].mode); err != nil {
			return err
		}
	}
	return nil
}

func (b *viewBuilder) count(n int64) error {
	b.entries++
	b.bytes += n
	if b.entries > maxEtcEntries || b.bytes > maxEtcBytes {
		return fmt.Errorf("the /etc view would hold more than %d entries or %d MiB", maxEtcEntries, maxEtcBytes>>20)
	}
	return nil
}

func (b *viewBuilder) add(e EtcEntry) error {
	d, err := b.dest(e.Path)
	if err != nil {
		return err
	}
	switch {
	case e.Link != "":
		if err := b.count(0); err != nil {
			return err
		}
		return os.Symlink(e.Link, d)
	case e.Mount:
		if _, err := os.Lstat(d); err == nil {
			return nil // already there (a copied entry): the bind goes over it
		}
		if e.Dir {
			return b.mkdir(d, 0o755)
		}
		return writeFile(d, nil)
	case e.Src == "":
		if err := b.count(int64(len(e.Data))); err != nil {
			return err
		}
		return writeFile(d, e.Data)
	}
	return b.copy(e.Src, d)
}

// copy copies src to d without following symlinks: a symlink is made
// again, a folder is copied entry by entry, a regular file by content;
// anything else is left out.
func (b *viewBuilder) copy(src, d string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := b.count(fi.Size()); err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(t, d)
	case fi.Mode().IsRegular():
		err := copyRegular(src, d, fi.Mode().Perm()&0o444)
		if errors.Is(err, fs.ErrPermission) {
			return nil // the supervisor cannot read it: nor could a wall
		}
		return err
	case fi.IsDir():
		if _, err := os.Lstat(d); err != nil {
			// Its read and search bits; write for the owner (the
			// supervisor) so the view can be removed; a wall binds it
			// read-only.
			if err := b.mkdir(d, fi.Mode().Perm()&0o555|0o200); err != nil {
				return err
			}
		}
		ents, err := os.ReadDir(src)
		if errors.Is(err, fs.ErrPermission) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, ent := range ents {
			s := filepath.Join(src, ent.Name())
			if ent.Type().IsRegular() || ent.IsDir() {
				b.files = append(b.files, s)
			}
			if err := b.copy(s, filepath.Join(d, ent.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyRegular copies a regular file (opened without following a symlink)
// as a file of mode perm.
func copyRegular(src, d string, perm fs.FileMode) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is no longer a regular file", src)
	}
	out, err := os.OpenFile(d, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.LimitReader(in, maxEtcBytes+1)); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Chmod(perm); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// writeFile writes a synthesised file, readable by all (mode 0444).
func writeFile(d string, data []byte) error {
	f, err := os.OpenFile(d, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(0o444); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
