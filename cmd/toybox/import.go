package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"toybox/vat/packages"
	"toybox/vat/store"
)

func init() { commands["import"] = importMain }

const importUsage = `usage: toybox import --admin PATH --state DIR [--backups DIR] [--rewrite URL [--rewrite-as auto|http|stdio]] [--allow-scripts NAME[,NAME]] FILE
       toybox import --backups DIR --admin PATH --undo [NAME...]

Installs each server of an MCP client config (Claude Desktop's
claude_desktop_config.json, .mcp.json, VS Code's mcp.json) as a vat
(docs/packages.md). Each entry is backed up first; a server that fails is
left exactly as it was. --undo restores from the backups, newest first.
`

// backup is one server's backup, written before anything of it changes.
type backup struct {
	// Stamp orders backups (newest first on undo).
	Stamp string `json:"stamp"`
	// Name is the server's name in Config; Vat its vat.
	Name string `json:"name"`
	Vat  string `json:"vat"`
	// Config is the client config's path; Key its servers member.
	Config string `json:"config"`
	Key    string `json:"key"`
	// Entry is the server's entry as it was; EntryBytes its bytes as
	// the file had them, comments too, which Entry (re-indented here,
	// its comments made spaces) does not keep.
	Entry      json.RawMessage `json:"entry"`
	EntryBytes string          `json:"entry_bytes,omitempty"`
	// Rewritten says the config was rewritten to the vat's URL;
	// RewrittenTo is the entry written (none in a backup older than it).
	Rewritten   bool            `json:"rewritten"`
	RewrittenTo json.RawMessage `json:"rewritten_to,omitempty"`
	// Data are the files the import copied into the vat's data folder.
	Data []string `json:"data,omitempty"`
	// Undone is when an undo restored it ("" while it is live).
	Undone string `json:"undone,omitempty"`
	// Unrestored says why that undo could not put the entry back (its
	// config was gone); the entry is still here.
	Unrestored string `json:"unrestored,omitempty"`

	file string
	// purge says a rollback in this run removes the vat's data folder
	// too: the folder was not there before (an undone import keeps it).
	purge bool
	// refused says the supervisor refused this run's install: no vat of
	// this import's is there, so a rollback removes none (the vat under
	// its id, if any, is another's).
	refused bool
}

// writeBackup writes b to its file (0600) in dir (0700).
func writeBackup(dir string, b *backup) error {
	if b.file == "" {
		b.file = filepath.Join(dir, b.Stamp+"-"+b.Vat+".json")
	}
	j, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return writeInBackups(dir, b.file, append(j, '\n'))
}

// writeInBackups writes b to path (0600) in the backup folder dir (0700),
// both the folder's owner's (backupDir).
func writeInBackups(dir, path string, b []byte) error {
	uid, gid, err := backupDir(dir)
	if err != nil {
		return err
	}
	return writeFileAs(path, b, 0o600, uid, gid)
}

// backupDir makes the backup folder dir, 0700, or checks the one there.
// Backups hold env values, so a folder others may enter is refused. Its
// mode is left to its owner: it may be /tmp or a home folder.
//
// uid and gid are who the backups in it belong to (-1: the writer). Run
// as root (sudo) for a user whose backups go in their home, they are the
// user's, who reads them and runs the undo. So a folder root makes takes
// the owner of the nearest folder above it there was, and a file made in
// a folder of another's is that owner's.
func backupDir(dir string) (uid, gid int, err error) {
	dir, err = filepath.Abs(dir)
	if err != nil {
		return -1, -1, err
	}
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		above := filepath.Dir(dir)
		for ; above != filepath.Dir(above); above = filepath.Dir(above) {
			if _, err := os.Stat(above); err == nil {
				break
			}
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return -1, -1, err
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return -1, -1, err
		}
		uid, gid, err := ownerFor(above)
		if err != nil || uid < 0 {
			return uid, gid, err
		}
		for p := dir; p != above && p != filepath.Dir(p); p = filepath.Dir(p) {
			if err := os.Lchown(p, uid, gid); err != nil {
				return -1, -1, err
			}
		}
		return uid, gid, nil
	}
	if err != nil {
		return -1, -1, err
	}
	if !fi.IsDir() {
		return -1, -1, fmt.Errorf("the backup folder %s is not a folder", dir)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return -1, -1, fmt.Errorf("the backup folder %s is mode %04o, so others may enter it, and backups hold env values: make it 0700 or name another (--backups)", dir, fi.Mode().Perm())
	}
	return ownerFor(dir)
}

