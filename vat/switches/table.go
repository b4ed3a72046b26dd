package switches

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"toybox/labels"
	"toybox/vat/strictjson"
)

// TablePath is where the operator's table is by default (toybox serve
// --walls-table). A missing file there is an empty table.
const TablePath = "/etc/toybox/walls-table.json"

// maxTable bounds the table file: it is written by hand.
const maxTable = 1 << 20

// Table is the operator's table: what only the operator decides about
// walls. Nothing a vat or its owner can write is in it. It is read from a
// file owned by root that no one else may write (LoadTable).
type Table struct {
	// Approved are the code digests (hex SHA-256) approved to run
	// without a wall, with why.
	Approved []Approval `json:"approved"`
	// Shares are the host folders and credential sets some vats share
	// with the host.
	Shares []Share `json:"shares"`
	// State maps a first-party vat's id to the host folders it keeps
	// state in.
	State map[string][]string `json:"state"`
}

// Approval is one approved command: code that runs unwalled.
type Approval struct {
	SHA256 string `json:"sha256"`
	Why    string `json:"why"`
}

// Share is a host resource some vats share with the host. Exactly one of
// Folder and Env is set.
type Share struct {
	// Name is what the vat's word calls it ("not walled: shares <Name>").
	Name string `json:"name"`
	// Folder is a host folder bound read-write by fd at its real path.
	Folder string `json:"folder,omitempty"`
	// Entries, when set, are the only entries of Folder the vats see;
	// every other one is masked.
	Entries []string `json:"entries,omitempty"`
	// Env is a credential set: environment keys and values the vats get.
	Env map[string]string `json:"env,omitempty"`
	// Vats are the ids of the vats that share it.
	Vats []string `json:"vats"`
}

// tableKeys are the table's keys: one spelled in other letter case is
// refused, not matched to it.
var tableKeys = []string{"approved", "sha256", "why", "shares", "name", "folder", "entries", "env", "vats", "state"}

var (
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// LoadTable reads the operator's table at path. The file, every folder
// above it and every symlink on the way there (resolveRootOnly) must be
// owned by root and writable by no one else (a folder with the sticky
// bit, as /tmp, keeps others from replacing root's entries): otherwise a
// vat's user, or an owner's, could approve code.
// A missing file wraps fs.ErrNotExist.
func LoadTable(path string) (*Table, error) {
	real, err := resolveRootOnly(path)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(real, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the operator's table: %w", &os.PathError{Op: "open", Path: real, Err: err})
	}
	f := os.NewFile(uintptr(fd), real)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("reading the operator's table: %w", os.NewSyscallError("fstat", err))
	}
	if why := statRootOnly(&st, false); why != "" {
		return nil, fmt.Errorf("%w: %s %s", ErrBadTable, path, why)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadTable, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTable+1))
	if err != nil {
		return nil, fmt.Errorf("reading the operator's table %s: %w", path, err)
	}
	if len(data) > maxTable {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadTable, path, maxTable)
	}
	t, err := ParseTable(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// maxLinks bounds the symlinks followed on the way to the table, as the
// kernel's own bound (40) does for a path.
const maxLinks = 40

// resolveRootOnly follows path as the kernel would and returns where it
// leads. Every folder it enters must be root's and writable by no one
// else, and so must every symlink on the way (a link in a folder others
// may write, or one they own in a sticky folder, they may point
// elsewhere). A path that leads nowhere wraps fs.ErrNotExist, whatever
// the folders: a missing table approves nothing.
func resolveRootOnly(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("reading the operator's table: %w", err)
	}
	why := ""
	refuse := func(p, reason string) {
		if why == "" {
			why = fmt.Sprintf("%s: %s %s", path, p, reason)
		}
	}
	cur, links := "/", 0
	if r := rootOnly(cur, true); r != "" {
		refuse("the folder /", r)
	}
	todo := strings.Split(abs, "/")
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // a folder entered already
			continue
		}
		next := filepath.Join(cur, c)
		var st unix.Stat_t
		if err := unix.Lstat(next, &st); err != nil {
			return "", fmt.Errorf("reading the operator's table: %w", &os.PathError{Op: "lstat", Path: next, Err: err})
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if st.Uid != 0 {
				refuse("the symlink "+next, fmt.Sprintf("is owned by uid %d, not root (only root may choose what approves code)", st.Uid))
			}
			if links++; links > maxLinks {
				return "", fmt.Errorf("reading the operator's table: %w", &os.PathError{Op: "open", Path: path, Err: unix.ELOOP})
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", fmt.Errorf("reading the operator's table: %w", err)
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		cur = next
		if slices.ContainsFunc(todo, func(c string) bool { return c != "" && c != "." }) {
			if r := statRootOnly(&st, true); r != "" {
				refuse("the folder "+next, r)
			}
		}
	}
	if why != "" {
		return "", fmt.Errorf("%w: %s", ErrBadTable, why)
	}
	return cur, nil
}

