package wall

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// tree is a folder bound into the wall: its real host path, and where it
// shows inside (the path the owner typed, which may differ through a
// symlink on the host).
type tree struct{ real, dest string }

// files adds the owner-chosen binds, then the masks for every tree bound so
// far.
func (b *planner) files() error {
	type fileBind struct {
		path string
		rw   bool
		dir  bool
		kind string
	}
	var binds []fileBind
	for _, p := range b.spec.Files.Read {
		binds = append(binds, fileBind{p, false, false, "sandbox.files.read"})
	}
	for _, p := range b.spec.Files.Write {
		binds = append(binds, fileBind{p, true, false, "sandbox.files.write"})
	}
	for _, p := range b.spec.Files.OAuthDir {
		binds = append(binds, fileBind{p, true, true, "sandbox.files.oauthDir"})
	}
	// Writable owner paths first: a command there is refused.
	for _, fb := range binds {
		if fb.rw {
			if r, err := filepath.EvalSymlinks(filepath.Clean(fb.path)); err == nil {
				b.writable = append(b.writable, r)
			}
		}
	}
	// A grant inside a folder the vat can write (its data, its run folder,
	// a write or oauthDir grant) is refused: the vat could rename the
	// grant's parent there and leave a symlink in its place, so that the
	// next start binds whatever that names; and a write bind of the parent
	// would cover a read grant inside it anyway.
	vatWritable := []string{b.data, b.run}
	for _, fb := range binds {
		if fb.rw && filepath.IsAbs(fb.path) {
			typed := filepath.Clean(fb.path)
			vatWritable = append(vatWritable, typed)
			if r, err := filepath.EvalSymlinks(typed); err == nil && r != typed {
				vatWritable = append(vatWritable, r)
			}
		}
	}
	for _, fb := range binds {
		if !filepath.IsAbs(fb.path) {
			return fmt.Errorf("%w: %s path %q is not absolute", ErrRefusedBind, fb.kind, fb.path)
		}
		typed := filepath.Clean(fb.path)
		real, _ := filepath.EvalSymlinks(typed)
		for _, w := range vatWritable {
			if w != "" && (within(typed, w) || (real != "" && within(real, w))) {
				return fmt.Errorf("%w: %s %s lies inside %s, which the vat can write (grant folders side by side, or the outer one alone)", ErrRefusedBind, fb.kind, typed, w)
			}
		}
	}
	for _, fb := range binds {
		typed := filepath.Clean(fb.path)
		if err := b.refuse(typed); err != nil {
			return fmt.Errorf("%s %s: %w", fb.kind, typed, err)
		}
		if err := wallOwnDest(typed); err != nil {
			return fmt.Errorf("%s %s: %w", fb.kind, typed, err)
		}
		real, err := filepath.EvalSymlinks(typed)
		if err != nil {
			return fmt.Errorf("%w: %s %s: %w", ErrRefusedBind, fb.kind, typed, err)
		}
		if err := b.refuse(real); err != nil {
			return fmt.Errorf("%s %s (really %s): %w", fb.kind, typed, real, err)
		}
		fi, err := os.Stat(real)
		if err != nil {
			return fmt.Errorf("%w: %s %s: %w", ErrRefusedBind, fb.kind, typed, err)
		}
		if fb.dir && !fi.IsDir() {
			return fmt.Errorf("%w: %s %s is not a folder", ErrRefusedBind, fb.kind, typed)
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: %s %s is neither a file nor a folder", ErrRefusedBind, fb.kind, typed)
		}
		// A bind keeps the read-only flag of the mount it comes from: a
		// write grant there would start and then fail on every write.
		if fb.rw && readOnlyMount(real) {
			return fmt.Errorf("%w: %s %s is on a read-only mount here, so the vat could not write it (under the systemd unit, ProtectSystem=strict makes every path but the state dir read-only to toybox: add it to ReadWritePaths= in a drop-in, see docs/systemd.md)", ErrRefusedBind, fb.kind, typed)
		}
		kind := OpROBindFD
		if fb.rw {
			kind = OpBindFD
		}
		b.add(Op{Kind: kind, Src: real, Dest: typed, Why: fb.kind, dir: fi.IsDir(), id: idOf(fi)})
		if fi.IsDir() {
			b.trees = append(b.trees, tree{real: real, dest: typed})
		}
	}
	return b.maskTrees(b.trees)
}

// refuse says why p may never be a bind source, or nil.
// wallOwnDest refuses an owner-chosen bind at a place the wall makes
// itself: its root, its /etc (the supervisor's view; files inside it are
// fine) and the vat's run folder.
func wallOwnDest(dest string) error {
	switch dest {
	case "/", "/etc":
		return fmt.Errorf("%w: the wall's own %s cannot be replaced (choose files or folders inside it)", ErrRefusedBind, dest)
	}
	for _, own := range []string{"/run/toybox", "/run/toybox-etc"} {
		if dest == own || within(dest, own) {
			return fmt.Errorf("%w: %s is the wall's own", ErrRefusedBind, own)
		}
	}
	return nil
}

