package store

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"toybox/tests/testenv"
)

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func mkTar(t testing.TB, gz bool, ents ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var tw *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		tw = tar.NewWriter(zw)
	} else {
		tw = tar.NewWriter(&buf)
	}
	for _, e := range ents {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Linkname: e.link, Size: int64(len(e.body))}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

var (
	goodManifest = entry{name: "manifest.json", body: `{"command":["./bin/app"]}`}
	goodApp      = entry{name: "bin/app", body: "#!/bin/sh\necho hi\n", mode: 0o755}
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Config{StateDir: t.TempDir(), MaxBody: 1 << 20, MaxUnpacked: 1 << 16, MaxEntries: 50})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// codeEntries lists what is visible under code/ (digest folders and any
// leftovers).
func codeEntries(t *testing.T, s *Store) []string {
	t.Helper()
	ents, err := os.ReadDir(s.codeDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestPutGood(t *testing.T) {
	tests := []struct {
		name   string
		body   []byte
		bundle bool
	}{
		{"script", []byte("#!/bin/sh\necho hi\n"), false},
		{"elf", append([]byte("\x7fELF"), make([]byte, 100)...), false},
		{"tar", mkTar(t, false, goodManifest, goodApp), true},
		{"tar.gz", mkTar(t, true, goodManifest, goodApp), true},
		{"tar with dot prefix and dir", mkTar(t, false, entry{name: "./", typ: tar.TypeDir, mode: 0o755}, entry{name: "./manifest.json", body: `{"command":["run"]}`}, entry{name: "./lib/real", body: "#!/bin/sh\n", mode: 0o755}, entry{name: "./run", typ: tar.TypeSymlink, link: "lib/real"}), true},
		{"hard link inside", mkTar(t, false, goodManifest, goodApp, entry{name: "bin/app2", typ: tar.TypeLink, link: "bin/app"}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t)
			sum := sha256.Sum256(tt.body)
			want := hex.EncodeToString(sum[:])
			c, err := s.Put(bytes.NewReader(tt.body), "sha256:"+want, nil)
			if err != nil {
				t.Fatalf("Put = %v", err)
			}
			if c.Digest != want || c.Bundle != tt.bundle {
				t.Errorf("Put = %+v; want digest %s bundle %v", c, want, tt.bundle)
			}
			if got := codeEntries(t, s); len(got) != 1 || got[0] != want {
				t.Errorf("code/ = %v; want only [%s]", got, want)
			}
			fi, err := os.Stat(c.Dir)
			if err != nil || fi.Mode().Perm() != codeDirMode {
				t.Errorf("code dir mode = %v, %v; want %o", fi.Mode().Perm(), err, codeDirMode)
			}
			// The same bytes again: the same code, untouched.
			before, _ := os.Stat(c.Dir)
			c2, err := s.Put(bytes.NewReader(tt.body), "", nil)
			if err != nil || c2.Digest != c.Digest {
				t.Fatalf("second Put = %+v, %v", c2, err)
			}
			after, _ := os.Stat(c.Dir)
			if !os.SameFile(before, after) || !before.ModTime().Equal(after.ModTime()) {
				t.Error("a second Put of the same digest touched the stored code")
			}
			if got := codeEntries(t, s); len(got) != 1 {
				t.Errorf("code/ after second Put = %v; want one entry", got)
			}
		})
	}
}

func TestPutRefused(t *testing.T) {
	big := strings.Repeat("x", 1<<16+1)
	tests := []struct {
		name    string
		body    []byte
		want    error
		wantMsg string
	}{
		{"empty", nil, ErrBadBundle, "empty"},
		{"garbage", []byte("hello world, not code"), ErrBadBundle, "neither"},
		{"dotdot", mkTar(t, false, goodManifest, goodApp, entry{name: "../evil", body: "x"}), ErrBadBundle, "contains a .. element"},
		{"dotdot inside", mkTar(t, false, goodManifest, goodApp, entry{name: "a/../../evil", body: "x"}), ErrBadBundle, "contains a .. element"},
		{"absolute", mkTar(t, false, goodManifest, goodApp, entry{name: "/etc/evil", body: "x"}), ErrBadBundle, "absolute"},
		{"symlink absolute", mkTar(t, false, goodManifest, goodApp, entry{name: "l", typ: tar.TypeSymlink, link: "/etc/passwd"}), ErrBadBundle, "absolute"},
		{"symlink escapes", mkTar(t, false, goodManifest, goodApp, entry{name: "a/l", typ: tar.TypeSymlink, link: "../../x"}), ErrBadBundle, "leaves the bundle"},
		{"symlinks that chain out", mkTar(t, false, goodManifest, goodApp, entry{name: "s", typ: tar.TypeSymlink, link: "."}, entry{name: "t", typ: tar.TypeSymlink, link: "s/.."}, entry{name: "u", typ: tar.TypeSymlink, link: "t/.."}), ErrBadBundle, `link "t", followed to its end, leaves the bundle`},
		{"symlinks in a loop", mkTar(t, false, goodManifest, goodApp, entry{name: "a", typ: tar.TypeSymlink, link: "b"}, entry{name: "b", typ: tar.TypeSymlink, link: "a"}), ErrBadBundle, "never ends"},
		{"write through symlink", mkTar(t, false, goodManifest, goodApp, entry{name: "d", typ: tar.TypeSymlink, link: "bin"}, entry{name: "d/x", body: "x"}), ErrBadBundle, "not a directory"},
		{"hard link outside", mkTar(t, false, goodManifest, goodApp, entry{name: "h", typ: tar.TypeLink, link: "../../etc/shadow"}), ErrBadBundle, "contains a .. element"},
		{"hard link to unknown", mkTar(t, false, goodManifest, goodApp, entry{name: "h", typ: tar.TypeLink, link: "etc/shadow"}), ErrBadBundle, "not a file earlier"},
		{"char device", mkTar(t, false, goodManifest, goodApp, entry{name: "null", typ: tar.TypeChar}), ErrBadBundle, "device"},
		{"block device", mkTar(t, false, goodManifest, goodApp, entry{name: "sda", typ: tar.TypeBlock}), ErrBadBundle, "device"},
		{"fifo", mkTar(t, false, goodManifest, goodApp, entry{name: "p", typ: tar.TypeFifo}), ErrBadBundle, "fifo"},
		{"duplicate", mkTar(t, false, goodManifest, goodApp, entry{name: "bin/app", body: "again", mode: 0o755}), ErrBadBundle, "twice"},
		{"no manifest", mkTar(t, false, goodApp), ErrBadBundle, "no manifest.json"},
		{"missing command", mkTar(t, false, goodManifest), ErrBadBundle, "missing"},
		{"command not executable", mkTar(t, false, goodManifest, entry{name: "bin/app", body: "x", mode: 0o644}), ErrBadBundle, "not an executable"},
		{"command symlink out", mkTar(t, false, entry{name: "manifest.json", body: `{"command":["run"]}`}, entry{name: "run", typ: tar.TypeSymlink, link: "x/../../../bin/sh"}), ErrBadBundle, "leaves the bundle"},
		{"bad manifest", mkTar(t, false, entry{name: "manifest.json", body: `{"command":["./bin/app"],"extra":1}`}, goodApp), nil, "unknown field"},
		{"unpacks too large", mkTar(t, false, goodManifest, goodApp, entry{name: "big", body: big}), ErrTooLarge, "unpacks to more"},
		{"body too large", bytes.Repeat([]byte("#"), 1<<20+1), ErrTooLarge, "larger than"},
		// One entry's name makes every folder above it: a 1 MiB name
		// (PAX) made half a million folders from one entry of a
		// few-hundred-byte tar.gz, past PATH_MAX (never sealed, never
		// removed by os.RemoveAll).
		{"name too long", mkTar(t, true, goodManifest, goodApp, entry{name: strings.Repeat("a", 3000), body: "x"}), ErrBadBundle, "bytes long"},
		{"too deep", mkTar(t, true, goodManifest, goodApp, entry{name: strings.Repeat("a/", 200) + "f", body: "x"}), ErrBadBundle, "folders deep"},
		// PAX headers (1 MiB each, any number before one entry) are
		// read and dropped: 100 MiB of them in a 100 KiB tar.gz.
		{"headers past the limits", paxChain(t, 100, goodManifest, goodApp), ErrTooLarge, "tar stream is longer"},
		{"folders past the entry limit", mkTar(t, true, goodManifest, goodApp, entry{name: strings.Repeat("a/", 60) + "f", body: "x"}), ErrTooLarge, "more than 50 entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t)
			_, err := s.Put(bytes.NewReader(tt.body), "", nil)
			if err == nil {
				t.Fatal("Put succeeded; want a refusal")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Put err = %v; want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Put err = %q; want it to mention %q", err, tt.wantMsg)
			}
			if got := codeEntries(t, s); len(got) != 0 {
				t.Errorf("code/ after a refused Put = %v; want nothing", got)
			}
		})
	}
}