// ownerFor is who a file root makes in folder dir belongs to: dir's owner
// and group when another user owns it, else -1 (the writer).
func ownerFor(dir string) (uid, gid int, err error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return -1, -1, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	if os.Geteuid() != 0 || st.Uid == 0 {
		return -1, -1, nil
	}
	return int(st.Uid), int(st.Gid), nil
}

// testHookWritten, set by a test only, is called once a new file's copy
// f is written, before it is renamed into place.
var testHookWritten func(f *os.File)

// writeFileAs writes b beside path and renames it over path, with mode
// and the owner and group uid and gid (-1: the writer's). The copy beside path (tempName) is its owner's alone
// while it is written: a kill before the rename leaves it, and it may hold
// env values. It gets mode only just before the rename.
func writeFileAs(path string, b []byte, mode fs.FileMode, uid, gid int) error {
	f, err := os.CreateTemp(filepath.Dir(path), tempName(path)+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	// Held until the copy is renamed or removed: a run cleaning up
	// leftovers (removeCopy) leaves a copy in use alone. A kill lets go.
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	if err == nil && (uid >= 0 || gid >= 0) {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Chmod(mode & 0o700)
	}
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Sync()
	}
	if testHookWritten != nil {
		testHookWritten(f)
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// tempName is how the copy of path written before its rename is named,
// before its random part.
func tempName(path string) string {
	return "." + filepath.Base(path) + ".toybox-"
}

// copyAge is how old a copy an older toybox named .<file>.<random> must be
// before it counts as left: that toybox took no lock, and its runs
// rename their copy within a second.
const copyAge = time.Minute

// copyOf reports whether name is a copy of a file named base that a run
// writes before its rename: .<base>.toybox-<random> (ours), or
// .<base>.<random> as an older toybox named it (legacy). The random part
// is os.CreateTemp's, decimal digits.
func copyOf(name, base string) (ok, legacy bool) {
	rest, found := strings.CutPrefix(name, "."+base+".")
	if !found {
		return false, false
	}
	digits, ours := strings.CutPrefix(rest, "toybox-")
	return isRandom(digits), !ours
}

// isRandom reports whether s is os.CreateTemp's random part: a uint32 in
// decimal.
func isRandom(s string) bool {
	if s == "" || len(s) > 10 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// backupCopy matches a copy of a backup (<stamp>-<vat>.json,
// <stamp>-config-<file>) a run writes before its rename, with the part
// after the stamp and the random part as copyOf reads them.
var backupCopy = regexp.MustCompile(`^\.([0-9]{8}T[0-9]{6}\.[0-9]{9}Z-[0-9]{4,}-.+)$`)

// removeCopy removes the copy p of a file a run of import left, unless a
// run writes it now: one that holds its lock, or a legacy copy newer than
// copyAge. It reports whether it removed it.
func removeCopy(p string, legacy bool) (bool, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || (legacy && time.Since(fi.ModTime()) < copyAge) {
		return false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil // a run writes it now
		}
		return false, &fs.PathError{Op: "flock", Path: p, Err: err}
	}
	// The name may have been renamed away and taken by another copy.
	if now, err := os.Lstat(p); err != nil || !os.SameFile(fi, now) {
		return false, nil
	}
	return true, os.Remove(p)
}

// removeLeftovers removes the copies of config (through a link) that a
// run killed before its rename left beside it, saying so: each may hold
// the owner's env values. A copy a run writes now is left to it.
func removeLeftovers(config string) {
	real, err := filepath.EvalSymlinks(config)
	if err != nil {
		return
	}
	dir, base := filepath.Dir(real), filepath.Base(real)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		// Only toybox's own name: an older toybox's .<file>.<digits>
		// cannot be told from a copy the owner made beside the config
		// (.<file>.<a timestamp>), which is not toybox's to remove.
		if ok, legacy := copyOf(e.Name(), base); !ok || legacy || !e.Type().IsRegular() {
			continue
		}
		reportRemoved(filepath.Join(dir, e.Name()), real, false)
	}
}

// removeBackupLeftovers removes the copies of backups a run killed before
// its rename left in the backup folder dir, saying so: each holds a
// server's entry and its env values. Only in a folder no one else may
// enter: in a shared one, a copy may be another user's. A copy a run
// writes now is left to it.
func removeBackupLeftovers(dir string) {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		m := backupCopy.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		i := strings.LastIndexByte(m[1], '.')
		if ok, legacy := copyOf(e.Name(), m[1][:i]); ok {
			reportRemoved(filepath.Join(dir, e.Name()), filepath.Join(dir, m[1][:i]), legacy)
		}
	}
}