func (b *planner) refuse(p string) error {
	if secretNames[filepath.Base(p)] {
		return fmt.Errorf("%w: a %s file is never bound", ErrRefusedBind, filepath.Base(p))
	}
	if p == b.state || within(p, b.state) {
		if p == b.data || within(p, b.data) {
			return nil // its own data, bound anyway
		}
		return fmt.Errorf("%w: inside the supervisor's state dir (settings, code, other vats' data)", ErrRefusedBind)
	}
	for _, n := range neverSources {
		if p == n || within(p, n) {
			return fmt.Errorf("%w: %s is never a bind source", ErrRefusedBind, n)
		}
	}
	if b.credDir != "" && (p == b.credDir || within(p, b.credDir)) {
		return fmt.Errorf("%w: the supervisor's credentials directory", ErrRefusedBind)
	}
	for _, h := range b.homes {
		if !within(p, h) {
			continue
		}
		rel, _ := filepath.Rel(h, p)
		if strings.HasPrefix(rel, ".") {
			return fmt.Errorf("%w: a hidden entry of the home folder %s", ErrRefusedBind, h)
		}
		for _, bad := range []string{"autostart", "systemd"} {
			if slices.Contains(strings.Split(rel, string(filepath.Separator)), bad) {
				return fmt.Errorf("%w: an %s folder", ErrRefusedBind, bad)
			}
		}
	}
	return nil
}

// maskTrees scans trees and masks every secret in them, plus the state dir,
// the credentials directory and the hidden entries of any home inside them.
func (b *planner) maskTrees(trees []tree) error {
	for _, tr := range trees {
		t := tr.real
		secrets, err := scan(t, b.scanLimit())
		if err != nil {
			return err
		}
		for _, s := range secrets {
			b.mask(s)
		}
		for _, n := range neverSources {
			if within(n, t) {
				b.mask(n)
			}
		}
		for _, inner := range []string{b.state, b.credDir} {
			if inner != "" && (inner == t || within(inner, t)) {
				b.mask(inner)
			}
		}
		for _, h := range b.homes {
			if h != t && !within(h, t) {
				continue
			}
			ents, err := os.ReadDir(h)
			if err != nil {
				continue
			}
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".") {
					b.mask(filepath.Join(h, e.Name()))
				}
			}
		}
	}
	return nil
}

func (b *planner) scanLimit() int {
	if b.spec.ScanLimit > 0 {
		return b.spec.ScanLimit
	}
	return MaxScanEntries
}

// mask hides p (a real host path) wherever it shows inside the wall: in
// each bound tree that holds it, at the tree's destination (the typed path
// of a grant reached through a symlink, not the real one).
func (b *planner) mask(p string) {
	fi, err := os.Lstat(p)
	if err != nil {
		return
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		// A symlinked secret: mask what it names if that is visible.
		r, err := filepath.EvalSymlinks(p)
		if err != nil || !b.visible(r) {
			return
		}
		p = r
		if fi, err = os.Stat(p); err != nil {
			return
		}
	}
	for _, t := range b.trees {
		if p != t.real && !within(p, t.real) {
			continue
		}
		rel, _ := filepath.Rel(t.real, p)
		dest := filepath.Join(t.dest, rel)
		if slices.Contains(b.p.Masks, dest) {
			continue
		}
		b.p.Masks = append(b.p.Masks, dest)
		if fi.IsDir() {
			b.add(Op{Kind: OpMaskDir, Dest: dest, Why: "masked"})
		} else {
			b.add(Op{Kind: OpMaskFile, Dest: dest, Why: "masked"})
		}
	}
}

// visible reports whether host path p is inside a tree bound so far.
func (b *planner) visible(p string) bool {
	for _, t := range b.trees {
		if p == t.real || within(p, t.real) {
			return true
		}
	}
	return false
}

// own adds the vat's own folders (after the owner's trees and their masks,
// so they show through a masked state dir) and its own .env.
func (b *planner) own() error {
	fi, err := os.Stat(b.install)
	if err != nil {
		return fmt.Errorf("install folder: %w", err)
	}
	b.add(Op{Kind: OpROBindFD, Src: b.install, Dest: b.install, Why: "its code, read-only", dir: true, id: idOf(fi)})
	b.trees = append(b.trees, tree{real: b.install, dest: b.install})
	if err := b.maskTrees([]tree{{real: b.install, dest: b.install}}); err != nil {
		return err
	}
	if fi, err = os.Stat(b.data); err != nil {
		return fmt.Errorf("data folder: %w", err)
	}
	b.add(Op{Kind: OpBindFD, Src: b.data, Dest: b.data, Why: "its data, read-write", dir: true, id: idOf(fi)})
	if fi, err = os.Stat(b.run); err != nil {
		return fmt.Errorf("run folder: %w", err)
	}
	b.add(Op{Kind: OpBindFD, Src: b.run, Dest: RunMount, Why: "its HTTP socket", dir: true, id: idOf(fi)})
	if b.spec.OwnEnvFile {
		p := filepath.Join(b.install, ".env")
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			return fmt.Errorf("%w: ownEnvFile: %w", ErrRefusedBind, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%w: ownEnvFile %s is a symlink: it names a file the vat does not own", ErrSymlink, p)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("%w: ownEnvFile %s is not a regular file", ErrRefusedBind, p)
		}
		b.add(Op{Kind: OpROBindFD, Src: p, Dest: p, Why: "ownEnvFile, read-only over its mask", id: idOf(fi)})
	}
	return nil
}

// scan walks the tree at root (not following symlinks) and returns every
// name to mask (.env, .mcp.json and the rest: masked; every unix socket and
// FIFO) at any depth. More than MaxScanEntries entries:
// ErrTreeTooLarge, and the tree is not bound.
func scan(root string, limit int) ([]string, error) {
	var found []string
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("scanning %s for secrets: %w", root, err)
		}
		if n++; n > limit {
			return fmt.Errorf("%w: %s has more than %d entries; not bound", ErrTreeTooLarge, root, limit)
		}
		// A read-only bind still lets the wall connect to a socket in it
		// and write to a FIFO: the supervisor's admin socket, a switchboard
		// socket, docker.sock or an ssh agent would be authority it was
		// never granted. Masked like secrets.
		if p != root && (masked(d.Name()) || d.Type()&(fs.ModeSocket|fs.ModeNamedPipe) != 0) {
			found = append(found, p)
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}
