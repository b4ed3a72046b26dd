package packages

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Limits bound what a package tree may hold. Those of the code store:
// the tree becomes a bundle the store must take.
type Limits struct {
	// Entries is the most files and folders in the whole tree. If zero,
	// 20000.
	Entries int
	// Bytes is the most the whole tree unpacks to. If zero, 1 GiB.
	Bytes int64
}

func (l Limits) entries() int {
	if l.Entries == 0 {
		return 20000
	}
	return l.Entries
}

func (l Limits) bytes() int64 {
	if l.Bytes == 0 {
		return 1 << 30
	}
	return l.Bytes
}

// tarAllowance is what one entry may add to a tar stream beyond its
// file's bytes: its 512-byte header, a PAX header for a long name, and
// padding to 512 bytes.
const tarAllowance = 8 << 10

// Tree is a package tree being laid out in a folder.
type Tree struct {
	root    *os.Root
	lim     Limits
	entries int
	bytes   int64
	// read is how many bytes the tarballs have unpacked to, entries left
	// out included.
	read int64
}

// streamMax is the most a tree's tarballs may unpack to: the tree's
// bytes and each entry's allowance. It bounds the fetched tarballs too:
// gzip adds at most 5 bytes in 64 KiB to what it cannot shrink, well
// within the allowance.
func (l Limits) streamMax() int64 {
	return l.bytes() + int64(l.entries())*tarAllowance
}

// streamCounter counts what a tarball unpacks to, and fails past the
// tree's streamMax: gzip'd zeros in an entry left out would otherwise be
// read through however long they are.
type streamCounter struct {
	r io.Reader
	t *Tree
}

func (c *streamCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.t.read += int64(n)
	if m := c.t.lim.streamMax(); c.t.read > m {
		return n, fmt.Errorf("%w: the tree's tarballs unpack to more than %d bytes", ErrBadTarball, m)
	}
	return n, err
}

// NewTree lays out into dir, which must exist and be empty. The caller
// closes it.
func NewTree(dir string, lim Limits) (*Tree, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &Tree{root: r, lim: lim}, nil
}

// makeTree makes the folder dir and lays out into it. A folder or link
// already at dir (left there by a prepare step) is refused.
func makeTree(dir string, lim Limits) (*Tree, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %s was there before toybox made it", ErrTreeReplaced, dir)
		}
		return nil, err
	}
	return NewTree(dir, lim)
}

// InPlace reports an error unless dir is still the folder t lays out and
// each of folders is still a folder of it, not a link. It is called after
// a prepare step that ran code with the tree writable: such code can move
// the tree away or put a link in its place, which toybox would otherwise
// read, write and bundle by its path.
func (t *Tree) InPlace(dir string, folders ...string) error {
	want, err := t.root.Stat(".")
	if err != nil {
		return err
	}
	got, err := os.Lstat(dir)
	if err != nil || !got.IsDir() || !os.SameFile(got, want) {
		return fmt.Errorf("%w: %s is no longer the folder toybox laid out", ErrTreeReplaced, dir)
	}
	for _, f := range folders {
		if fi, err := t.root.Lstat(f); err != nil || !fi.IsDir() {
			return fmt.Errorf("%w: %s/%s is no longer a folder", ErrTreeReplaced, dir, f)
		}
	}
	return nil
}

// Recount counts the tree as it is now against its limits, after a
// prepare step wrote into it (install scripts, uv) past Unpack. It reads
// each folder in batches, holds one open at a time, and stops at the
// first limit passed, so a tree of any size costs it no more than the
// limits.
func (t *Tree) Recount() error {
	t.entries, t.bytes = 0, 0
	return t.countDir(".")
}