// reportRemoved removes the copy p of file of a killed run (removeCopy),
// saying what it did.
func reportRemoved(p, file string, legacy bool) {
	removed, err := removeCopy(p, legacy)
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "toybox import: %s, a copy of %s a killed run left, may hold env values: removing it: %v\n", p, file, err)
	case removed:
		fmt.Fprintf(os.Stderr, "toybox import: removed %s, a copy of %s a killed run left\n", p, file)
	}
}

// writeConfig writes a client's config as writeFileAs does, through
// a link at path: the link is the owner's (a dotfiles checkout, say), so
// its target is the file that changes and the link stays. The new file
// keeps the old one's owner and group: run by root on an owner's 0600
// config, it would otherwise be root's, and the client could not read it.
func writeConfig(path string, b []byte, mode fs.FileMode) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	if err := writable(real); err != nil {
		return err
	}
	removeLeftovers(real)
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: real, Err: err}
	}
	uid, gid := int(st.Uid), int(st.Gid)
	if uid == os.Geteuid() && gid == os.Getegid() {
		uid, gid = -1, -1
	}
	return writeFileAs(real, b, mode, uid, gid)
}

// maxConfig bounds a client config: they are a few KiB, and a larger
// file is not one.
const maxConfig = 16 << 20

// readConfig reads a client config: a regular file (through a link) of
// at most maxConfig bytes. A fifo or a device would hang the read or
// never end.
func readConfig(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > maxConfig {
		return nil, fmt.Errorf("%s is larger than a client config may be (%d bytes, at most %d)", path, fi.Size(), maxConfig)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfig {
		return nil, fmt.Errorf("%s is larger than a client config may be (at most %d bytes)", path, maxConfig)
	}
	return b, nil
}

// writable refuses a config its owner made read-only: a rename would
// replace it all the same.
func writable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o200 == 0 {
		return fmt.Errorf("%s is read-only (mode %04o): make it writable to have it rewritten", path, fi.Mode().Perm())
	}
	return nil
}

// defaultBackups is the backup folder when --backups is not given:
// $XDG_STATE_HOME/toybox/import-backups, else under the home folder. Run
// as root by sudo, that is the home of the user who ran sudo (SUDO_UID),
// whose config it is, not root's: why says so. getenv reads the
// environment; homeOf finds a user's home folder by uid.
func defaultBackups(getenv func(string) string, euid int, homeOf func(uid string) (string, error)) (dir, why string) {
	const sub = "toybox/import-backups"
	if d := getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, sub), ""
	}
	if u := getenv("SUDO_UID"); euid == 0 && u != "" && u != "0" {
		if home, err := homeOf(u); err == nil {
			dir := filepath.Join(home, ".local", "state", sub)
			return dir, fmt.Sprintf("run by sudo for uid %s: the backups go to %s, in that user's home, and are theirs", u, dir)
		}
	}
	home := getenv("HOME")
	if home == "" {
		return "toybox-import-backups", ""
	}
	return filepath.Join(home, ".local", "state", sub), ""
}

// homeOf is user uid's home folder, which must be there.
func homeOf(uid string) (string, error) {
	u, err := user.LookupId(uid)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(u.HomeDir); err != nil || !fi.IsDir() || !filepath.IsAbs(u.HomeDir) {
		return "", fmt.Errorf("user %s has no home folder (%s)", uid, u.HomeDir)
	}
	return u.HomeDir, nil
}

