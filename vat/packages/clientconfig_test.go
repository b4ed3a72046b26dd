package packages

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseClientConfig(t *testing.T) {
	tests := []struct {
		name, in, key string
		names         []string
		err           string
	}{
		{"claude desktop", `{"mcpServers":{"b":{"command":"npx"},"a":{"command":"uvx"}},"globalShortcut":"x"}`, "mcpServers", []string{"a", "b"}, ""},
		{"vs code", `{"inputs":[],"servers":{"fs":{"type":"stdio","command":"npx"}}}`, "servers", []string{"fs"}, ""},
		{"both", `{"mcpServers":{},"servers":{}}`, "", nil, "both"},
		{"neither", `{"other":{}}`, "", nil, "no mcpServers"},
		{"vs code settings", "{\"editor.fontSize\": 14, // mine\n\"mcp\": {\"servers\": {\"a\": {\"command\": \"npx\"}}}}", "", nil, "settings.json keeps its servers in mcp.servers"},
		{"not an object", `[1]`, "", nil, "not a JSON object"},
		{"servers not an object", `{"mcpServers":[]}`, "", nil, "not an object of servers"},
		{"a server twice", `{"mcpServers":{"a":{"command":"npx"},"a":{"command":"uvx"}}}`, "", nil, `server "a" is given twice`},
		{"the servers twice", `{"mcpServers":{"a":{"command":"npx"}},"mcpServers":{}}`, "", nil, `"mcpServers" is given twice`},
		{"a comment", "{\n  // mine\n  \"servers\": {}\n}", "servers", []string{}, ""},
		{"a block comment", "{/* a\n */\"servers\": {\"a\": {\"command\": /* b */ \"npx\"}}}", "servers", []string{"a"}, ""},
		{"a trailing comma", "{\"servers\": {\"a\": {\"command\": \"npx\", \"args\": [\"x\",],},\n},}", "servers", []string{"a"}, ""},
		{"slashes in a string", `{"servers": {"a": {"url": "http://h/*x*/", "args": ["\"//"]}}}`, "servers", []string{"a"}, ""},
		{"a comment cut short", "{\"servers\": {}} /* no end", "", nil, "line 1, column 17: invalid character '/'"},
		{"a comma alone", `{"servers": {"a": {"args": [,]}}}`, "", nil, "invalid character ','"},
		{"two commas", `{"servers": {"a": {"command": "npx",,}}}`, "", nil, "invalid character ','"},
		{"a hash comment", "{\n # mine\n \"servers\": {}}", "", nil, "line 2, column 2: invalid character '#'"},
		{"cut short", `{"servers": {"a": {"command": "np`, "", nil, "unexpected end"},
		{"empty", ``, "", nil, "unexpected end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc, err := ParseClientConfig([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseClientConfig(%s) = %v; want an error naming %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cc.Key != tt.key || !slices.Equal(cc.Names(), tt.names) {
				t.Errorf("ParseClientConfig(%s) = %s %v; want %s %v", tt.in, cc.Key, cc.Names(), tt.key, tt.names)
			}
		})
	}
}