func TestPutDigestMismatch(t *testing.T) {
	s := openStore(t)
	_, err := s.Put(strings.NewReader("#!/bin/sh\n"), strings.Repeat("0", 64), nil)
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("Put err = %v; want ErrDigestMismatch", err)
	}
	if got := codeEntries(t, s); len(got) != 0 {
		t.Errorf("code/ = %v; want nothing", got)
	}
}

func TestPutCheckRefusal(t *testing.T) {
	s := openStore(t)
	errNo := errors.New("refused by the caller")
	var seen *Code
	_, err := s.Put(bytes.NewReader(mkTar(t, false, goodManifest, goodApp)), "", func(c Code) error {
		seen = &c
		return errNo
	})
	if !errors.Is(err, errNo) {
		t.Fatalf("Put err = %v; want the check's error", err)
	}
	if seen == nil || seen.Manifest == nil || seen.Manifest.Command[0] != "./bin/app" {
		t.Errorf("check saw %+v; want the bundle's manifest", seen)
	}
	if got := codeEntries(t, s); len(got) != 0 {
		t.Errorf("code/ after a refused check = %v; want nothing", got)
	}
}

func TestRecords(t *testing.T) {
	s := openStore(t)
	r := Record{ID: "alice", Code: "sha256:" + strings.Repeat("a", 64), Egress: `{"host":"example.com"}`, Env: map[string]string{"K": "v"}, Installed: time.Unix(1, 0).UTC()}
	if err := s.SaveRecord(r); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveRecord(Record{ID: "../x"}); !errors.Is(err, ErrBadID) {
		t.Errorf("SaveRecord(bad id) = %v; want ErrBadID", err)
	}
	fi, err := os.Stat(filepath.Join(s.StateDir(), "vats", "alice.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	got, _, err := s.Records()
	if err != nil || len(got) != 1 || got[0].Egress != r.Egress || got[0].Env["K"] != "v" {
		t.Fatalf("Records = %+v, %v; want the saved record", got, err)
	}
	if err := s.DeleteRecord("alice"); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.Records(); len(got) != 0 {
		t.Errorf("Records after delete = %+v", got)
	}
}

func FuzzEntryName(f *testing.F) {
	for _, s := range []string{"a", "./a", "../a", "/a", "a/../b", "a/./b", "a//b", "..", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := entryName(s)
		if err != nil {
			return
		}
		if filepath.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			t.Fatalf("entryName(%q) = %q; escapes", s, p)
		}
	})
}