func importMain(args []string) int {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), importUsage)
		fs.PrintDefaults()
	}
	adminPath := fs.String("admin", "admin.sock", "the supervisor's admin socket")
	state := fs.String("state", "", "the supervisor's state directory: a file an entry names is copied into its vat's data folder there")
	defBackups, why := defaultBackups(os.Getenv, os.Geteuid(), homeOf)
	backups := fs.String("backups", defBackups, "the backup folder (0700, files 0600)")
	rewrite := fs.String("rewrite", "", "rewrite each imported entry of the config to this toybox's endpoint, URL/<vat>/mcp (such as http://localhost:8787)")
	rewriteAs := fs.String("rewrite-as", "auto", "what a rewritten entry is: http ({\"type\": \"http\", \"url\": ...}), stdio (toybox stdio URL, for clients that launch stdio servers only), auto (stdio for Claude Desktop's claude_desktop_config.json, else http)")
	allow := fs.String("allow-scripts", "", "packages whose install scripts may run, as ?allow-scripts=")
	undo := fs.Bool("undo", false, "restore the named servers (none: every one) from their backups, newest first")
	timeout := fs.Duration("timeout", 15*time.Minute, "how long one server's install may take")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	a := newAdmin(*adminPath, *timeout)
	if why != "" && *backups == defBackups {
		fmt.Fprintln(os.Stderr, "toybox import:", why)
	}
	if *undo {
		return undoImport(a, *backups, fs.Args())
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	if *rewrite != "" {
		// The vat's path follows the URL: a query or a fragment would
		// take it in.
		if u, err := url.Parse(*rewrite); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
			fmt.Fprintf(os.Stderr, "toybox import: --rewrite %q: want http(s)://host[:port][/path], with no query or fragment\n", *rewrite)
			return exitUsage
		}
	}
	switch *rewriteAs {
	case "auto", "http", "stdio":
	default:
		fmt.Fprintf(os.Stderr, "toybox import: --rewrite-as %q: want auto, http or stdio\n", *rewriteAs)
		return exitUsage
	}
	im := importer{a: a, state: *state, backups: *backups, rewrite: strings.TrimRight(*rewrite, "/"), rewriteAs: *rewriteAs, allow: *allow}
	return im.run(fs.Arg(0))
}

type importer struct {
	a              admin
	state, backups string
	rewrite, allow string
	rewriteAs      string // auto, http or stdio
	config         string
	cc             packages.ClientConfig
	done           []*backup // this run's imported servers
	failed         int
	stampN         int
	lookPath       func(string) (string, error)
	now            func() time.Time
	copyLimits     packages.Limits
}

func (im *importer) run(file string) int {
	abs, err := filepath.Abs(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toybox import:", err)
		return exitError
	}
	im.config = abs
	b, err := readConfig(abs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toybox import:", err)
		return exitError
	}
	// What killed runs left: copies of this config and of backups.
	removeLeftovers(abs)
	removeBackupLeftovers(im.backups)
	if im.cc, err = packages.ParseClientConfig(b); err != nil {
		fmt.Fprintf(os.Stderr, "toybox import %s: %v\n", file, err)
		return exitError
	}
	if im.rewrite != "" {
		if err := writable(abs); err != nil {
			fmt.Fprintf(os.Stderr, "toybox import: %v; nothing was imported\n", err)
			return exitError
		}
	}
	im.lookPath, im.now = exec.LookPath, time.Now
	im.copyLimits = packages.Limits{Entries: store.DefaultMaxEntries, Bytes: store.DefaultMaxUnpacked}
	for _, name := range im.cc.Names() {
		// A remote entry (such as one a rewrite made) is no failure.
		if e, err := im.cc.Entry(name); err == nil && e.Remote() {
			fmt.Printf("%s\tremote (url): nothing to install, left as it is\n", term(name))
			continue
		}
		bk, err := im.one(name)
		if err != nil {
			im.failed++
			fmt.Fprintf(os.Stderr, "toybox import: %s: left as it was: %s\n", term(name), term(err.Error()))
			continue
		}
		im.done = append(im.done, bk)
		// With --rewrite a server is imported only once its entry is.
		if im.rewrite == "" {
			fmt.Printf("%s\timported as vat %s\n", term(name), bk.Vat)
		}
	}
	if im.rewrite != "" && len(im.done) > 0 {
		if err := im.rewriteConfig(); err != nil {
			fmt.Fprintf(os.Stderr, "toybox import: rewriting %s: %v; every server is left as it was\n", file, err)
			for _, bk := range im.done {
				im.rollback(bk)
			}
			return exitError
		}
		for _, bk := range im.done {
			fmt.Printf("%s\timported as vat %s\n", term(bk.Name), bk.Vat)
		}
	}
	if im.failed > 0 {
		return exitError
	}
	return exitOK
}

