package switches

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toybox/tests/testenv"
	"toybox/vat/words"
)

const goodTable = `{
  "approved": [{"sha256": "` + hexA + `", "why": "the data backend"}],
  "shares": [
    {"name": "Crow's database", "folder": "/srv/crow/data", "entries": ["crow.db", "crow.db-wal"], "vats": ["media"]},
    {"name": "Crow's storage", "env": {"S3_KEY": "k"}, "vats": ["media", "studio"]}
  ],
  "state": {"browser": ["/srv/crow/sessions"]}
}`

const hexA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestParseTable(t *testing.T) {
	tab, err := ParseTable([]byte(goodTable))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Table: tab, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := s.For("anyone", "sha256:"+hexA); d.Walled || d.Word != words.NotWalledApproved {
		t.Errorf("For(approved code) = %+v; want not walled (approved commands)", d)
	}
	if d, _ := s.For("anyone", "sha256:"+strings.Repeat("b", 64)); !d.Walled {
		t.Errorf("For(other code) = %+v; want walled", d)
	}
	if got := s.Shares("media"); len(got) != 2 || got[0].Name != "Crow's database" {
		t.Errorf("Shares(media) = %+v; want both shares, in order", got)
	}
	if got := s.Shares("studio"); len(got) != 1 || got[0].Env["S3_KEY"] != "k" {
		t.Errorf("Shares(studio) = %+v; want the storage credentials", got)
	}
	if got := s.StateFolders("browser"); len(got) != 1 || got[0] != "/srv/crow/sessions" {
		t.Errorf("StateFolders(browser) = %v", got)
	}
	if got := s.StateFolders("media"); got != nil {
		t.Errorf("StateFolders(media) = %v; want none", got)
	}
}

func TestParseTableRefuses(t *testing.T) {
	for _, tt := range []struct{ name, doc, want string }{
		{"unknown key", `{"aproved": []}`, "unknown field"},
		{"key twice", `{"approved": [], "approved": []}`, "twice"},
		{"key case", `{"Approved": []}`, "case-sensitive"},
		{"short digest", `{"approved": [{"sha256": "abc"}]}`, "64 lower-case hex"},
		{"upper digest", `{"approved": [{"sha256": "` + strings.ToUpper(hexA) + `"}]}`, "64 lower-case hex"},
		{"share without a vat", `{"shares": [{"name": "x", "folder": "/srv/x", "vats": []}]}`, "no vats"},
		{"share with both", `{"shares": [{"name": "x", "folder": "/srv/x", "env": {"A": "b"}, "vats": ["a"]}]}`, "one of them"},
		{"share relative", `{"shares": [{"name": "x", "folder": "srv/x", "vats": ["a"]}]}`, "absolute"},
		{"share entry path", `{"shares": [{"name": "x", "folder": "/srv/x", "entries": ["../y"], "vats": ["a"]}]}`, "not a name"},
		{"share name twice", `{"shares": [{"name": "x", "folder": "/srv/x", "vats": ["a"]}, {"name": "x", "folder": "/srv/y", "vats": ["a"]}]}`, "twice"},
		{"toybox env key", `{"shares": [{"name": "x", "env": {"TOYBOX_LISTEN": "b"}, "vats": ["a"]}]}`, "env key"},
		{"bad vat", `{"state": {"Bad": ["/srv/x"]}}`, `"Bad" is not a vat id`},
		{"state root", `{"state": {"a": ["/"]}}`, "other than /"},
		{"trailing", `{} {}`, "after"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTable([]byte(tt.doc))
			if !errors.Is(err, ErrBadTable) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseTable(%s) = %v; want ErrBadTable saying %q", tt.doc, err, tt.want)
			}
		})
	}
}

