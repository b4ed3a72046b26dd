// Package store keeps vat code and each vat's record under the state
// directory.
//
// It keeps vat code by SHA-256 and the record of each installed vat under
// the supervisor's state directory:
//
//	<state>/code/<sha256>/   the code, unpacked; never changed once renamed in
//	<state>/vats/<id>.json   what is installed as <id>: code digest, grant, env
//	<state>/vats/<id>.json.good   its good copy, written after it
//	<state>/data/<id>/       the vat's storage
//	<state>/run/<id>/        its runtime folder (the app's socket)
//
// Code arrives as a stream, is hashed while it is written to a temporary file
// in the destination directory, verified, synced, unpacked into a temporary
// folder and only then renamed to its digest. An existing digest is never
// overwritten. Records are written atomically, each followed by its good
// copy; a record that cannot be read falls back to its good copy, and
// without one its vat is listed as damaged, its id and uid kept (Damaged).
package store

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"toybox/labels"
	"toybox/vat/atomicfile"

	"toybox/vat/manifest"
	"toybox/vat/mcp/front"
)

// Defaults for Config's zero values.
const (
	DefaultMaxBody     = 256 << 20
	DefaultMaxUnpacked = 1 << 30
	DefaultMaxEntries  = 20000
)

// Config says where the store lives and how much it accepts.
type Config struct {
	// StateDir is the supervisor's state directory; created (0700) if
	// missing.
	StateDir string
	// MaxBody is the largest upload in bytes. If zero, DefaultMaxBody.
	MaxBody int64
	// MaxUnpacked is the most bytes a bundle may unpack to. If zero,
	// DefaultMaxUnpacked.
	MaxUnpacked int64
	// MaxEntries is the most entries a bundle may hold. If zero,
	// DefaultMaxEntries.
	MaxEntries int
	// Logger receives one record per stored code. If nil, discarded.
	Logger *slog.Logger
	// CodeGID is the group stored code belongs to when the supervisor is
	// root: walls run as other uids and hold it as a supplementary group,
	// so they read their code and no other user of the host does. If
	// zero, RootCodeGID when root; not root, code stays the supervisor's
	// own (its walls run as its uid).
	CodeGID int

	// beforeClimb, if not nil, runs before each step up of a handover's
	// walk (chownTree). Tests set it to move a folder meanwhile.
	beforeClimb func()
}

// RootCodeGID is the default group of stored code under a root supervisor:
// just below the walls' uids (supervisor.Config.UIDBase), a gid no account
// of a normal host has.
const RootCodeGID = 999999

// Stored code is readable by its owner and group only: files 0640 (0750
// when the bundle marks them executable), folders 0750. Bundles routinely
// hold secrets (a .env, credentials files) and the code's path is no
// secret (a wall's mount table and command line show it).
const (
	codeFileMode = 0o640
	codeExecMode = 0o750
	codeDirMode  = 0o750
	// sealMark (in the state dir) records how code/ was sealed, so that
	// code stored by an earlier version (world-readable) is sealed once at
	// Open.
	sealMark = ".code-sealed"
)

// Store is the code store and vat records. Safe for concurrent use.
type Store struct {
	cfg Config
	log *slog.Logger

	// codeMu orders Put's choice of a folder, Pin, Release and Prune.
	codeMu sync.Mutex
	// pins counts, per digest, the holders that keep its code from Prune
	// (an install between Put and saving its record).
	pins map[string]int
}

// Code is one stored version of a vat's code.
type Code struct {
	// Digest is the hex SHA-256 of the uploaded bytes.
	Digest string
	// Dir is <state>/code/<Digest>.
	Dir string
	// Manifest is the bundle's manifest.json, or the default manifest of a
	// single executable.
	Manifest *manifest.Manifest
	// Bundle reports whether the code came as a tar bundle.
	Bundle bool
}

