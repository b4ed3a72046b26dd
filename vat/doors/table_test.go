package doors

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"toybox/labels"
	"toybox/tests/testenv"
)

const goodTable = `{"sets": {
	"kiosk": {"firstParty": true, "backend": "unix:/run/kiosk.sock", "entries": ["GET /kiosk/state", "POST /kiosk/state"]},
	"browser": {"firstParty": true, "backend": "http://127.0.0.1:8099", "entries": ["POST /browser/restart"]},
	"stranger": {"backend": "http://[::1]:9000", "entries": ["GET /x"]}
}}`

func TestParseTable(t *testing.T) {
	tab, err := ParseTable([]byte(goodTable))
	if err != nil {
		t.Fatalf("ParseTable(good) = %v", err)
	}
	if got, want := strings.Join(tab.IDs(), ","), "browser,kiosk,stranger"; got != want {
		t.Errorf("IDs() = %s; want %s", got, want)
	}
	k, ok := tab.Set("kiosk")
	if !ok || !k.FirstParty || k.Backend != (Backend{"unix", "/run/kiosk.sock"}) || len(k.Entries) != 2 || k.Entries[1] != (Entry{"POST", "/kiosk/state"}) {
		t.Errorf("Set(kiosk) = %+v, %v", k, ok)
	}
	if b, _ := tab.Set("browser"); b.Backend != (Backend{"tcp", "127.0.0.1:8099"}) {
		t.Errorf("browser backend = %+v; want tcp 127.0.0.1:8099", b.Backend)
	}
	if s, _ := tab.Set("stranger"); s.FirstParty || s.Backend.String() != "http://[::1]:9000" {
		t.Errorf("stranger = %+v; want not first-party, http://[::1]:9000", s)
	}
	if empty, err := ParseTable([]byte(`{"sets": {}}`)); err != nil || len(empty.IDs()) != 0 {
		t.Errorf("ParseTable(empty sets) = %v, %v", empty.IDs(), err)
	}
}

var badTables = []struct {
	name, json, want string
}{
	{"not JSON", `{`, "bad door table"},
	{"no sets", `{}`, "no \"sets\" object"},
	{"unknown top key", `{"sets": {}, "extra": 1}`, "unknown field \"extra\""},
	{"unknown set key", `{"sets": {"k": {"backend": "unix:/s", "entries": ["GET /a"], "token": "x"}}}`, "unknown field \"token\""},
	{"trailing data", `{"sets": {}} {}`, "data after"},
	{"duplicate set", `{"sets": {"k": {"backend": "unix:/s", "entries": ["GET /a"]}, "k": {"backend": "unix:/s", "entries": ["GET /b"]}}}`, "key \"k\" appears twice"},
	{"bad vat id", `{"sets": {"Kiosk": {"backend": "unix:/s", "entries": ["GET /a"]}}}`, "not a vat id"},
	{"no backend", `{"sets": {"k": {"entries": ["GET /a"]}}}`, "no backend"},
	{"relative socket", `{"sets": {"k": {"backend": "unix:run/s.sock", "entries": ["GET /a"]}}}`, "absolute and clean"},
	{"unclean socket", `{"sets": {"k": {"backend": "unix:/run/../etc/s", "entries": ["GET /a"]}}}`, "absolute and clean"},
	{"public backend", `{"sets": {"k": {"backend": "http://93.184.216.34:80", "entries": ["GET /a"]}}}`, "loopback IP literal"},
	{"named backend", `{"sets": {"k": {"backend": "http://localhost:80", "entries": ["GET /a"]}}}`, "loopback IP literal"},
	{"backend path", `{"sets": {"k": {"backend": "http://127.0.0.1:80/admin", "entries": ["GET /a"]}}}`, "no user, path or query"},
	{"backend user", `{"sets": {"k": {"backend": "http://u:p@127.0.0.1:80", "entries": ["GET /a"]}}}`, "no user, path or query"},
	{"backend no port", `{"sets": {"k": {"backend": "http://127.0.0.1", "entries": ["GET /a"]}}}`, "needs a port"},
	{"https backend", `{"sets": {"k": {"backend": "https://127.0.0.1:443", "entries": ["GET /a"]}}}`, "neither unix"},
	{"no entries", `{"sets": {"k": {"backend": "unix:/s", "entries": []}}}`, "no entries"},
	{"entry no space", `{"sets": {"k": {"backend": "unix:/s", "entries": ["GET/a"]}}}`, "is not \"METHOD /path\""},
	{"entry bad method", `{"sets": {"k": {"backend": "unix:/s", "entries": ["TRACE /a"]}}}`, "not one a door accepts"},
	{"entry query", `{"sets": {"k": {"backend": "unix:/s", "entries": ["GET /a?b"]}}}`, "query"},
	{"entry dot-dot", `{"sets": {"k": {"backend": "unix:/s", "entries": ["GET /a/../b"]}}}`, "'..'"},
	{"entry two spaces", `{"sets": {"k": {"backend": "unix:/s", "entries": ["GET  /a"]}}}`, "character ' '"},
	{"entry twice", `{"sets": {"k": {"backend": "unix:/s", "entries": ["GET /a", "GET /a"]}}}`, "listed twice"},
	{"firstParty not bool", `{"sets": {"k": {"firstParty": "yes", "backend": "unix:/s", "entries": ["GET /a"]}}}`, "cannot unmarshal"},
}