func (t *Tree) countDir(dir string) error {
	f, err := t.root.Open(dir)
	if err != nil {
		return err
	}
	var subs []string
	for {
		ents, rerr := f.ReadDir(256)
		for _, e := range ents {
			var size int64
			if e.Type().IsRegular() {
				fi, err := e.Info()
				if err != nil {
					f.Close()
					return err
				}
				size = fi.Size()
			}
			if err := t.count(size); err != nil {
				f.Close()
				return err
			}
			if e.IsDir() {
				subs = append(subs, path.Join(dir, e.Name()))
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			f.Close()
			return rerr
		}
	}
	f.Close()
	for _, s := range subs {
		if err := t.countDir(s); err != nil {
			return err
		}
	}
	return nil
}

// removeLinks removes every symlink of the tree.
func (t *Tree) removeLinks() error {
	return fs.WalkDir(t.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return t.root.Remove(p)
		}
		return nil
	})
}

// Close releases the tree's folder.
func (t *Tree) Close() error { return t.root.Close() }

// Unpack extracts an npm tarball (gzip'd tar; its first path component,
// "package/" by custom, stripped) into the folder at rel. As npm does,
// links are left out and so is anything that is neither a file nor a
// folder. A name that climbs out, a file twice, or a tree past the limits
// is refused; so are tarballs that unpack to more than the limits allow,
// entries left out included. Modes become 0644, or 0755 for a file with any execute bit.
// The caller checks the tarball's integrity before calling Unpack.
func (t *Tree) Unpack(r io.Reader, rel string) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%w: %s: gzip: %w", ErrBadTarball, rel, err)
	}
	defer zr.Close()
	if err := t.root.MkdirAll(rel, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", rel, err)
	}
	tr := tar.NewReader(&streamCounter{r: zr, t: t})
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrBadTarball, rel, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		_, name, _ = strings.Cut(name, "/")
		if name == "" {
			continue // the top folder itself
		}
		clean := path.Clean(name)
		if path.IsAbs(name) || clean == ".." || strings.HasPrefix(clean, "../") || strings.ContainsRune(clean, 0) || strings.Contains(name, "\\") {
			return fmt.Errorf("%w: %s: entry %q leaves the package", ErrBadTarball, rel, h.Name)
		}
		p := path.Join(rel, clean)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := t.count(0); err != nil {
				return err
			}
			if err := t.root.MkdirAll(p, 0o755); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrBadTarball, p, err)
			}
		case tar.TypeReg:
			if err := t.count(h.Size); err != nil {
				return err
			}
			if err := t.root.MkdirAll(path.Dir(p), 0o755); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrBadTarball, p, err)
			}
			mode := os.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			if err := t.write(p, io.LimitReader(tr, h.Size), h.Size, mode); err != nil {
				return err
			}
		default:
			// Links, devices, fifos: npm leaves them out too.
		}
	}
}

func (t *Tree) count(size int64) error {
	t.entries++
	if t.entries > t.lim.entries() {
		return fmt.Errorf("%w: the tree holds more than %d entries", ErrBadTarball, t.lim.entries())
	}
	if size < 0 || t.bytes+size > t.lim.bytes() {
		return fmt.Errorf("%w: the tree unpacks to more than %d bytes", ErrBadTarball, t.lim.bytes())
	}
	t.bytes += size
	return nil
}

func (t *Tree) write(p string, r io.Reader, size int64, mode os.FileMode) error {
	f, err := t.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s is written twice", ErrBadTarball, p)
		}
		return fmt.Errorf("%w: %s: %w", ErrBadTarball, p, err)
	}
	n, err := io.Copy(f, r)
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	return t.root.Chmod(p, mode) // whatever the umask took
}

// WriteFile writes one file of toybox's own (manifest.json, the lock).
func (t *Tree) WriteFile(p string, b []byte) error {
	if err := t.count(int64(len(b))); err != nil {
		return err
	}
	if err := t.root.MkdirAll(path.Dir(p), 0o755); err != nil {
		return err
	}
	return t.write(p, strings.NewReader(string(b)), int64(len(b)), 0o644)
}

// PackageJSON is the part of a package's package.json toybox reads.
type PackageJSON struct {
	Name    string            `json:"name"`
	Version string            `json:"version"`
	Bin     json.RawMessage   `json:"bin"`
	Scripts map[string]string `json:"scripts"`
	Engines map[string]string `json:"engines"`
	Gypfile *bool             `json:"gypfile"`
	MCPName string            `json:"mcpName"`
}