// stamp is a new backup's stamp: the time, then a count, so two in one
// run keep their order.
func (im *importer) stamp() string {
	im.stampN++
	return im.now().UTC().Format("20060102T150405.000000000Z") + "-" + fmt.Sprintf("%04d", im.stampN)
}

// onlyNew is the header of a PUT /<vat> that installs only a vat that is
// not there: one that is, is refused (412) and left as it is.
var onlyNew = http.Header{"If-None-Match": {"*"}}

// one imports server name: every change it makes is undone if a later
// step fails, and its backup is dropped.
func (im *importer) one(name string) (*backup, error) {
	id := packages.VatID(name)
	if id == "" {
		return nil, fmt.Errorf("its name makes no vat id")
	}
	e, err := im.cc.Entry(name)
	if err != nil {
		return nil, err
	}
	dataDir := ""
	if im.state != "" {
		st, err := filepath.Abs(im.state)
		if err != nil {
			return nil, err
		}
		if real, err := filepath.EvalSymlinks(st); err == nil {
			st = real
		}
		dataDir = filepath.Join(st, "data", id)
	}
	plan, err := packages.PlanImport(name, e, im.lookPath, dataDir)
	if err != nil {
		return nil, err
	}
	if len(plan.DataFiles) > 0 && im.state == "" {
		return nil, fmt.Errorf("it names files in its folder (%s): give --state so they are copied into its data folder", strings.Join(slices.Sorted(maps.Keys(plan.DataFiles)), ", "))
	}
	if code, b, err := im.a.do(http.MethodGet, "/"+id, nil); err != nil {
		return nil, err
	} else if code == http.StatusOK {
		return nil, fmt.Errorf("vat %s already exists: remove it or rename the server", id)
	} else if code != http.StatusNotFound {
		return nil, fmt.Errorf("asking for vat %s: %w", id, adminError(code, b))
	}
	q := packageQuery{allowScripts: im.allow}
	if plan.Env != nil {
		b, _ := json.Marshal(plan.Env)
		q.env, q.envSet = string(b), true
	}
	// The bundle of a checkout is made before anything changes.
	var body []byte
	if plan.Kind == packages.ImportCheckout {
		if body, err = im.checkoutBundle(plan); err != nil {
			return nil, err
		}
	}
	bk := &backup{Stamp: im.stamp(), Name: name, Vat: id, Config: im.config, Key: im.cc.Key, Entry: im.cc.Servers[name], EntryBytes: string(im.cc.Written(name))}
	// A data folder already there (an undone import's) is the owner's: a
	// failure keeps it. Without --state that is not known, so it is kept.
	if dataDir != "" {
		if _, err := os.Lstat(dataDir); errors.Is(err, fs.ErrNotExist) {
			bk.purge = true
		}
	}
	if err := writeBackup(im.backups, bk); err != nil {
		return nil, fmt.Errorf("writing its backup: %w", err)
	}
	fail := func(err error) (*backup, error) {
		im.rollback(bk)
		return nil, err
	}
	// Only a new vat is installed (If-None-Match: *): the GET above
	// answers for its moment only, and another import or install of the
	// same id may come between it and this PUT. A refusal, of that or of
	// anything else, made no vat: the rollback removes none. A request
	// that got no answer may have made one: the rollback removes it.
	switch plan.Kind {
	case packages.ImportLauncher:
		code, b, err := im.a.doWith(http.MethodPut, "/"+id+"?"+q.values(launcherParam(plan.Launcher)).Encode(), onlyNew, nil)
		if err != nil {
			return fail(err)
		}
		if err := newVat(code, b); err != nil {
			bk.refused = true
			return fail(err)
		}
	case packages.ImportCheckout:
		v := url.Values{}
		if q.envSet {
			v.Set("env", q.env)
		}
		code, b, err := im.a.doWith(http.MethodPut, "/"+id+"?"+v.Encode(), onlyNew, bytes.NewReader(body))
		if err != nil {
			return fail(err)
		}
		if err := newVat(code, b); err != nil {
			bk.refused = true
			return fail(err)
		}
	}
	if len(plan.DataFiles) > 0 {
		if err := im.copyData(bk, plan); err != nil {
			return fail(fmt.Errorf("copying its files into its data folder: %w", err))
		}
		if err := writeBackup(im.backups, bk); err != nil {
			return fail(fmt.Errorf("writing its backup: %w", err))
		}
		// It starts again with its files in place.
		if code, b, err := im.a.do(http.MethodPost, "/"+id+"/restart", nil); err != nil {
			return fail(err)
		} else if code != http.StatusOK {
			return fail(adminError(code, b))
		}
	}
	return bk, nil
}