// TestClientConfigWithKeepsTheRest: rewriting one entry keeps every other
// entry and member as written.
func TestClientConfigWithKeepsTheRest(t *testing.T) {
	cc, err := ParseClientConfig([]byte(`{"theme":{"dark":true},"mcpServers":{"a":{"command":"npx","args":["-y","x"]},"b":{"command":"node"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := cc.With("a", json.RawMessage(`{"type":"http","url":"http://h/a/mcp"}`)).Encode()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"theme":      map[string]any{"dark": true},
		"mcpServers": map[string]any{"a": map[string]any{"type": "http", "url": "http://h/a/mcp"}, "b": map[string]any{"command": "node"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("With then Encode = %v; want %v", got, want)
	}
	if string(cc.Servers["a"]) != `{"command":"npx","args":["-y","x"]}` {
		t.Errorf("With changed the config it was called on: %s", cc.Servers["a"])
	}
}

func TestVatID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"hello", "hello"},
		{"Local Notes", "local-notes"},
		{"@scope/server_x", "scope-server-x"},
		{"---", ""},
		{strings.Repeat("a", 70), strings.Repeat("a", 63)},
	}
	for _, tt := range tests {
		if got := VatID(tt.in); got != tt.want {
			t.Errorf("VatID(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func noLookPath(name string) (string, error) {
	if name == "node" {
		return "/usr/bin/node", nil
	}
	return "", errors.New("not found")
}

func TestPlanImport(t *testing.T) {
	src := t.TempDir()
	for _, f := range []string{"package.json", "dist/index.js", "data/db.json", "run.sh"} {
		p := filepath.Join(src, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src, _ = filepath.EvalSymlinks(src)
	data := "/state/data/v"
	tests := []struct {
		name string
		e    ClientEntry
		want ImportPlan
		err  string
		hide string // an error must not print it
	}{
		{
			name: "npx",
			e:    ClientEntry{Command: "npx", Args: []string{"-y", "@scope/srv@1.2.3", "/tmp"}, Env: map[string]string{"K": "v"}},
			want: ImportPlan{Kind: ImportLauncher, Spec: Spec{Registry: NPM, Name: "@scope/srv", Version: "1.2.3", Args: []string{"/tmp"}}, Launcher: []string{"npx", "-y", "@scope/srv@1.2.3", "/tmp"}, Env: map[string]string{"K": "v"}},
		},
		{name: "npx --package refused", e: ClientEntry{Command: "npx", Args: []string{"--package", "evil", "srv"}}, err: "refused"},
		{name: "uvx with a cwd refused", e: ClientEntry{Command: "uvx", Args: []string{"srv"}, Cwd: "/x"}, err: "cwd"},
		{name: "a client variable", e: ClientEntry{Command: "npx", Args: []string{"-y", "srv"}, Env: map[string]string{"TOKEN": "${input:token}"}}, err: "variable the client fills"},
		{name: "a client variable in a secret", e: ClientEntry{Command: "npx", Args: []string{"-y", "srv"}, Env: map[string]string{"DATABASE_URL": "postgres://me:hunter2@db/${input:db}"}}, err: "env DATABASE_URL names a variable the client fills", hide: "hunter2"},
		{name: "Claude Code's ${VAR}", e: ClientEntry{Command: "npx", Args: []string{"-y", "srv"}, Env: map[string]string{"API_KEY": "${API_KEY}"}}, err: "env API_KEY names a variable the client fills (${API_KEY})"},
		{name: "a ${VAR} with a default", e: ClientEntry{Command: "npx", Args: []string{"-y", "srv"}, Env: map[string]string{"API_KEY": "${API_KEY:-sk-hunter2}"}}, err: "env API_KEY names a variable the client fills (${API_KEY})", hide: "hunter2"},
		{name: "two variables", e: ClientEntry{Command: "npx", Args: []string{"-y", "srv"}, Env: map[string]string{"URL": "https://${HOST}/${HOME}"}}, err: "env URL names a variable the client fills (${HOST}, ${HOME})"},
		{name: "an env file", e: ClientEntry{Command: "npx", Args: []string{"-y", "srv"}, EnvFile: "/home/me/.env"}, err: `envFile "/home/me/.env" is not read`},
		{name: "remote", e: ClientEntry{Type: "http", URL: "https://x/mcp"}, err: "remote"},
		{name: "toybox's stdio bridge", e: ClientEntry{Command: "/usr/local/bin/toybox", Args: []string{"stdio", "http://localhost:8787/notes/mcp"}}, err: "remote"},
		{name: "no command", e: ClientEntry{}, err: "no command"},
		{name: "host program only", e: ClientEntry{Command: "node", Args: []string{"--version"}}, err: "no program"},
		{
			name: "node and a script in a checkout, a data file beside",
			e:    ClientEntry{Command: "node", Args: []string{filepath.Join(src, "dist/index.js"), "--db", filepath.Join(src, "data/db.json"), "--name", "x"}},
			want: ImportPlan{Kind: ImportCheckout, Source: src, Command: []string{"/usr/bin/node", "./dist/index.js", "--db", data + "/db.json", "--name", "x"}, DataFiles: map[string]string{filepath.Join(src, "data/db.json"): data + "/db.json"}},
		},
		{
			name: "a program of the checkout, relative to its cwd",
			e:    ClientEntry{Command: "./run.sh", Args: []string{"dist"}, Cwd: src},
			want: ImportPlan{Kind: ImportCheckout, Source: src, Command: []string{"./run.sh", "./dist"}, DataFiles: map[string]string{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PlanImport("srv", tt.e, noLookPath, data)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("PlanImport(%+v) = %v; want an error naming %q", tt.e, err, tt.err)
				}
				if tt.hide != "" && strings.Contains(err.Error(), tt.hide) {
					t.Errorf("PlanImport(%+v) = %v; want %q not printed", tt.e, err, tt.hide)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("PlanImport(%+v) = %+v; want %+v", tt.e, got, tt.want)
			}
		})
	}
}

// TestCopyCheckout: the copy leaves out .git, node_modules, .venv and
// __pycache__ at any depth; a copy that differs is caught entry by entry.
func TestCopyCheckout(t *testing.T) {
	src := t.TempDir()
	for _, f := range []string{"a.js", "lib/b.js", ".git/HEAD", "node_modules/x/i.js", "py/.venv/bin/python", "py/__pycache__/c.pyc", "py/m.py"} {
		p := filepath.Join(src, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := CopyCheckout(src, dst, Limits{}); err != nil {
		t.Fatal(err)
	}
	got, err := listCheckout(dst)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range got {
		names = append(names, n)
	}
	want := []string{"a.js", "lib", "lib/b.js", "py", "py/m.py"}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("the copy holds %v; want %v", names, want)
	}
	for _, change := range []struct {
		name string
		do   func() error
	}{
		{"a byte more", func() error { return os.WriteFile(filepath.Join(dst, "a.js"), []byte("a.js!"), 0o644) }},
		{"a mode", func() error { return os.Chmod(filepath.Join(dst, "lib/b.js"), 0o755) }},
		{"a file added", func() error { return os.WriteFile(filepath.Join(dst, "new.js"), nil, 0o644) }},
		{"a file gone", func() error { return os.Remove(filepath.Join(dst, "py/m.py")) }},
	} {
		d2 := filepath.Join(t.TempDir(), "copy")
		if err := CopyCheckout(src, d2, Limits{}); err != nil {
			t.Fatal(err)
		}
		dst = d2
		if err := change.do(); err != nil {
			t.Fatal(err)
		}
		if err := CompareCopy(src, dst); !errors.Is(err, ErrCopy) {
			t.Errorf("%s: CompareCopy = %v; want ErrCopy", change.name, err)
		}
	}
	if err := CopyCheckout(src, filepath.Join(t.TempDir(), "c"), Limits{Entries: 3}); err == nil || !strings.Contains(err.Error(), "more than 3 entries") {
		t.Errorf("a copy past its limit: %v", err)
	}
}

func FuzzParseClientConfig(f *testing.F) {
	f.Add([]byte(`{"mcpServers":{"a":{"command":"npx","args":["-y","x"]}}}`))
	f.Add([]byte(`{"servers":{"fs":{"type":"stdio","command":"node","args":["/x/y.js"],"cwd":"/x"}}}`))
	f.Add([]byte("{// c\n\"servers\":{\"a\":{/* d */\"command\":\"npx\",},},}"))
	f.Add([]byte("\ufeff{\"mcpServers\":{\"a\":{\"command\":\"npx\"}}}"))
	f.Add([]byte("{\"z\": 1.50,\n \"mcpServers\": { \"b\" : {\"url\": \"\\u00e9<\"} ,\"a\":{\"command\":\"npx\"}}, \"y\":[ ]}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Every offset of the plain JSON is the file's.
		if plain, _ := PlainJSON(b); len(plain) != len(b) {
			t.Fatalf("PlainJSON(%q) = %q; want as many bytes", b, plain)
		}
		cc, err := ParseClientConfig(b)
		if err != nil {
			return
		}
		for _, n := range cc.Names() {
			e, err := cc.Entry(n)
			if err != nil {
				continue
			}
			_, _ = PlanImport(n, e, noLookPath, "/d")
		}
		if _, err := cc.Encode(); err != nil {
			t.Fatalf("Encode of a config that parsed: %v", err)
		}
		// Rewrite keeps every byte but the entries it sets.
		for _, n := range cc.Names() {
			out, err := cc.Rewrite(map[string]json.RawMessage{n: cc.Written(n)})
			if err != nil || !bytes.Equal(out, b) {
				t.Fatalf("Rewrite of %q with its own entry = %q, %v; want the file as read", n, out, err)
			}
			out, err = cc.Rewrite(map[string]json.RawMessage{n: json.RawMessage(`{"url":"u"}`)})
			if err != nil {
				t.Fatal(err)
			}
			again, err := ParseClientConfig(out)
			if err != nil || string(again.Servers[n]) != `{"url":"u"}` || len(again.Servers) != len(cc.Servers) {
				t.Fatalf("Rewrite of %q gave %q (%v); want its entry set and the others kept", n, out, err)
			}
		}
	})
}

// TestClientConfigBOM: a Windows editor starts the file with a UTF-8 BOM.
// Such a config was refused as not JSON. It is read now, and a rewrite
// keeps the BOM with every other byte.
func TestClientConfigBOM(t *testing.T) {
	in := "\ufeff{\"mcpServers\": {\"a\": {\"command\": \"npx\"}, \"b\": {\"command\": \"uvx\"}}}\n"
	cc, err := ParseClientConfig([]byte(in))
	if err != nil {
		t.Fatalf("ParseClientConfig(BOM + config) = %v; want it read", err)
	}
	if got := cc.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Names() = %v; want [a b]", got)
	}
	out, err := cc.Rewrite(map[string]json.RawMessage{"a": json.RawMessage(`{"url":"u"}`)})
	want := "\ufeff{\"mcpServers\": {\"a\": {\"url\":\"u\"}, \"b\": {\"command\": \"uvx\"}}}\n"
	if err != nil || string(out) != want {
		t.Errorf("Rewrite = %q, %v; want %q", out, err, want)
	}
	// A name the file lacks is added by encoding it again: the BOM stays.
	out, err = cc.Rewrite(map[string]json.RawMessage{"c": json.RawMessage(`{"url":"u"}`)})
	if err != nil || !bytes.HasPrefix(out, []byte("\ufeff{")) {
		t.Errorf("Rewrite adding an entry = %q, %v; want it to start with the BOM", out, err)
	}
	if _, err := ParseClientConfig(out); err != nil {
		t.Errorf("the rewritten file does not read again: %v", err)
	}
}

// TestClientConfigJSONC: VS Code's mcp.json is JSON with comments and
// trailing commas, and such a file was refused. It is read now. A
// rewrite keeps every byte outside the entries it sets, comments and
// commas too, and an entry's bytes as written (Written) put back give
// the file as read, with the comments inside that entry.
func TestClientConfigJSONC(t *testing.T) {
	in := "{\n  // my servers\n  \"servers\": {\n    \"a\": {\n      \"command\": \"npx\", // the launcher\n      \"args\": [\"-y\", \"x\",],\n    },\n    /* keep b */ \"b\": {\"url\": \"http://h/b//c\"},\n  },\n}\n"
	cc, err := ParseClientConfig([]byte(in))
	if err != nil {
		t.Fatalf("ParseClientConfig(JSONC) = %v; want it read", err)
	}
	e, err := cc.Entry("a")
	if err != nil || e.Command != "npx" || !slices.Equal(e.Args, []string{"-y", "x"}) {
		t.Errorf("Entry(a) = %+v, %v; want npx -y x", e, err)
	}
	if e, err := cc.Entry("b"); err != nil || e.URL != "http://h/b//c" {
		t.Errorf("Entry(b) = %+v, %v; want its url whole", e, err)
	}
	out, err := cc.Rewrite(map[string]json.RawMessage{"a": json.RawMessage(`{"type":"http","url":"u"}`)})
	want := "{\n  // my servers\n  \"servers\": {\n    \"a\": {\"type\":\"http\",\"url\":\"u\"},\n    /* keep b */ \"b\": {\"url\": \"http://h/b//c\"},\n  },\n}\n"
	if err != nil || string(out) != want {
		t.Fatalf("Rewrite = %q, %v; want %q", out, err, want)
	}
	written := cc.Written("a")
	again, err := ParseClientConfig(out)
	if err != nil {
		t.Fatalf("the rewritten file does not read again: %v", err)
	}
	back, err := again.Rewrite(map[string]json.RawMessage{"a": written})
	if err != nil || string(back) != in {
		t.Errorf("Rewrite with Written(a) = %q, %v; want the file as read, %q", back, err, in)
	}
	// Encoding the file again would drop its comments: refused.
	if out, err := cc.Rewrite(map[string]json.RawMessage{"c": json.RawMessage(`{"url":"u"}`)}); err == nil || !strings.Contains(err.Error(), "comments") {
		t.Errorf("Rewrite adding an entry to a file with comments = %q, %v; want it refused, naming the comments", out, err)
	}
}