// FuzzPut feeds arbitrary bodies to the store: a refusal leaves code/ empty;
// an accepted bundle holds only files, folders and links that stay inside.
func FuzzPut(f *testing.F) {
	f.Add(mkTar(f, false, goodManifest, goodApp))
	f.Add(mkTar(f, true, goodManifest, goodApp, entry{name: "l", typ: tar.TypeSymlink, link: "bin/app"}))
	f.Add(mkTar(f, false, goodManifest, goodApp, entry{name: "../x", body: "x"}))
	f.Add(mkTar(f, false, goodManifest, goodApp, entry{name: "h", typ: tar.TypeLink, link: "bin/app"}))
	f.Add(mkTar(f, false, goodManifest, goodApp, entry{name: "s", typ: tar.TypeSymlink, link: "."}, entry{name: "t", typ: tar.TypeSymlink, link: "s/.."}))
	f.Add(mkTar(f, false, goodManifest, goodApp, entry{name: "a", typ: tar.TypeSymlink, link: "bin"}, entry{name: "b", typ: tar.TypeSymlink, link: "a/app"}, entry{name: "gone", typ: tar.TypeSymlink, link: "nothing/here"}))
	f.Add([]byte("#!/bin/sh\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := Open(Config{StateDir: t.TempDir(), MaxBody: 1 << 20, MaxUnpacked: 1 << 20, MaxEntries: 100})
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.Put(bytes.NewReader(body), "", nil)
		if err != nil {
			if got := codeEntries(t, s); len(got) != 0 {
				t.Fatalf("refused (%v) but code/ holds %v", err, got)
			}
			return
		}
		err = filepath.Walk(c.Dir, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			switch {
			case fi.Mode()&os.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				resolved := filepath.Join(filepath.Dir(p), target)
				if filepath.IsAbs(target) || resolved != c.Dir && !strings.HasPrefix(resolved, c.Dir+"/") {
					t.Errorf("link %s -> %s leaves the bundle", p, target)
				}
				// Followed to its end, through other links too.
				if end, err := filepath.EvalSymlinks(p); err == nil && end != c.Dir && !strings.HasPrefix(end, c.Dir+"/") {
					t.Errorf("link %s ends at %s, outside the bundle", p, end)
				}
			case fi.Mode().IsRegular(), fi.IsDir():
				if fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
					t.Errorf("%s has mode %v", p, fi.Mode())
				}
			default:
				t.Errorf("%s is a special file (%v)", p, fi.Mode())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestOpenRemovesUploadLeftovers: an upload cut short by a crash leaves its
// file or its half-unpacked bundle in code/; the next start removes them,
// and keeps stored code.
func TestOpenRemovesUploadLeftovers(t *testing.T) {
	s := openStore(t)
	code, err := s.Put(bytes.NewReader(mkTar(t, true, goodManifest, goodApp)), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".incoming-123", ".unpack-456/bin/app"} {
		full := filepath.Join(s.codeDir(), p)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("half an upload"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := Open(Config{StateDir: s.StateDir()})
	if err != nil {
		t.Fatal(err)
	}
	if got := codeEntries(t, s2); len(got) != 1 || got[0] != filepath.Base(code.Dir) {
		t.Errorf("code/ after a restart: %v; want only the stored %s", got, filepath.Base(code.Dir))
	}
}

// Prune removes the code keep does not want and nothing else; a removal a
// crash cut short is finished by the next Open.
func TestPrune(t *testing.T) {
	s := openStore(t)
	a, err := s.Put(strings.NewReader("#!/bin/sh\necho a\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Put(strings.NewReader("#!/bin/sh\necho b\n"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Put pins what it stored until the install that asked releases it.
	used := func() (map[string]bool, error) { return map[string]bool{a.Digest: true}, nil }
	if removed, err := s.Prune(used); err != nil || len(removed) != 0 {
		t.Fatalf("Prune with both pinned = %v, %v; want nothing removed", removed, err)
	}
	s.Release(a.Digest)
	s.Release(b.Digest)
	if removed, err := s.Prune(func() (map[string]bool, error) { return nil, errors.New("a record cannot be read") }); err == nil || len(removed) != 0 {
		t.Fatalf("Prune whose used set failed = %v, %v; want an error and nothing removed", removed, err)
	}
	removed, err := s.Prune(used)
	if err != nil || len(removed) != 1 || removed[0] != b.Digest {
		t.Fatalf("Prune = %v, %v; want [%s]", removed, err, b.Digest)
	}
	if _, err := s.Code(a.Digest); err != nil {
		t.Errorf("kept code: %v", err)
	}
	if _, err := s.Code(b.Digest); !errors.Is(err, ErrNoCode) {
		t.Errorf("removed code: %v; want ErrNoCode", err)
	}
	// The same bytes stored again come back whole.
	if again, err := s.Put(strings.NewReader("#!/bin/sh\necho b\n"), "", nil); err != nil || again.Digest != b.Digest {
		t.Errorf("storing removed code again: %v, %v", again.Digest, err)
	}
	cut := filepath.Join(s.codeDir(), trashPrefix+"cut-short", a.Digest)
	if err := os.MkdirAll(cut, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(s.cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(cut)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a removal cut short: %v; want it finished at Open", err)
	}
}

// paxChain is a tar.gz of k PAX headers of ~1 MiB each, none of them an
// entry, before ents.
func paxChain(t testing.TB, k int, ents ...entry) []byte {
	t.Helper()
	var one bytes.Buffer
	tw := tar.NewWriter(&one)
	big := strings.Repeat("x", 1<<20-64)
	if err := tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: map[string]string{"comment": big}, Format: tar.FormatPAX}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	xhdr := one.Bytes()[:one.Len()-512] // the PAX header and its records, not the entry's own header
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for range k {
		if _, err := zw.Write(xhdr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := zw.Write(mkTar(t, false, ents...)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestCodeIsSealed: stored code is its owner's and the code group's only
// (files 0640, executables 0750, folders 0750), so a .env a bundle ships is
// not readable by every user of the host, as it was (0644, and the code's
// path shows in every wall's mount table). A user in the code group (what
// walls are) reads it; another user does not.
func TestCodeIsSealed(t *testing.T) {
	testenv.RequireRoot(t)
	s := openStore(t)
	if s.CodeGID() != RootCodeGID {
		t.Fatalf("CodeGID = %d under root; want %d", s.CodeGID(), RootCodeGID)
	}
	c, err := s.Put(bytes.NewReader(mkTar(t, false, goodManifest, goodApp,
		entry{name: ".env", body: "DB_PASSWORD=bundle-secret\n"},
		entry{name: "lib/data.txt", body: "data"})), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSealed(t, c.Dir, RootCodeGID)
	// Under the state dir's own modes (the parents 0711, as vat/store and
	// the unit set them), as another user and as a wall's.
	_ = os.Chmod(filepath.Dir(s.StateDir()), 0o711)
	env := filepath.Join(c.Dir, ".env")
	if out, err := readAs(env, 12345, 12345, nil); err == nil {
		t.Errorf("another user read the bundle's .env: %q", out)
	}
	if out, err := readAs(env, 1000007, 1000007, []uint32{RootCodeGID}); err != nil || !strings.Contains(out, "bundle-secret") {
		t.Errorf("a wall's uid with the code group: %q, %v; want the file", out, err)
	}
}

// TestOldCodeSealedAtOpen: code an earlier version stored world-readable
// is sealed when the store opens.
func TestOldCodeSealedAtOpen(t *testing.T) {
	testenv.RequireRoot(t)
	s := openStore(t)
	c, err := s.Put(bytes.NewReader(mkTar(t, false, goodManifest, goodApp, entry{name: ".env", body: "K=v"})), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	// As an earlier version left it.
	_ = filepath.WalkDir(c.Dir, func(p string, d fs.DirEntry, _ error) error {
		mode := os.FileMode(0o644)
		if d.IsDir() || strings.HasSuffix(p, "/app") {
			mode = 0o755
		}
		_ = os.Chmod(p, mode)
		return os.Lchown(p, 0, 0)
	})
	_ = os.Remove(filepath.Join(s.StateDir(), sealMark))
	if _, err := Open(Config{StateDir: s.StateDir()}); err != nil {
		t.Fatal(err)
	}
	checkSealed(t, c.Dir, RootCodeGID)
}

func checkSealed(t *testing.T, dir string, gid int) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		n++
		if st := fi.Sys().(*syscall.Stat_t); int(st.Gid) != gid {
			t.Errorf("%s: group %d; want %d", p, st.Gid, gid)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil
		}
		if perm := fi.Mode().Perm(); perm&0o007 != 0 || perm&0o040 == 0 {
			t.Errorf("%s: mode %v; want readable by owner and group only", p, fi.Mode())
		}
		return nil
	})
	if err != nil || n < 4 {
		t.Fatalf("walked %d entries: %v", n, err)
	}
}

// readAs reads path as uid:gid with groups, in a child process.
func readAs(path string, uid, gid uint32, groups []uint32) (string, error) {
	cmd := exec.Command("/bin/cat", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMissingCommandIsQuoted: a manifest's command is the bundle's bytes
// (anything but NUL), and the refusal of one that is missing reaches
// toybox install and the journal. It names the command quoted, and holds
// none of its escape sequences or bidi overrides.
func TestMissingCommandIsQuoted(t *testing.T) {
	for _, cmd := range []string{"./app\x1b]52;c;aGk=\x07\r\u202e", "/nonexistent/app\x1b]52;c;aGk=\x07\r\u202e"} {
		m := `{"command":["` + strings.NewReplacer("\x1b", `\u001b`, "\x07", `\u0007`, "\r", `\r`).Replace(cmd) + `"]}`
		_, err := openStore(t).Put(bytes.NewReader(mkTar(t, false, entry{name: "manifest.json", body: m})), "", nil)
		if err == nil || !errors.Is(err, ErrBadBundle) || !errors.Is(err, fs.ErrNotExist) ||
			!strings.Contains(err.Error(), `app\x1b]52;c;aGk=\a\r\u202e" is missing`) || strings.ContainsAny(err.Error(), "\x1b\x07\r\u202e") {
			t.Errorf("Put of a bundle whose command %q is missing: %q; want it named quoted, and only quoted", cmd, err)
		}
	}
}