// newVat reads an import's PUT answer: nil when it made the vat (201, or
// 503 with the vat's status: installed, but off), else the refusal, which
// made none. With If-None-Match: * a 200 (an upgrade) cannot come; it is
// refused all the same.
func newVat(status int, body []byte) error {
	if status == http.StatusOK {
		return fmt.Errorf("%d: it upgraded a vat already there", status)
	}
	_, err := installAnswer(status, body)
	return err
}

// checkoutBundle copies plan's folder (without .git, node_modules, .venv,
// __pycache__), compares the copy entry by entry, and bundles it.
func (im *importer) checkoutBundle(plan packages.ImportPlan) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "toybox-import-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "copy")
	if err := packages.CopyCheckout(plan.Source, dir, im.copyLimits); err != nil {
		return nil, err
	}
	env := slices.Sorted(maps.Keys(plan.Env))
	var buf bytes.Buffer
	if err := packages.CheckoutBundle(&buf, dir, plan.Command, env, []byte(`{"transport":"stdio"}`)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// copyData copies the files plan names into the vat's data folder, owned
// by the vat's uid. A file already there is kept if it is the same, and
// fails the import otherwise.
func (im *importer) copyData(bk *backup, plan packages.ImportPlan) error {
	_, b, err := im.a.do(http.MethodGet, "/"+bk.Vat, nil)
	if err != nil {
		return err
	}
	var st struct {
		UID int `json:"uid"`
	}
	_ = json.Unmarshal(b, &st)
	for _, src := range slices.Sorted(maps.Keys(plan.DataFiles)) {
		dst := plan.DataFiles[src]
		fi, err := os.Lstat(filepath.Dir(dst))
		if err != nil || !fi.IsDir() {
			return fmt.Errorf("the data folder %s is not a folder", filepath.Dir(dst))
		}
		want, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if fi, err := os.Lstat(dst); err == nil {
			have, rerr := os.ReadFile(dst)
			if !fi.Mode().IsRegular() || rerr != nil || !bytes.Equal(have, want) {
				return fmt.Errorf("%s is already there and differs", dst)
			}
			continue
		}
		sfi, err := os.Stat(src)
		if err != nil {
			return err
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, sfi.Mode().Perm()|0o600)
		if err != nil {
			return err
		}
		bk.Data = append(bk.Data, dst)
		_, err = f.Write(want)
		if err == nil && st.UID > 0 {
			err = f.Chown(st.UID, st.UID)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// rollback undoes what importing bk did in this run: the vat it made (it
// did not exist before) goes with the files copied into its data folder,
// and its backup is dropped. Its data folder goes too unless it was there
// before (bk.purge).
func (im *importer) rollback(bk *backup) {
	q := ""
	if bk.purge {
		q = "?purge=1"
	}
	// An install that was refused left no vat of this import's.
	if !bk.refused {
		if code, _, err := im.a.do(http.MethodDelete, "/"+bk.Vat+q, nil); err != nil || code != http.StatusOK && code != http.StatusNotFound {
			fmt.Fprintf(os.Stderr, "toybox import: %s: removing vat %s again: %d %v; its backup %s is kept\n", term(bk.Name), bk.Vat, code, err, bk.file)
			return
		}
	}
	for _, p := range bk.Data {
		_ = os.Remove(p)
	}
	_ = os.Remove(bk.file)
}

// rewriteConfig points each imported entry at its vat's endpoint, after a
// copy of the whole config is kept in the backup folder.
func (im *importer) rewriteConfig() error {
	orig, err := readConfig(im.config)
	if err != nil {
		return err
	}
	fi, err := os.Stat(im.config)
	if err != nil {
		return err
	}
	cc, err := packages.ParseClientConfig(orig)
	if err != nil {
		return err
	}
	// An entry changed since it was read (by the client, or its owner)
	// is theirs: its server is left as it is now. One only laid out
	// anew (a client saving its settings) is taken as it is now.
	kept := im.done[:0]
	for _, bk := range im.done {
		cur, ok := cc.Servers[bk.Name]
		if !ok || cc.Key != bk.Key || !sameJSON(cur, bk.Entry) {
			im.failed++
			fmt.Fprintf(os.Stderr, "toybox import: %s: its entry in %s changed during the import: left as it is now\n", term(bk.Name), im.config)
			im.rollback(bk)
			continue
		}
		bk.EntryBytes = string(cc.Written(bk.Name))
		kept = append(kept, bk)
	}
	im.done = kept
	if len(im.done) == 0 {
		return nil
	}
	if err := writeInBackups(im.backups, filepath.Join(im.backups, im.done[0].Stamp+"-config-"+filepath.Base(im.config)), orig); err != nil {
		return err
	}
	// A client that launches stdio servers only gets toybox stdio, from
	// the file running now.
	var stdio []string
	if im.rewriteAs == "stdio" || im.rewriteAs == "auto" && strings.EqualFold(filepath.Base(im.config), claudeDesktopConfig) {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding toybox's own file for its stdio entries: %w", err)
		}
		stdio = []string{self, "stdio"}
	}
	set := map[string]json.RawMessage{}
	for _, bk := range im.done {
		e := rewrittenEntry(cc.Servers[bk.Name], im.rewrite+"/"+bk.Vat+"/mcp", stdio)
		set[bk.Name] = e
		bk.RewrittenTo = e
	}
	out, err := cc.Rewrite(set)
	if err != nil {
		return err
	}
	for _, bk := range im.done {
		bk.Rewritten = true
		if err := writeBackup(im.backups, bk); err != nil {
			return err
		}
	}
	if err := writeConfig(im.config, out, fi.Mode().Perm()); err != nil {
		for _, bk := range im.done {
			bk.Rewritten, bk.RewrittenTo = false, nil
			_ = writeBackup(im.backups, bk)
		}
		return err
	}
	return nil
}

// launchKeys are the members of a stdio entry that say how to start it.
var launchKeys = []string{"type", "transport", "command", "args", "env", "envFile", "cwd", "url"}

// claudeDesktopConfig is Claude Desktop's config file, whose entries it
// reads as stdio servers alone: a url entry there is skipped, or stops it
// from starting.
const claudeDesktopConfig = "claude_desktop_config.json"

// rewrittenEntry is entry old pointed at url: its launchKeys give way to
// {"type": "http", "url": url}, or with stdio (toybox's file and its
// stdio command) to {"command": stdio[0], "args": [stdio[1], url]}; every
// other member (Cline's "disabled" and "autoApprove", say) is kept.
func rewrittenEntry(old json.RawMessage, url string, stdio []string) json.RawMessage {
	m := map[string]json.RawMessage{}
	_ = json.Unmarshal(old, &m)
	for _, k := range launchKeys {
		delete(m, k)
	}
	if len(stdio) == 2 {
		m["command"], _ = json.Marshal(stdio[0])
		m["args"], _ = json.Marshal([]string{stdio[1], url})
		b, _ := json.Marshal(m)
		return b
	}
	m["type"], _ = json.Marshal("http")
	m["url"], _ = json.Marshal(url)
	b, _ := json.Marshal(m)
	return b
}

// liveBackups lists the backups not yet undone, newest first. A file that
// does not read as a backup of its own name is skipped.
func liveBackups(dir string) ([]*backup, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*backup
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var bk backup
		if json.Unmarshal(b, &bk) != nil || bk.Vat == "" || e.Name() != bk.Stamp+"-"+bk.Vat+".json" || packages.VatID(bk.Vat) != bk.Vat {
			continue
		}
		if bk.Undone != "" {
			continue
		}
		bk.file = p
		out = append(out, &bk)
	}
	slices.SortFunc(out, func(a, b *backup) int { return strings.Compare(b.Stamp, a.Stamp) })
	return out, nil
}

// undoImport restores the named servers (none: all) from their live
// backups, newest first: the entry goes back into its config, the vat is
// taken out of service (its data folder and stored code stay), and the
// backup is marked undone. Nothing is deleted.
func undoImport(a admin, dir string, names []string) int {
	removeBackupLeftovers(dir)
	live, err := liveBackups(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toybox import --undo:", err)
		return exitError
	}
	n, bad := 0, 0
	for _, bk := range live {
		if len(names) > 0 && !slices.Contains(names, bk.Name) && !slices.Contains(names, bk.Vat) {
			continue
		}
		n++
		removed, err := undoOne(a, bk)
		if err != nil {
			bad++
			fmt.Fprintf(os.Stderr, "toybox import --undo: %s: %s; its backup %s stays live\n", term(bk.Name), term(err.Error()), bk.file)
			continue
		}
		if bk.Unrestored != "" {
			// The vat is out of service, but the entry is not back.
			bad++
			fmt.Fprintf(os.Stderr, "toybox import --undo: %s: vat %s removed, but its entry was not put back: %s; the entry as it was is in its backup %s, now marked undone\n", term(bk.Name), bk.Vat, term(bk.Unrestored), bk.file)
			continue
		}
		if removed {
			fmt.Printf("%s\trestored (vat %s removed, its data kept)\n", term(bk.Name), bk.Vat)
		} else {
			fmt.Printf("%s\trestored (vat %s was no longer installed)\n", term(bk.Name), bk.Vat)
		}
	}
	if n == 0 {
		fmt.Println("nothing to undo")
	}
	if bad > 0 {
		return exitError
	}
	return exitOK
}

// sameJSON reports whether a and b are the same JSON value, comments and
// trailing commas aside (packages.PlainJSON). A missing value (nil) is no
// value.
func sameJSON(a, b json.RawMessage) bool {
	var va, vb any
	pa, _ := packages.PlainJSON(a)
	pb, _ := packages.PlainJSON(b)
	if json.Unmarshal(pa, &va) != nil || json.Unmarshal(pb, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// undoOne restores bk's entry and removes its vat; removed says the vat was
// there to remove (not removed meanwhile by other means). A config that is
// gone (deleted or moved) cannot take its entry back: the vat is removed
// all the same and bk.Unrestored says why the entry is not back. Kept
// live, the backup would fail every later undo the same way.
func undoOne(a admin, bk *backup) (removed bool, err error) {
	fi, err := os.Stat(bk.Config)
	switch {
	case !bk.Rewritten:
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR):
		bk.Unrestored = fmt.Sprintf("its config %s is gone (deleted or moved)", bk.Config)
	case err != nil:
		return false, err
	default:
		// An import killed before its rename left its copy beside it.
		removeLeftovers(bk.Config)
		b, err := readConfig(bk.Config)
		if err != nil {
			return false, err
		}
		cc, err := packages.ParseClientConfig(b)
		if err != nil {
			return false, err
		}
		if cc.Key != bk.Key {
			return false, fmt.Errorf("%s now keeps its servers in %s, not %s", bk.Config, cc.Key, bk.Key)
		}
		switch cur := cc.Servers[bk.Name]; {
		case sameJSON(cur, bk.Entry):
			// Already as it was: the import was killed before it
			// renamed its config over the old one.
		case bk.RewrittenTo != nil && !sameJSON(cur, bk.RewrittenTo):
			// An entry the owner changed since is theirs.
			return false, fmt.Errorf("its entry in %s changed since the import, so it is left as it is (the entry as it was is in the backup)", bk.Config)
		default:
			old := bk.Entry
			if raw := json.RawMessage(bk.EntryBytes); sameJSON(raw, bk.Entry) {
				old = raw
			}
			out, err := cc.Rewrite(map[string]json.RawMessage{bk.Name: old})
			if err != nil {
				return false, err
			}
			if err := writeConfig(bk.Config, out, fi.Mode().Perm()); err != nil {
				return false, err
			}
		}
	}
	code, b, err := a.do(http.MethodDelete, "/"+bk.Vat, nil)
	if err != nil {
		return false, err
	}
	if code != http.StatusOK && code != http.StatusNotFound {
		return false, adminError(code, b)
	}
	bk.Undone = time.Now().UTC().Format(time.RFC3339Nano)
	return code == http.StatusOK, writeBackup(filepath.Dir(bk.file), bk)
}
