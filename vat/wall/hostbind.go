package wall

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Share is a host folder some vats share with the host (the operator's
// table; never a manifest). The wall binds it read-write by fd at its
// real path. A vat that holds one is not walled away from it, and its
// word says so.
type Share struct {
	// Name is what the vat's word calls it.
	Name string
	// Folder is the real path of the folder (no symlink on the way).
	Folder string
	// Entries, when set, are the only entries of Folder the vat sees:
	// every other entry there when the wall starts is masked.
	Entries []string
}

// hostBinds adds the operator's binds: the shared folders, then the state
// folders. Each is a real folder bound read-write by fd; every entry of a
// share not named in Entries is masked, and so is every other entry of
// its parent wherever an earlier bind shows that parent.
func (b *planner) hostBinds() error {
	for _, sh := range b.spec.Shares {
		fi, err := b.hostFolder("shared folder "+sh.Name, sh.Folder)
		if err != nil {
			return err
		}
		if parent := filepath.Dir(sh.Folder); b.visible(parent) {
			ents, err := os.ReadDir(parent)
			if err != nil {
				return fmt.Errorf("%w: shared folder %s: reading its parent: %w", ErrRefusedBind, sh.Name, err)
			}
			for _, e := range ents {
				if e.Name() != filepath.Base(sh.Folder) {
					b.mask(filepath.Join(parent, e.Name()))
				}
			}
		}
		b.add(Op{Kind: OpBindFD, Src: sh.Folder, Dest: sh.Folder, Why: "shares " + sh.Name + " with the host", dir: true, id: idOf(fi)})
		b.trees = append(b.trees, tree{real: sh.Folder, dest: sh.Folder})
		b.writable = append(b.writable, sh.Folder)
		if len(sh.Entries) > 0 {
			ents, err := os.ReadDir(sh.Folder)
			if err != nil {
				return fmt.Errorf("%w: shared folder %s: %w", ErrRefusedBind, sh.Name, err)
			}
			for _, e := range ents {
				if !slices.Contains(sh.Entries, e.Name()) {
					b.mask(filepath.Join(sh.Folder, e.Name()))
				}
			}
		}
		if err := b.maskTrees([]tree{{real: sh.Folder, dest: sh.Folder}}); err != nil {
			return err
		}
	}
	for _, d := range b.spec.State {
		fi, err := b.hostFolder("state folder", d)
		if err != nil {
			return err
		}
		b.add(Op{Kind: OpBindFD, Src: d, Dest: d, Why: "a state folder of this vat (the operator's table)", dir: true, id: idOf(fi)})
		b.trees = append(b.trees, tree{real: d, dest: d})
		b.writable = append(b.writable, d)
		if err := b.maskTrees([]tree{{real: d, dest: d}}); err != nil {
			return err
		}
	}
	return nil
}

// hostFolder checks a folder of the operator's table: an existing real
// folder (not a symlink, none on the way), writable here, and no place a
// wall never binds (the state dir, the credentials directory, /proc and
// the rest of neverSources).
func (b *planner) hostFolder(what, p string) (fs.FileInfo, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return nil, fmt.Errorf("%w: %s %q is not an absolute, clean path", ErrRefusedBind, what, p)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", ErrRefusedBind, what, p, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%w: %s %s is a symlink, not a real folder", ErrSymlink, what, p)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s %s is not a folder", ErrRefusedBind, what, p)
	}
	if r, err := filepath.EvalSymlinks(p); err != nil || r != p {
		return nil, fmt.Errorf("%w: %s %s passes through a symlink (it is really %s)", ErrSymlink, what, p, r)
	}
	if p == b.state || within(p, b.state) || within(b.state, p) {
		return nil, fmt.Errorf("%w: %s %s: the supervisor's state dir (settings, code, other vats' data)", ErrRefusedBind, what, p)
	}
	for _, n := range neverSources {
		if p == n || within(p, n) {
			return nil, fmt.Errorf("%w: %s %s: %s is never a bind source", ErrRefusedBind, what, p, n)
		}
	}
	if b.credDir != "" && (p == b.credDir || within(p, b.credDir)) {
		return nil, fmt.Errorf("%w: %s %s: the supervisor's credentials directory", ErrRefusedBind, what, p)
	}
	if readOnlyMount(p) {
		return nil, fmt.Errorf("%w: %s %s is on a read-only mount here, so the vat could not write it (under the systemd unit, add it to ReadWritePaths= in a drop-in, see docs/systemd.md)", ErrRefusedBind, what, p)
	}
	return fi, nil
}