// Ref is the code's reference as the API shows it: "sha256:<hex>".
func (c Code) Ref() string { return "sha256:" + c.Digest }

// Record is what is installed under one vat id.
type Record struct {
	ID labels.VatID `json:"id"`
	// Code is "sha256:<hex>".
	Code string `json:"code"`
	// Egress is the owner's ?egress= value as given ("" for none).
	Egress string `json:"egress,omitempty"`
	// Env holds the owner's values for the manifest's declared keys.
	Env map[string]string `json:"env,omitempty"`
	// Installed is when this version was installed.
	Installed time.Time `json:"installed"`
	// UID is the vat's own host uid (and gid) when the supervisor gives
	// each vat one; 0 otherwise.
	UID int `json:"uid,omitempty"`
	// Limits are the owner's own limits for this vat (within the
	// operator's); a zero field takes the operator's.
	Limits Limits `json:"limits,omitzero"`
	// MCP is the owner's ?mcp= for a single executable ("stdio" or
	// "http"; "" for none).
	MCP string `json:"mcp,omitempty"`
	// Listen is the owner's ?listen= for a single executable: the TCP
	// port its app listens on (0 for none).
	Listen int `json:"listen,omitempty"`
	// MCPProbe is what the install-time probe learned of the vat's MCP
	// server (its era, serverInfo and tools), for the code it names.
	MCPProbe *front.Snapshot `json:"mcp_probe,omitempty"`
}

// Limits are an owner's limits for one vat. A zero field: the operator's.
type Limits struct {
	MemoryMiB int64   `json:"memory_mib,omitempty"`
	CPUs      float64 `json:"cpus,omitempty"`
	DiskMiB   int64   `json:"disk_mib,omitempty"`
}

// exeName is the file a single executable is stored as.
const exeName = "app"

var digestRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Open creates the state layout if needed.
func Open(cfg Config) (*Store, error) {
	if cfg.StateDir == "" {
		return nil, ErrNoStateDir
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxUnpacked == 0 {
		cfg.MaxUnpacked = DefaultMaxUnpacked
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	cfg.StateDir = abs
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("creating state dir: %w", err)
	}
	// The state dir must be traversable by the walls' uid to reach the
	// folders bound for them; each subfolder keeps its own mode.
	if err := os.Chmod(abs, 0o711); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"code", 0o711}, {"vats", 0o700}, {"data", 0o711}, {"run", 0o711}} {
		p := filepath.Join(abs, d.name)
		if err := os.MkdirAll(p, d.mode); err != nil {
			return nil, fmt.Errorf("creating %s: %w", p, err)
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return nil, err
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.CodeGID == 0 && os.Geteuid() == 0:
		cfg.CodeGID = RootCodeGID
	case os.Geteuid() != 0:
		cfg.CodeGID = -1
	}
	st := &Store{cfg: cfg, log: log, pins: map[string]int{}}
	st.removeLeftovers()
	if err := st.sealAll(); err != nil {
		return nil, err
	}
	return st, nil
}

// CodeGID is the group walls must hold to read stored code, or -1 when
// code belongs to the supervisor's own uid (not root).
func (s *Store) CodeGID() int { return s.cfg.CodeGID }

// seal makes the tree at dir (a code folder being stored) readable by its
// owner and code group only. Symlinks are not followed.
func (s *Store) seal(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if s.cfg.CodeGID >= 0 {
			if err := os.Lchown(p, -1, s.cfg.CodeGID); err != nil {
				return fmt.Errorf("sealing code: %w", err)
			}
		}
		var mode fs.FileMode
		switch {
		case d.IsDir():
			mode = codeDirMode
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			mode = codeFileMode
			if fi.Mode()&0o111 != 0 {
				mode = codeExecMode
			}
		default:
			return nil // a symlink: its mode means nothing
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("sealing code: %w", err)
		}
		return nil
	})
}