// ReadPackageJSON reads <rel>/package.json of the tree.
func (t *Tree) ReadPackageJSON(rel string) (PackageJSON, error) {
	var pj PackageJSON
	f, err := t.root.Open(path.Join(rel, "package.json"))
	if err != nil {
		return pj, fmt.Errorf("%w: %s has no package.json: %w", ErrBadTarball, rel, err)
	}
	defer f.Close()
	if err := json.NewDecoder(io.LimitReader(f, 4<<20)).Decode(&pj); err != nil {
		return pj, fmt.Errorf("%w: %s/package.json: %w", ErrBadTarball, rel, err)
	}
	return pj, nil
}

// NeedsScript reports whether the package at rel runs code at install:
// a preinstall, install or postinstall script, or a binding.gyp (npm then
// runs node-gyp rebuild).
func (t *Tree) NeedsScript(rel string, pj PackageJSON) bool {
	for _, s := range []string{"preinstall", "install", "postinstall"} {
		if strings.TrimSpace(pj.Scripts[s]) != "" {
			return true
		}
	}
	if pj.Gypfile != nil && !*pj.Gypfile {
		return false
	}
	_, err := t.root.Lstat(path.Join(rel, "binding.gyp"))
	return err == nil
}

// Exists reports whether rel is a regular file of the tree.
func (t *Tree) Exists(rel string) bool {
	fi, err := t.root.Lstat(rel)
	return err == nil && fi.Mode().IsRegular()
}

// MakeExecutable sets the execute bits of rel (npm does so for a
// package's bins).
func (t *Tree) MakeExecutable(rel string) error {
	fi, err := t.root.Lstat(rel)
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: bin %s is not a file", ErrBadTarball, rel)
	}
	return t.root.Chmod(rel, 0o755)
}

// Bins reads a package.json "bin": a string (one bin, named as the
// package without its scope) or an object of name to path.
func (pj PackageJSON) Bins() (map[string]string, error) {
	out := map[string]string{}
	if len(pj.Bin) == 0 || string(pj.Bin) == "null" {
		return out, nil
	}
	var one string
	if err := json.Unmarshal(pj.Bin, &one); err == nil {
		_, base, ok := strings.Cut(pj.Name, "/")
		if !ok {
			base = pj.Name
		}
		out[base] = one
		return out, nil
	}
	if err := json.Unmarshal(pj.Bin, &out); err != nil {
		return nil, fmt.Errorf("%w: %s: bin is neither a path nor an object of paths", ErrBadTarball, pj.Name)
	}
	return out, nil
}

// Entry picks the bin a package is started with, as npx does: the one
// named want, else its only bin, else the one named as the package
// (without its scope). It returns the path relative to the package.
func (pj PackageJSON) Entry(want string) (string, error) {
	bins, err := pj.Bins()
	if err != nil {
		return "", err
	}
	if want != "" {
		if p, ok := bins[want]; ok {
			return cleanBin(pj.Name, p)
		}
		return "", fmt.Errorf("%w: %s has no bin %q", ErrBadTarball, pj.Name, want)
	}
	if len(bins) == 1 {
		for _, p := range bins {
			return cleanBin(pj.Name, p)
		}
	}
	_, base, ok := strings.Cut(pj.Name, "/")
	if !ok {
		base = pj.Name
	}
	if p, ok := bins[base]; ok {
		return cleanBin(pj.Name, p)
	}
	if len(bins) == 0 {
		return "", fmt.Errorf("%w: %s has no bin to start", ErrBadTarball, pj.Name)
	}
	return "", fmt.Errorf("%w: %s has %d bins and none is named %s: name one", ErrBadTarball, pj.Name, len(bins), base)
}

func cleanBin(name, p string) (string, error) {
	c := path.Clean(strings.TrimPrefix(p, "./"))
	if p == "" || path.IsAbs(p) || c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: %s: bin %q leaves the package", ErrBadTarball, name, p)
	}
	return c, nil
}
