package packages

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// Files is the file manifest of a package bundle: every entry but the
// manifest itself, sorted by path. It is written at install and the
// installed tree is checked against it before every start.
type Files struct {
	Entries []FileEntry `json:"entries"`
}

// FileEntry is one file or folder of a bundle.
type FileEntry struct {
	Path string `json:"path"`
	// Kind is "dir", "file" or "exec" (a file with its execute bits).
	Kind   string `json:"kind"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// epoch is every entry's time in a bundle: the tree's bytes alone decide
// its hash.
var epoch = time.Unix(0, 0).UTC()

// Manifest lists the tree in dir (manifest.json, the lock and the package
// tree, FilesPath excepted), hashing every file. A link or special file is
// an error: a package tree holds none.
func Manifest(dir string) (Files, error) {
	var fl Files
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fl, err
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." || p == FilesPath {
			return nil
		}
		switch {
		case d.IsDir():
			fl.Entries = append(fl.Entries, FileEntry{Path: p, Kind: "dir"})
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%w: %s is neither a file nor a folder", ErrBadTarball, p)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		f, err := root.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return err
		}
		kind := "file"
		if fi.Mode().Perm()&0o100 != 0 {
			kind = "exec"
		}
		fl.Entries = append(fl.Entries, FileEntry{Path: p, Kind: kind, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		return nil
	})
	slices.SortFunc(fl.Entries, func(a, b FileEntry) int { return strings.Compare(a.Path, b.Path) })
	return fl, err
}

// Encode is the manifest's stored form: one entry a line, so two manifests
// compare line by line.
func (fl Files) Encode() []byte {
	var b bytes.Buffer
	b.WriteString("{\"entries\": [\n")
	for i, e := range fl.Entries {
		j, _ := json.Marshal(e)
		b.Write(j)
		if i < len(fl.Entries)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]}\n")
	return b.Bytes()
}

// header is the tar header of one bundle entry: fixed owner, time and
// modes, so the bundle's bytes are a function of the tree alone.
func header(e FileEntry) *tar.Header {
	h := &tar.Header{Name: e.Path, ModTime: epoch, Format: tar.FormatPAX}
	switch e.Kind {
	case "dir":
		h.Typeflag, h.Name, h.Mode = tar.TypeDir, e.Path+"/", 0o755
	case "exec":
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o755, e.Size
	default:
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, e.Size
	}
	return h
}

// WriteBundle writes the bundle of the tree in dir to w: FilesPath first
// (the manifest of everything else), then every entry of fl in order.
// The same tree always gives the same bytes, so the same code hash.
func WriteBundle(w io.Writer, dir string, fl Files) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	_, err = streamBundle(w, root, fl.Encode(), fl, nil)
	return err
}

// streamBundle writes the tar of fl, with files' bytes from root, to w.
// With check set, each file's bytes are also checked against fl while
// they pass: the first that differs is returned (and writing goes on).
func streamBundle(w io.Writer, root *os.Root, filesJSON []byte, fl Files, check *string) (int64, error) {
	tw := tar.NewWriter(w)
	var total int64
	fh := FileEntry{Path: FilesPath, Kind: "file", Size: int64(len(filesJSON))}
	dir := FileEntry{Path: path.Dir(FilesPath), Kind: "dir"}
	// .toybox/ and its files.json come first; the folder is not listed in
	// fl when the lock is its only other file.
	if err := tw.WriteHeader(header(dir)); err != nil {
		return 0, err
	}
	if err := tw.WriteHeader(header(fh)); err != nil {
		return 0, err
	}
	if _, err := tw.Write(filesJSON); err != nil {
		return 0, err
	}
	for _, e := range fl.Entries {
		if e.Path == dir.Path {
			continue
		}
		if err := tw.WriteHeader(header(e)); err != nil {
			return 0, err
		}
		if e.Kind == "dir" {
			continue
		}
		if err := copyEntry(tw, root, e, check); err != nil {
			return 0, err
		}
		total += e.Size
	}
	return total, tw.Close()
}

// copyEntry copies file e from root into tw. A file that is shorter or
// longer than e says still yields e.Size bytes (zeros, or cut), so the
// stream stays well-formed and its hash differs.
func copyEntry(tw io.Writer, root *os.Root, e FileEntry, check *string) error {
	f, err := root.Open(e.Path)
	if err != nil {
		if check == nil {
			return err
		}
		if *check == "" {
			*check = e.Path + " is missing"
		}
		_, err = io.CopyN(tw, zeros{}, e.Size)
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(f, e.Size))
	if err != nil {
		return err
	}
	if n < e.Size {
		if _, err := io.CopyN(tw, zeros{}, e.Size-n); err != nil {
			return err
		}
	}
	if check != nil && *check == "" {
		extra, _ := f.Read(make([]byte, 1))
		if n != e.Size || extra > 0 || hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
			*check = e.Path + " differs from what was installed"
		}
	}
	return nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Verify checks the installed bundle in dir against its code hash digest
// (hex SHA-256 of the bundle's bytes), before a start: the bundle is
// written again from FilesPath and the files on disk, and its hash must
// be digest. A file changed, missing or added, a mode changed, a link
// put in place of a file, or a changed file manifest is refused with
// ErrChanged and the first path that differs.
func Verify(dir, digest string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	filesJSON, err := root.ReadFile(FilesPath)
	if err != nil {
		return fmt.Errorf("%w: its file manifest: %w", ErrChanged, err)
	}
	var fl Files
	if err := json.Unmarshal(filesJSON, &fl); err != nil {
		return fmt.Errorf("%w: its file manifest: %w", ErrChanged, err)
	}
	first := ""
	listed := map[string]string{FilesPath: "file", path.Dir(FilesPath): "dir"}
	for _, e := range fl.Entries {
		listed[e.Path] = e.Kind
	}
	// What is on disk: no entry more, none of another kind.
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." || first != "" {
			return nil
		}
		kind, ok := listed[p]
		switch {
		case !ok:
			first = p + " was added"
		case d.IsDir() != (kind == "dir") || (!d.IsDir() && !d.Type().IsRegular()):
			first = p + " is no longer a " + map[bool]string{true: "folder", false: "file"}[kind == "dir"]
		case !d.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if (fi.Mode().Perm()&0o100 != 0) != (kind == "exec") {
				first = p + " changed its mode"
			}
		}
		if first != "" && d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: reading the tree: %w", ErrChanged, err)
	}
	h := sha256.New()
	if _, err := streamBundle(h, root, filesJSON, fl, &first); err != nil {
		return fmt.Errorf("%w: %w", ErrChanged, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest {
		if first == "" {
			first = "its file manifest was changed"
		}
		return fmt.Errorf("%w: %s (the tree hashes to sha256:%s, not sha256:%s)", ErrChanged, first, got, digest)
	}
	if first != "" {
		return fmt.Errorf("%w: %s", ErrChanged, first)
	}
	return nil
}

// IsBundle reports whether the code in dir is a package bundle (it has a
// file manifest to check).
func IsBundle(dir string) bool {
	_, err := os.Lstat(path.Join(dir, FilesPath))
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}