// sealAll seals every stored code folder once: those an earlier version
// stored world-readable, or for another group. A mark that cannot be
// written is logged: the next Open seals again.
func (s *Store) sealAll() error {
	mark := filepath.Join(s.cfg.StateDir, sealMark)
	want := fmt.Sprintf("files %o/%o, folders %o, group %d\n", codeFileMode, codeExecMode, codeDirMode, s.cfg.CodeGID)
	if b, err := os.ReadFile(mark); err == nil && string(b) == want {
		return nil
	}
	ents, err := os.ReadDir(s.codeDir())
	if err != nil {
		return err
	}
	for _, e := range ents {
		if digestRe.MatchString(e.Name()) && e.IsDir() {
			if err := s.seal(filepath.Join(s.codeDir(), e.Name())); err != nil {
				return err
			}
		}
	}
	s.log.Info("stored code sealed", "code_gid", s.cfg.CodeGID, "folders", len(ents))
	// The mark only spares the next start this walk: a full disk that
	// refuses it must not keep the supervisor from starting.
	if err := writeAtomic(mark, []byte(want)); err != nil {
		s.log.Warn("stored code sealed, but not marked so: the next start seals it again", "error", err.Error())
	}
	return nil
}

// removeLeftovers removes what uploads cut short by a crash left in code/
// (an upload's file, a bundle half unpacked; code Prune was removing): up
// to the size limits each,
// and never visible. Only the supervisor that owns the state dir opens it,
// once at start, so no upload of its own is under way.
func (s *Store) removeLeftovers() {
	ents, err := os.ReadDir(s.codeDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, ".incoming-") || strings.HasPrefix(n, ".unpack-") || strings.HasPrefix(n, trashPrefix) {
			p := filepath.Join(s.codeDir(), n)
			if err := RemoveTree(p); err != nil {
				s.log.Warn("removing an upload's leftover", "path", p, "error", err.Error())
				continue
			}
			s.log.Info("removed an upload's leftover", "path", p)
		}
	}
}

// trashPrefix names a code folder Prune took out of code/ and is removing.
const trashPrefix = ".trash-"

