package store

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// unpack extracts the tar (or tar.gz) at name into dir. Every entry is
// checked before it is written: no absolute paths, no "..", no link that
// leaves the bundle (by its own target or through other links), no devices, fifos or other special files, no duplicate
// names, no entry below a symlink, and the size and entry limits hold. All
// writes go through an os.Root on dir, so even a missed case cannot write
// outside it. Modes are normalised (0644/0755; no setuid, setgid, sticky).
func (s *Store) unpack(name string, gz bool, dir string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	if gz {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("%w: gzip: %w", ErrBadBundle, err)
		}
		defer zr.Close()
		r = zr
	}
	// The tar stream itself is bounded, not only the files it unpacks
	// to: PAX and GNU long-name headers (up to 1 MiB each, any number of
	// them before one entry) are read and dropped, and a gzip of them is
	// a thousand times smaller.
	r = &streamCap{r: r, left: s.cfg.MaxUnpacked + int64(s.cfg.MaxEntries)*headerAllowance}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	seen := map[string]byte{} // clean name -> tar type flag
	var links []string
	var total int64
	entries := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: reading tar: %w", ErrBadBundle, err)
		}
		entries++
		if entries > s.cfg.MaxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, s.cfg.MaxEntries)
		}
		p, err := entryName(h.Name)
		if err != nil {
			return err
		}
		if p == "." {
			if h.Typeflag == tar.TypeDir {
				continue
			}
			return fmt.Errorf("%w: entry %q has no name", ErrBadBundle, h.Name)
		}
		if _, dup := seen[p]; dup {
			return fmt.Errorf("%w: entry %q appears twice", ErrBadBundle, h.Name)
		}
		// The folders this entry makes that no entry named: each counts
		// as an entry, so one long name cannot make folders past the
		// limit. A folder already seen has every folder above it seen
		// too, so the walk up stops there.
		var fresh []string
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			t, ok := seen[d]
			if ok && t == tar.TypeDir {
				break
			}
			if ok {
				return fmt.Errorf("%w: entry %q lies below %q, which is not a directory", ErrBadBundle, h.Name, d)
			}
			fresh = append(fresh, d)
		}
		if len(fresh) > 0 {
			entries += len(fresh)
			if entries > s.cfg.MaxEntries {
				return fmt.Errorf("%w: more than %d entries (folders included)", ErrTooLarge, s.cfg.MaxEntries)
			}
			if err := root.MkdirAll(path.Dir(p), 0o755); err != nil {
				return entryErr("creating", path.Dir(p), err)
			}
			for _, d := range fresh {
				seen[d] = tar.TypeDir
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return entryErr("creating", p, err)
			}
		case tar.TypeReg:
			if h.Size < 0 || total+h.Size > s.cfg.MaxUnpacked {
				return fmt.Errorf("%w: the bundle unpacks to more than %d bytes", ErrTooLarge, s.cfg.MaxUnpacked)
			}
			mode := os.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			out, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return entryErr("creating", p, err)
			}
			n, err := io.Copy(out, io.LimitReader(tr, h.Size))
			total += n
			if err == nil && n != h.Size {
				err = io.ErrUnexpectedEOF
			}
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return entryErr("writing", p, err)
			}
			if err := root.Chmod(p, mode); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := linkInside(p, h.Linkname); err != nil {
				return err
			}
			if err := root.Symlink(h.Linkname, p); err != nil {
				return entryErr("creating link", p, err)
			}
			links = append(links, p)
		case tar.TypeLink:
			target, err := entryName(h.Linkname)
			if err != nil {
				return err
			}
			if seen[target] != tar.TypeReg {
				return fmt.Errorf("%w: hard link %q points at %q, which is not a file earlier in the bundle", ErrBadBundle, h.Name, h.Linkname)
			}
			if err := root.Link(target, p); err != nil {
				return entryErr("creating link", p, err)
			}
		case tar.TypeChar, tar.TypeBlock:
			return fmt.Errorf("%w: entry %q is a device", ErrBadBundle, h.Name)
		case tar.TypeFifo:
			return fmt.Errorf("%w: entry %q is a fifo", ErrBadBundle, h.Name)
		default:
			return fmt.Errorf("%w: entry %q has unsupported type %q", ErrBadBundle, h.Name, string(h.Typeflag))
		}
		seen[p] = h.Typeflag
		if h.Typeflag == tar.TypeLink {
			seen[p] = tar.TypeReg
		}
	}
	if entries == 0 {
		return fmt.Errorf("%w: the tar is empty", ErrBadBundle)
	}
	// Each link's own target stays inside, but links chain (s -> ., t ->
	// s/..): each is followed to its end, through the root, which refuses
	// any step out of the bundle. A link to nothing inside is allowed.
	for _, l := range links {
		if _, err := root.Stat(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: link %q, followed to its end, leaves the bundle or never ends: %w", ErrBadBundle, l, err)
		}
	}
	return nil
}