func TestParseTableRefuses(t *testing.T) {
	for _, tt := range badTables {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTable([]byte(tt.json))
			if err == nil || !errors.Is(err, ErrBadTable) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseTable(%s) = %v; want ErrBadTable containing %q", tt.json, err, tt.want)
			}
		})
	}
}

func FuzzParseTable(f *testing.F) {
	f.Add([]byte(goodTable))
	for _, tt := range badTables {
		f.Add([]byte(tt.json))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := ParseTable(data)
		if err != nil {
			return
		}
		// Whatever parses holds only entries that cannot be rewritten.
		for _, id := range tab.IDs() {
			s, _ := tab.Set(id)
			if !regexp.MustCompile("^" + labels.VatIDSyntax + "$").MatchString(id) {
				t.Errorf("accepted set id %q", id)
			}
			for _, e := range s.Entries {
				if methodProblem(e.Method) != "" || targetProblem(e.Path) != "" {
					t.Errorf("accepted entry %q", e.Name())
				}
			}
		}
	})
}

func TestLoadTable(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(goodTable), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if tab, err := LoadTable(write("ok.json", 0o644)); err != nil || len(tab.IDs()) != 3 {
		t.Errorf("LoadTable(0644) = %v; want 3 sets", err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"world-writable", write("ww.json", 0o646), "writable by group or others"},
		{"group-writable", write("gw.json", 0o664), "writable by group or others"},
		{"directory", dir, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := LoadTable(tt.path); !errors.Is(err, ErrBadTable) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LoadTable = %v; want ErrBadTable containing %q", err, tt.want)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		if _, err := LoadTable(filepath.Join(dir, "none.json")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("LoadTable(missing) = %v; want fs.ErrNotExist", err)
		}
	})
	t.Run("someone else's file", func(t *testing.T) {
		testenv.RequireRoot(t) // chown
		p := write("other.json", 0o644)
		if err := os.Chown(p, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadTable(p); !errors.Is(err, ErrBadTable) || !strings.Contains(err.Error(), "owned by uid 4242") {
			t.Errorf("LoadTable(uid 4242) = %v; want owned-by refusal", err)
		}
	})
}

func TestCheckManifest(t *testing.T) {
	tab, err := ParseTable([]byte(goodTable))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		tab   *Table
		vat   string
		named []string
		want  string // "" = allowed
	}{
		{"own set", tab, "kiosk", []string{"kiosk"}, ""},
		{"names nothing", tab, "kiosk", nil, ""},
		{"third-party names nothing", tab, "stranger", []string{}, ""},
		{"another vat's set", tab, "kiosk", []string{"browser"}, "doors refused: vat kiosk names the door set \"browser\", which is not its own"},
		{"own and another's", tab, "kiosk", []string{"kiosk", "browser"}, "names 2 door sets"},
		{"own twice", tab, "kiosk", []string{"kiosk", "kiosk"}, "names 2 door sets"},
		{"adds an entry", tab, "kiosk", []string{"POST /browser/restart"}, "a manifest cannot add door entries"},
		{"third-party in the table", tab, "stranger", []string{"stranger"}, "doors refused: vat stranger is not first-party"},
		{"not in the table", tab, "newcomer", []string{"newcomer"}, "the operator's door table has none for it"},
		{"third-party names a first-party set", tab, "newcomer", []string{"kiosk"}, "which is not its own"},
		{"empty table", nil, "kiosk", []string{"kiosk"}, "has none for it"},
		// The id is parsed where it enters (labels.ParseVatID); one made by a
		// conversion finds no set, since the table's ids are parsed too.
		{"forged vat id", tab, "../kiosk", []string{"../kiosk"}, "has none for it"},
		{"empty name", tab, "kiosk", []string{""}, "which is not its own"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.tab.CheckManifest(labels.VatID(tt.vat), tt.named)
			if tt.want == "" {
				if err != nil {
					t.Errorf("CheckManifest(%s, %q) = %v; want allowed", tt.vat, tt.named, err)
				}
				return
			}
			if !errors.Is(err, ErrInstallRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CheckManifest(%s, %q) = %v; want ErrInstallRefused containing %q", tt.vat, tt.named, err, tt.want)
			}
		})
	}
}