// Prune removes every stored code folder that is neither pinned nor in the
// set used returns, and returns the digests it removed. used is called with
// the pins held still: an install that saves its record and then releases
// its pin does either before it (so used sees the record) or after Prune
// (so the pin protects it). A folder first leaves its place by rename (a
// later Put or Code finds nothing there, never a half-removed tree), then
// is removed. If used fails, nothing is removed.
func (s *Store) Prune(used func() (map[string]bool, error)) ([]string, error) {
	s.codeMu.Lock()
	defer s.codeMu.Unlock()
	keep, err := used()
	if err != nil {
		return nil, fmt.Errorf("unused code kept: %w", err)
	}
	ents, err := os.ReadDir(s.codeDir())
	if err != nil {
		return nil, fmt.Errorf("listing stored code: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		d := e.Name()
		if !e.IsDir() || !digestRe.MatchString(d) || keep[d] || s.pins[d] > 0 {
			continue
		}
		trash, err := os.MkdirTemp(s.codeDir(), trashPrefix+d[:12]+"-")
		if err != nil {
			errs = append(errs, fmt.Errorf("removing sha256:%s: %w", d, err))
			continue
		}
		gone := filepath.Join(trash, d)
		if err := os.Rename(filepath.Join(s.codeDir(), d), gone); err != nil {
			_ = os.Remove(trash)
			errs = append(errs, fmt.Errorf("removing sha256:%s: %w", d, err))
			continue
		}
		removed = append(removed, d)
		if err := RemoveTree(trash); err != nil {
			// Out of sight already; the next Open finishes it.
			errs = append(errs, fmt.Errorf("removing sha256:%s: %w", d, err))
		}
		s.log.Info("code removed: no vat uses it", "code", "sha256:"+d)
	}
	if len(removed) > 0 {
		if err := syncDir(s.codeDir()); err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// StateDir returns the absolute state directory.
func (s *Store) StateDir() string { return s.cfg.StateDir }

// MaxBody returns the upload size limit.
func (s *Store) MaxBody() int64 { return s.cfg.MaxBody }

// recheck refuses an id that does not parse, with ErrBadID. An id is
// parsed where it enters (labels.ParseVatID), so a labels.VatID is well
// formed unless a conversion made it. The methods that write, remove or
// chown a path built from an id check it again all the same: a "../" there
// would act outside the vat's own folders, on another vat's or the
// supervisor's files. Reading a path needs no check.
func recheck(id labels.VatID) error {
	if _, err := labels.ParseVatID(string(id)); err != nil {
		return fmt.Errorf("%w: %w", ErrBadID, err)
	}
	return nil
}

// DataDir returns <state>/data/<id>.
func (s *Store) DataDir(id labels.VatID) string {
	return filepath.Join(s.cfg.StateDir, "data", string(id))
}

// RunDir returns <state>/run/<id>.
func (s *Store) RunDir(id labels.VatID) string {
	return filepath.Join(s.cfg.StateDir, "run", string(id))
}

func (s *Store) codeDir() string { return filepath.Join(s.cfg.StateDir, "code") }

// Put stores code read from r. want, if not empty, is the expected hex
// SHA-256; a mismatch stores nothing. check, if not nil, sees the unpacked
// code (its manifest) before it becomes visible; its error stores nothing.
// The result is the stored code; if the same bytes were stored before, the
// existing copy is returned unchanged. Nothing becomes visible under code/
// unless every check passed. Code Put returns is pinned: Prune leaves it
// until Release (the supervisor's Install releases it once the vat's record
// names it, or once the install gave up).
func (s *Store) Put(r io.Reader, want string, check func(Code) error) (Code, error) {
	want = strings.TrimPrefix(strings.ToLower(want), "sha256:")
	if want != "" && !digestRe.MatchString(want) {
		return Code{}, fmt.Errorf("%w: expected digest %q is not 64 hex digits", ErrBadBundle, want)
	}
	tmp, err := os.CreateTemp(s.codeDir(), ".incoming-*")
	if err != nil {
		return Code{}, fmt.Errorf("creating temp file: %w", err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // after a successful rename this is a no-op
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, s.cfg.MaxBody+1))
	if err != nil {
		tmp.Close()
		return Code{}, fmt.Errorf("receiving code: %w", err)
	}
	if n > s.cfg.MaxBody {
		tmp.Close()
		return Code{}, fmt.Errorf("%w: the body is larger than %d bytes", ErrTooLarge, s.cfg.MaxBody)
	}
	if n == 0 {
		tmp.Close()
		return Code{}, fmt.Errorf("%w: the body is empty", ErrBadBundle)
	}
	digest := hex.EncodeToString(h.Sum(nil))
	if want != "" && want != digest {
		tmp.Close()
		return Code{}, fmt.Errorf("%w: got sha256:%s, want sha256:%s", ErrDigestMismatch, digest, want)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return Code{}, fmt.Errorf("syncing code: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return Code{}, fmt.Errorf("closing code: %w", err)
	}
	final := filepath.Join(s.codeDir(), digest)
	if code, ok, err := s.reuse(digest, check); ok {
		return code, err
	}
	kind, err := sniff(tmpName)
	if err != nil {
		return Code{}, err
	}
	stage, err := os.MkdirTemp(s.codeDir(), ".unpack-*")
	if err != nil {
		return Code{}, fmt.Errorf("creating unpack dir: %w", err)
	}
	defer func() { _ = RemoveTree(stage) }() // gone after a successful rename; else Open retries
	switch kind {
	case kindExecutable:
		if err := os.Rename(tmpName, filepath.Join(stage, exeName)); err != nil {
			return Code{}, fmt.Errorf("placing executable: %w", err)
		}
		if err := os.Chmod(filepath.Join(stage, exeName), 0o755); err != nil {
			return Code{}, err
		}
	case kindTar, kindTarGz:
		if err := s.unpack(tmpName, kind == kindTarGz, stage); err != nil {
			return Code{}, err
		}
	}
	code, err := loadCode(stage, digest)
	if err != nil {
		return Code{}, err
	}
	if check != nil {
		if err := check(code); err != nil {
			return Code{}, err
		}
	}
	if err := s.seal(stage); err != nil {
		return Code{}, err
	}
	if err := syncDir(stage); err != nil {
		return Code{}, err
	}
	// RENAME_NOREPLACE: never overwrite an existing digest, even if one
	// appeared since the check above.
	s.codeMu.Lock()
	err = renameNoReplace(stage, final)
	if err == nil {
		s.pins[digest]++
	}
	s.codeMu.Unlock()
	if err != nil {
		if code, ok, err := s.reuse(digest, check); ok {
			return code, err
		}
		return Code{}, fmt.Errorf("renaming code into place: %w", err)
	}
	if err := syncDir(s.codeDir()); err != nil {
		s.Release(digest)
		return Code{}, err
	}
	code.Dir = final
	s.log.Info("code stored", "code", code.Ref(), "bundle", code.Bundle, "bytes", n)
	return code, nil
}

// reuse pins and returns code already stored under digest (the digest
// names the same bytes; never touched), after check; ok is false when there
// is none.
func (s *Store) reuse(digest string, check func(Code) error) (code Code, ok bool, err error) {
	s.codeMu.Lock()
	_, err = os.Lstat(filepath.Join(s.codeDir(), digest))
	if err == nil {
		s.pins[digest]++
	}
	s.codeMu.Unlock()
	if err != nil {
		return Code{}, false, nil
	}
	code, err = s.Code(digest)
	if err == nil && check != nil {
		err = check(code)
	}
	if err != nil {
		s.Release(digest)
	}
	return code, true, err
}

// Pin keeps the code of digest from Prune until a matching Release.
func (s *Store) Pin(digest string) {
	s.codeMu.Lock()
	s.pins[digest]++
	s.codeMu.Unlock()
}

// Release drops one pin of digest (Put's, or Pin's).
func (s *Store) Release(digest string) {
	s.codeMu.Lock()
	if s.pins[digest] > 1 {
		s.pins[digest]--
	} else {
		delete(s.pins, digest)
	}
	s.codeMu.Unlock()
}

// Code loads stored code by hex digest (or "sha256:<hex>").
func (s *Store) Code(digest string) (Code, error) {
	digest = strings.TrimPrefix(digest, "sha256:")
	if !digestRe.MatchString(digest) {
		return Code{}, fmt.Errorf("%w: %q", ErrNoCode, digest)
	}
	dir := filepath.Join(s.codeDir(), digest)
	if _, err := os.Stat(dir); err != nil {
		return Code{}, fmt.Errorf("%w: sha256:%s: %w", ErrNoCode, digest, err)
	}
	c, err := loadCode(dir, digest)
	if err != nil {
		return Code{}, err
	}
	c.Dir = dir
	return c, nil
}

// loadCode reads the manifest of an unpacked code folder and checks that
// its command exists and can run.
func loadCode(dir, digest string) (Code, error) {
	c := Code{Digest: digest, Dir: dir}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return c, err
	}
	defer root.Close()
	mf, err := root.Open("manifest.json")
	switch {
	case err == nil:
		defer mf.Close()
		m, err := manifest.Parse(mf)
		if err != nil {
			return c, err
		}
		c.Manifest, c.Bundle = m, true
	case errors.Is(err, fs.ErrNotExist):
		if _, err := root.Lstat(exeName); err != nil {
			return c, fmt.Errorf("%w: the bundle has no manifest.json", ErrBadBundle)
		}
		c.Manifest = manifest.Default(exeName)
	default:
		return c, fmt.Errorf("opening manifest.json: %w", err)
	}
	p, err := c.Manifest.CommandPath()
	if err != nil {
		return c, err
	}
	var fi fs.FileInfo
	if filepath.IsAbs(p) {
		fi, err = os.Stat(p)
	} else {
		fi, err = root.Stat(p) // follows links, but only within the bundle
	}
	if err != nil {
		// The command is the bundle's bytes: named quoted, and only so
		// (a PathError would repeat it as written).
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			err = pe.Err
		}
		return c, fmt.Errorf("%w: command %q is missing: %w", ErrBadBundle, c.Manifest.Command[0], err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return c, fmt.Errorf("%w: command %q is not an executable file", ErrBadBundle, c.Manifest.Command[0])
	}
	return c, nil
}

type kind int

const (
	kindExecutable kind = iota + 1
	kindTar
	kindTarGz
)

// sniff tells a single executable from a tar or tar.gz by its first bytes.
func sniff(name string) (kind, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(bufio.NewReader(f), head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")), bytes.HasPrefix(head, []byte("#!")):
		return kindExecutable, nil
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return kindTarGz, nil
	case n >= 262 && bytes.HasPrefix(head[257:], []byte("ustar")):
		return kindTar, nil
	}
	return 0, fmt.Errorf("%w: the body is neither an executable (ELF or #!) nor a tar or tar.gz bundle", ErrBadBundle)
}

// PrepareDirs creates <state>/data/<id> and <state>/run/<id> (0700) owned by
// uid:gid (when uid is not -1), and clears a stale socket from run/. A data
// folder that belonged to another uid is handed over whole (every entry,
// links not followed).
func (s *Store) PrepareDirs(id labels.VatID, uid, gid int) error {
	if err := recheck(id); err != nil {
		return err
	}
	for _, d := range []string{s.DataDir(id), s.RunDir(id)} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("creating %s: %w", d, err)
		}
		fi, err := os.Lstat(d)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s is not a directory", ErrBadState, d)
		}
		if uid != -1 {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != uid || int(st.Gid) != gid) {
				if err := chownTree(d, uid, gid, s.cfg.beforeClimb); err != nil {
					return fmt.Errorf("handing %s to uid %d: %w", d, uid, err)
				}
			}
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return err
		}
	}
	ents, err := os.ReadDir(s.RunDir(id))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := RemoveTree(filepath.Join(s.RunDir(id), e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Retire keeps a removed vat's data for a later install under the same id,
// and nothing else of it: its runtime folder goes, and under root its data
// folder is handed to root (PrepareDirs hands it to the uid of a later
// install). Its uid may go to another vat, which must not own this data.
func (s *Store) Retire(id labels.VatID) error {
	if err := recheck(id); err != nil {
		return err
	}
	if err := RemoveTree(s.RunDir(id)); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return nil
	}
	d := s.DataDir(id)
	fi, err := os.Lstat(d)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrBadState, d)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 && st.Gid == 0 {
		return nil
	}
	// The old uid is locked out first (root owns the folder, 0700); its
	// group goes last, with the walk (chownTree hands the folder itself
	// over at the end): a walk cut short leaves the folder root's but not
	// yet root:root, so the next Retire walks it again.
	if err := os.Lchown(d, 0, -1); err != nil {
		return err
	}
	if err := os.Chmod(d, 0o700); err != nil {
		return err
	}
	return chownTree(d, 0, 0, s.cfg.beforeClimb)
}

// Purge removes a vat's data and runtime folders.
func (s *Store) Purge(id labels.VatID) error {
	if err := recheck(id); err != nil {
		return err
	}
	// The vat's own trees: RemoveTree, not os.RemoveAll (any depth).
	return errors.Join(RemoveTree(s.DataDir(id)), RemoveTree(s.RunDir(id)))
}

func writeAtomic(path string, b []byte) error {
	return atomicfile.WriteFile(path, b, 0o600)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