// rootOnly says why the folder or file at p may be written by someone
// other than root, or "".
func rootOnly(p string, dir bool) string {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return "cannot be read: " + err.Error()
	}
	return statRootOnly(&st, dir)
}

func statRootOnly(st *unix.Stat_t, dir bool) string {
	switch {
	case st.Uid != 0:
		return fmt.Sprintf("is owned by uid %d, not root (only root may write what approves code)", st.Uid)
	case st.Mode&0o022 != 0 && !(dir && st.Mode&syscall.S_ISVTX != 0):
		return fmt.Sprintf("is writable by group or others (mode %04o); only root may write it", st.Mode&0o7777)
	}
	return ""
}

// ParseTable reads the operator's table:
//
//	{"approved": [{"sha256": "<hex>", "why": "the data backend"}],
//	 "shares": [{"name": "Crow's database", "folder": "/srv/crow/data",
//	             "entries": ["crow.db", "crow.db-wal", "crow.db-shm"], "vats": ["media"]},
//	            {"name": "Crow's storage", "env": {"S3_KEY": "..."}, "vats": ["media"]}],
//	 "state": {"browser": ["/srv/crow/browser-sessions"]}}
//
// Every key is optional. Unknown and duplicate keys, bad digests, ids,
// paths and names are refused with a message that names the problem.
func ParseTable(data []byte) (*Table, error) {
	if err := strictjson.Keys(data, tableKeys); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadTable, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t Table
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadTable, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the table's closing brace", ErrBadTable)
	}
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadTable, err)
	}
	return &t, nil
}

func (t *Table) check() error {
	for i, a := range t.Approved {
		if !sha256RE.MatchString(a.SHA256) {
			return fmt.Errorf("approved[%d]: sha256 %q is not 64 lower-case hex digits", i, a.SHA256)
		}
	}
	names := map[string]bool{}
	for i, sh := range t.Shares {
		switch {
		case sh.Name == "" || len(sh.Name) > 64 || strings.ContainsFunc(sh.Name, func(r rune) bool { return r < ' ' || r == 0x7f }):
			return fmt.Errorf("shares[%d]: name %q: want 1 to 64 printable characters", i, sh.Name)
		case names[sh.Name]:
			return fmt.Errorf("shares[%d]: the name %q is used twice", i, sh.Name)
		case (sh.Folder == "") == (len(sh.Env) == 0):
			return fmt.Errorf("shares[%d] (%s): want a folder or an env, one of them", i, sh.Name)
		case len(sh.Vats) == 0:
			return fmt.Errorf("shares[%d] (%s): no vats share it", i, sh.Name)
		}
		names[sh.Name] = true
		if sh.Folder != "" {
			if err := hostFolder(sh.Folder); err != nil {
				return fmt.Errorf("shares[%d] (%s): %w", i, sh.Name, err)
			}
		} else if len(sh.Entries) > 0 {
			return fmt.Errorf("shares[%d] (%s): entries need a folder", i, sh.Name)
		}
		for _, e := range sh.Entries {
			if e == "" || e == "." || e == ".." || strings.ContainsRune(e, '/') {
				return fmt.Errorf("shares[%d] (%s): entry %q is not a name in the folder", i, sh.Name, e)
			}
		}
		for k := range sh.Env {
			if !envKeyRE.MatchString(k) || strings.HasPrefix(k, "TOYBOX_") {
				return fmt.Errorf("shares[%d] (%s): env key %q is not a variable a vat may be given", i, sh.Name, k)
			}
		}
		for _, id := range sh.Vats {
			if _, err := labels.ParseVatID(id); err != nil {
				return fmt.Errorf("shares[%d] (%s): %w", i, sh.Name, err)
			}
		}
	}
	for id, dirs := range t.State {
		if _, err := labels.ParseVatID(id); err != nil {
			return fmt.Errorf("state: %w", err)
		}
		for _, d := range dirs {
			if err := hostFolder(d); err != nil {
				return fmt.Errorf("state (%s): %w", id, err)
			}
		}
	}
	return nil
}

func hostFolder(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
		return fmt.Errorf("folder %q: want an absolute, clean path other than /", p)
	}
	return nil
}

// approves reports whether code ("sha256:<hex>", or the bare hex) is an
// approved command.
func (t *Table) approves(code string) bool {
	if t == nil {
		return false
	}
	hex := strings.TrimPrefix(code, "sha256:")
	return slices.ContainsFunc(t.Approved, func(a Approval) bool { return a.SHA256 == hex })
}

// Approvals returns how many commands are approved.
func (t *Table) Approvals() int {
	if t == nil {
		return 0
	}
	return len(t.Approved)
}