func FuzzParseTable(f *testing.F) {
	f.Add([]byte(goodTable))
	f.Add([]byte(`{"approved": [{"sha256": "` + hexA + `"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := ParseTable(b)
		if err == nil && tab.check() != nil {
			t.Errorf("ParseTable accepted a table its own check refuses")
		}
	})
}

// TestLoadTableOnlyRoot: the table approves code, so a file (or a folder
// above it) that anyone but root may write is refused, whatever it says.
func TestLoadTableOnlyRoot(t *testing.T) {
	testenv.RequireRoot(t) // the table must be root's, and the test makes files that are not
	dir := t.TempDir()
	path := filepath.Join(dir, "walls-table.json")
	if err := os.WriteFile(path, []byte(goodTable), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTable(path); err != nil {
		t.Fatalf("LoadTable(root's 0644 file) = %v", err)
	}
	for _, tt := range []struct {
		name  string
		setup func() error
		undo  func() error
		want  string
	}{
		{"group-writable file", func() error { return os.Chmod(path, 0o664) }, func() error { return os.Chmod(path, 0o644) }, "writable by group or others"},
		{"world-writable file", func() error { return os.Chmod(path, 0o646) }, func() error { return os.Chmod(path, 0o644) }, "writable by group or others"},
		{"another owner", func() error { return os.Chown(path, 1000, 0) }, func() error { return os.Chown(path, 0, 0) }, "owned by uid 1000"},
		{"folder another's", func() error { return os.Chown(dir, 1000, 0) }, func() error { return os.Chown(dir, 0, 0) }, "owned by uid 1000"},
		{"folder writable by others", func() error { return os.Chmod(dir, 0o777) }, func() error { return os.Chmod(dir, 0o700) }, "writable by group or others"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.setup(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := tt.undo(); err != nil {
					t.Fatal(err)
				}
			}()
			if _, err := LoadTable(path); !errors.Is(err, ErrBadTable) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LoadTable = %v; want ErrBadTable saying %q", err, tt.want)
			}
		})
	}
	if _, err := LoadTable(filepath.Join(dir, "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadTable(missing) = %v; want fs.ErrNotExist", err)
	}
}

// TestLoadTableSymlinkOthersMayChange: a symlink on the way to the table
// is followed, and the folder that holds it is checked as every other
// folder on the way is: whoever may write that folder may point the link
// at another file, and so choose which approvals toybox reads.
func TestLoadTableSymlinkOthersMayChange(t *testing.T) {
	testenv.RequireRoot(t) // the table must be root's, and the test makes folders that are not
	dir := t.TempDir()
	path := filepath.Join(dir, "walls-table.json")
	if err := os.WriteFile(path, []byte(goodTable), 0o644); err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(dir, "users")
	if err := os.Mkdir(users, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(users, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	fileLink := filepath.Join(users, "walls-table.json")
	if err := os.Symlink(path, fileLink); err != nil {
		t.Fatal(err)
	}
	dirLink := filepath.Join(users, "etc")
	if err := os.Symlink(dir, dirLink); err != nil {
		t.Fatal(err)
	}
	roots := filepath.Join(dir, "roots")
	if err := os.Mkdir(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	rootLink := filepath.Join(roots, "walls-table.json")
	if err := os.Symlink("../walls-table.json", rootLink); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTable(rootLink); err != nil {
		t.Errorf("LoadTable(a root's link in a root's folder) = %v; want the table", err)
	}
	for _, p := range []string{fileLink, filepath.Join(dirLink, "walls-table.json")} {
		if _, err := LoadTable(p); !errors.Is(err, ErrBadTable) || !strings.Contains(err.Error(), "owned by uid 1000") {
			t.Errorf("LoadTable(%s) = %v; want ErrBadTable: a folder on the way is uid 1000's", p, err)
		}
	}
	if err := os.Chown(users, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(fileLink, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTable(fileLink); !errors.Is(err, ErrBadTable) || !strings.Contains(err.Error(), "owned by uid 1000") {
		t.Errorf("LoadTable(a link of uid 1000's) = %v; want ErrBadTable", err)
	}
	if _, err := LoadTable(filepath.Join(users, "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadTable(missing) = %v; want fs.ErrNotExist", err)
	}
}