// entryName checks a tar entry name and returns it clean and relative.
func entryName(name string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("%w: an entry has an empty name", ErrBadBundle)
	case strings.ContainsRune(name, 0):
		return "", fmt.Errorf("%w: entry %q holds a NUL byte", ErrBadBundle, name)
	case strings.HasPrefix(name, "/"):
		return "", fmt.Errorf("%w: entry %q is an absolute path", ErrBadBundle, name)
	case len(name) > maxEntryName:
		return "", fmt.Errorf("%w: an entry's name is %d bytes long, more than %d (%.40q...)", ErrBadBundle, len(name), maxEntryName, name)
	}
	parts := strings.Split(name, "/")
	for _, part := range parts {
		if part == ".." {
			return "", fmt.Errorf("%w: entry %q contains a .. element", ErrBadBundle, name)
		}
	}
	if len(parts) > maxEntryDepth {
		return "", fmt.Errorf("%w: entry %.40q... lies more than %d folders deep", ErrBadBundle, name, maxEntryDepth)
	}
	return path.Clean(name), nil
}

// The longest entry name and the deepest entry a bundle may hold. A tar
// name (PAX, GNU long names) may be 1 MiB, and os.Root makes folders one
// name at a time, however deep: far past PATH_MAX, where the code could
// never be sealed, nor removed by os.RemoveAll (one descriptor per level).
const (
	maxEntryName  = 2048
	maxEntryDepth = 128
)

// linkInside checks that a symlink at p with target stays in the bundle.
func linkInside(p, target string) error {
	switch {
	case target == "":
		return fmt.Errorf("%w: link %q has an empty target", ErrBadBundle, p)
	case path.IsAbs(target):
		return fmt.Errorf("%w: link %q points at the absolute path %q", ErrBadBundle, p, target)
	}
	resolved := path.Clean(path.Join(path.Dir(p), target))
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("%w: link %q -> %q leaves the bundle", ErrBadBundle, p, target)
	}
	return nil
}

// headerAllowance is the tar stream each entry may take beyond its file's
// bytes: its header, PAX records (a name, a link target) and padding.
const headerAllowance = 16 << 10

// streamCap reads at most left bytes of r, then fails with ErrTooLarge.
type streamCap struct {
	r    io.Reader
	left int64
}

func (c *streamCap) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, fmt.Errorf("%w: the bundle's tar stream is longer than its files and headers may take", ErrTooLarge)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// entryErr is the error of creating or writing entry p of a bundle: the
// bundle's fault, unless the host could not store it (a full disk, a quota,
// a read-only or failing one), which no other bundle would fix.
func entryErr(what, p string, err error) error {
	for _, host := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EIO} {
		if errors.Is(err, host) {
			return fmt.Errorf("storing the bundle: %s %q: %w", what, p, err)
		}
	}
	return fmt.Errorf("%w: %s %q: %w", ErrBadBundle, what, p, err)
}
