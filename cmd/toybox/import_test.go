package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
	"toybox/vat/store"
	"toybox/vat/supervisor"
	"toybox/vat/switches"
)

// fakeSupervisor answers the admin requests an import makes, for one vat,
// and purges its data folder on DELETE ?purge=1 as the supervisor does.
type fakeSupervisor struct {
	dataDir string

	mu        sync.Mutex
	installed bool
	deletes   []string // each DELETE's query
}

func (f *fakeSupervisor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		if !f.installed {
			http.Error(w, `{"error":"no such vat"}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"uid": 0})
	case http.MethodPut:
		f.installed = true
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"notes","status":"running","upgraded":false}`))
	case http.MethodDelete:
		f.deletes = append(f.deletes, r.URL.RawQuery)
		if !f.installed {
			http.Error(w, `{"error":"no such vat"}`, http.StatusNotFound)
			return
		}
		f.installed = false
		if r.URL.Query().Get("purge") == "1" {
			_ = os.RemoveAll(f.dataDir)
		}
		_, _ = w.Write([]byte(`{}`))
	default:
		http.Error(w, "", http.StatusMethodNotAllowed)
	}
}

// TestImportFailureKeepsDataFolder: an undo keeps the vat's data folder,
// and a later import of the same server is to find it as it was. When
// that import failed after the vat was installed (here: the vat had
// changed its data file since, so the copy differs), its rollback
// removed the vat with ?purge=1 and the owner's data went with it. A
// data folder the failed import made still goes.
func TestImportFailureKeepsDataFolder(t *testing.T) {
	tests := []struct {
		name string
		// before is the data file already in the vat's data folder ("":
		// no data folder).
		before    string
		wantQuery string // of the rollback's DELETE
	}{
		{name: "a data folder there before", before: `{"notes":["written by the vat since"]}`, wantQuery: ""},
		{name: "no data folder before", wantQuery: "purge=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "notes-server")
			data := filepath.Join(dir, "state", "data", "notes")
			files := map[string]string{
				filepath.Join(src, "package.json"): `{"name":"notes-server"}`,
				filepath.Join(src, "server.js"):    "// a server\n",
				filepath.Join(src, "notes.json"):   `{"notes":[]}`,
			}
			if tt.before != "" {
				files[filepath.Join(data, "notes.json")] = tt.before
			}
			writeFiles(t, files)
			config, _ := notesConfig(t, dir, filepath.Join(src, "server.js"), filepath.Join(src, "notes.json"))
			f := &fakeSupervisor{dataDir: data}
			sock := serveAdmin(t, dir, f)

			im := importer{a: newAdmin(sock, 10*time.Second), state: filepath.Join(dir, "state"), backups: filepath.Join(dir, "backups")}
			code, stderr := runCapturingStderr(t, func() int { return im.run(config) })
			if code != exitError {
				t.Fatalf("import = %d (%s); want %d: copying the data file fails", code, stderr, exitError)
			}
			if tt.before != "" {
				if b, err := os.ReadFile(filepath.Join(data, "notes.json")); err != nil || string(b) != tt.before {
					t.Errorf("the vat's data file after the failed import = %q, %v; want it kept", b, err)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.installed || len(f.deletes) != 1 || f.deletes[0] != tt.wantQuery {
				t.Errorf("after the failed import: installed %v, DELETE queries %q; want the vat removed again with %q", f.installed, f.deletes, tt.wantQuery)
			}
		})
	}
}

// racedSupervisor answers as the supervisor does when another import (or
// an operator's PUT) installs the vat between an import's GET and its
// PUT: the GET finds nothing, the vat is there by the PUT.
type racedSupervisor struct {
	dataDir string

	mu          sync.Mutex
	overwritten bool     // a PUT upgraded the other's vat
	deletes     []string // each DELETE's query
}

func (f *racedSupervisor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		http.Error(w, `{"error":"no such vat"}`, http.StatusNotFound)
	case http.MethodPut:
		if r.Header.Get("If-None-Match") == "*" {
			w.WriteHeader(http.StatusPreconditionFailed)
			_, _ = w.Write([]byte(`{"error":"already installed: vat notes is already installed"}`))
			return
		}
		f.overwritten = true
		_, _ = w.Write([]byte(`{"upgraded":true}`))
	case http.MethodDelete:
		f.deletes = append(f.deletes, r.URL.RawQuery)
		if r.URL.Query().Get("purge") == "1" {
			_ = os.RemoveAll(f.dataDir)
		}
		_, _ = w.Write([]byte(`{}`))
	default:
		http.Error(w, "", http.StatusMethodNotAllowed)
	}
}

// TestImportDoesNotTakeARacedVat: an import asked whether the vat was
// there (GET), then installed it with a plain PUT, which upgrades a vat
// that is there. Another import of the same server (or an install)
// between the two had its vat overwritten with this one's code; and when
// this import failed later, its rollback removed that vat, with ?purge=1
// its data too. The PUT now installs only a new vat (If-None-Match: *):
// refused, the import fails that server, and touches nothing of the
// other's.
func TestImportDoesNotTakeARacedVat(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "notes-server")
	data := filepath.Join(dir, "state", "data", "notes")
	writeFiles(t, map[string]string{
		filepath.Join(src, "package.json"): `{"name":"notes-server"}`,
		filepath.Join(src, "server.js"):    "// a server\n",
		filepath.Join(data, "theirs.json"): `{"the other vat's":"data"}`,
	})
	config, _ := notesConfig(t, dir, filepath.Join(src, "server.js"))
	f := &racedSupervisor{dataDir: data}
	sock := serveAdmin(t, dir, f)

	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), state: filepath.Join(dir, "state"), backups: backups}
	code, stderr := runCapturingStderr(t, func() int { return im.run(config) })
	if code != exitError || !strings.Contains(stderr, "already installed") {
		t.Errorf("import = %d (%s); want %d saying the vat is already installed", code, stderr, exitError)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.overwritten || len(f.deletes) != 0 {
		t.Errorf("the other's vat: overwritten %v, DELETE queries %q; want it left alone", f.overwritten, f.deletes)
	}
	if b, err := os.ReadFile(filepath.Join(data, "theirs.json")); err != nil || !strings.Contains(string(b), "other vat") {
		t.Errorf("the other vat's data file: %q, %v; want it kept", b, err)
	}
	if live, err := liveBackups(backups); err != nil || len(live) != 0 {
		t.Errorf("live backups after the refused import: %d, %v; want none", len(live), err)
	}
}

// TestImportIntoAStoppingSupervisor: a supervisor that is stopping answers
// a PUT with 503 and an error, and installs nothing; a 503 with the vat's
// status means installed but off. The import took both for an install: it
// reported the server imported, kept a backup of a vat that was never
// made, and `toybox install` printed "<nil>" for its status and exited 0.
// Here a real supervisor, shut down, answers the PUT.
func TestImportIntoAStoppingSupervisor(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, cfg := notesConfig(t, dir, filepath.Join(src, "server.js"))

	state := filepath.Join(dir, "state")
	st, err := store.Open(store.Config{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := switches.New(switches.Config{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(supervisor.Config{Store: st, Switches: sw})
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	sock := serveAdmin(t, dir, sup.AdminHandler())

	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups}
	code, stderr := runCapturingStderr(t, func() int { return im.run(config) })
	if code != exitError || !strings.Contains(stderr, supervisor.ErrShutdown.Error()) {
		t.Errorf("import = %d (%s); want %d saying %q", code, stderr, exitError, supervisor.ErrShutdown)
	}
	if live, err := liveBackups(backups); err != nil || len(live) != 0 {
		t.Errorf("live backups after the refused import: %d, %v; want none", len(live), err)
	}
	if b, err := os.ReadFile(config); err != nil || string(b) != string(cfg) {
		t.Errorf("the client's config after the refused import:\n%s (%v)\nwant it as it was:\n%s", b, err, cfg)
	}

	// toybox install reads the same answer: the package install is
	// refused first (this supervisor has no node), so the answer is
	// read as the supervisor gives it at the PUT.
	for _, tt := range []struct {
		status int
		body   string
		ok     bool
	}{
		{http.StatusServiceUnavailable, `{"error":"` + supervisor.ErrShutdown.Error() + `"}`, false},
		{http.StatusServiceUnavailable, `{"id":"notes","status":"off: crashed","upgraded":false}`, true},
		{http.StatusCreated, `{"id":"notes","status":"running","upgraded":false}`, true},
		{http.StatusCreated, `{}`, false},
	} {
		st, err := installAnswer(tt.status, []byte(tt.body))
		if (err == nil) != tt.ok || (tt.ok && st["status"] == nil) {
			t.Errorf("installAnswer(%d, %s) = %v, %v; want ok %v", tt.status, tt.body, st, err, tt.ok)
		}
	}
}

// writeFiles writes each file of files (its path: its content), with the

// serveAdmin serves h on dir/admin.sock, as a supervisor's admin socket,
// until the test ends, and returns the socket's path.
func serveAdmin(t *testing.T, dir string, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(dir, "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

// notesServer writes the checkout of a small server into dir/notes-server
// (package.json and server.js) and returns its folder.
func notesServer(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "notes-server")
	writeFiles(t, map[string]string{
		filepath.Join(src, "package.json"): `{"name":"notes-server"}`,
		filepath.Join(src, "server.js"):    "// a server\n",
	})
	return src
}

// folders it needs.
func writeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// notesConfig writes a client's config in dir whose one server, notes,
// runs node with args, and returns its path and what it holds.
func notesConfig(t *testing.T, dir string, args ...string) (string, []byte) {
	t.Helper()
	cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"notes": map[string]any{"command": "/usr/bin/node", "args": args},
	}})
	config := filepath.Join(dir, "claude_desktop_config.json")
	if err := os.WriteFile(config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return config, cfg
}

// droppingSupervisor finds no vat on GET and drops the connection on
// PUT, as a supervisor killed while it installs does.
type droppingSupervisor struct{}

func (droppingSupervisor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodDelete:
		http.Error(w, `{"error":"no such vat"}`, http.StatusNotFound)
	case http.MethodPut:
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = c.Close()
		}
	}
}

// TestImportErrorHidesEnvValues: a server's env values travel in the
// install's query (?env=). When the supervisor went away during the
// install, the error printed was Go's, which quotes the whole request
// URL, so the operator's API key went to the terminal.
func TestImportErrorHidesEnvValues(t *testing.T) {
	dir := t.TempDir()
	const secret = "sk-live-0123456789abcdef"
	cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"hello": map[string]any{"command": "npx", "args": []string{"-y", "tb-mcp-hello@1"}, "env": map[string]string{"API_KEY": secret}},
	}})
	config := filepath.Join(dir, "claude_desktop_config.json")
	if err := os.WriteFile(config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := serveAdmin(t, dir, droppingSupervisor{})

	im := importer{a: newAdmin(sock, 10*time.Second), backups: filepath.Join(dir, "backups")}
	code, stderr := runCapturingStderr(t, func() int { return im.run(config) })
	if code != exitError || !strings.Contains(stderr, "hello") {
		t.Errorf("import = %d (%s); want %d naming the server", code, stderr, exitError)
	}
	if strings.Contains(stderr, "sk-live") || strings.Contains(stderr, "0123456789abcdef") {
		t.Errorf("import printed the server's env value:\n%s", stderr)
	}
	if !strings.Contains(stderr, "EOF") {
		t.Errorf("import printed %q; want the failure (EOF) named", stderr)
	}
}

// TestImportRewritesThroughALink: a client config is often a link into
// the owner's dotfiles. The rewrite and the undo renamed a new file over
// the link: the link was gone, the dotfiles kept the old servers, and a
// later edit of the dotfiles no longer reached the client.
func TestImportRewritesThroughALink(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	_, cfg := notesConfig(t, dir, filepath.Join(src, "server.js"))
	target := filepath.Join(dir, "dotfiles", "claude.json")
	writeFiles(t, map[string]string{target: string(cfg)})
	if err := os.Chmod(target, 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "claude_desktop_config.json")
	if err := os.Remove(config); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("dotfiles/claude.json", config); err != nil {
		t.Fatal(err)
	}
	sock := serveAdmin(t, dir, &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")})

	check := func(step, want string) {
		t.Helper()
		if l, err := os.Readlink(config); err != nil || l != "dotfiles/claude.json" {
			t.Errorf("after %s the config is %q, %v; want the link kept", step, l, err)
		}
		b, err := os.ReadFile(target)
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("after %s the link's target holds %s (%v); want %s in it", step, b, err, want)
		}
		if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("after %s the link's target: %v, %v; want mode 0600", step, fi.Mode(), err)
		}
	}
	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}
	mustImport(t, &im, config)
	check("the import", "http://localhost:8787/notes/mcp")
	mustUndo(t, sock, backups)
	check("the undo", "/usr/bin/node")
}

// TestUndoKeepsAnEntryEditedSince: an undo put the backed-up entry over
// whatever the config held under that name, so an entry the owner wrote
// since the import (another server under the same name) was lost. The
// undo now refuses that server, saying why, and changes nothing of it.
func TestUndoKeepsAnEntryEditedSince(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, _ := notesConfig(t, dir, filepath.Join(src, "server.js"))
	f := &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")}
	sock := serveAdmin(t, dir, f)

	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}
	mustImport(t, &im, config)
	edited := []byte(`{"mcpServers":{"notes":{"command":"/usr/bin/python3","args":["/home/me/new-notes.py"],"env":{"TOKEN":"mine"}}}}` + "\n")
	if err := os.WriteFile(config, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stderr := runCapturingStderr(t, func() int { return undoImport(newAdmin(sock, 10*time.Second), backups, nil) })
	if code != exitError || !strings.Contains(stderr, "changed since") {
		t.Errorf("undo = %d (%s); want %d saying the entry changed since the import", code, stderr, exitError)
	}
	if b, err := os.ReadFile(config); err != nil || string(b) != string(edited) {
		t.Errorf("the config after the undo:\n%s (%v)\nwant the owner's edit kept:\n%s", b, err, edited)
	}
	if live, err := liveBackups(backups); err != nil || len(live) != 1 {
		t.Errorf("live backups after the refused undo: %d, %v; want the one kept", len(live), err)
	}
}

// TestImportLeavesRemoteEntries: a remote entry (url) has nothing to
// install and is left as it is (docs/packages.md). The import counted it
// as a failed server and exited 1, so a config with one, or any second
// run over a rewritten config, "failed" though nothing went wrong.
func TestImportLeavesRemoteEntries(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	remote := `{"type":"http","url":"https://mcp.example.com/mcp","headers":{"Authorization":"Bearer x"}}`
	cfg := `{"mcpServers":{"notes":{"command":"/usr/bin/node","args":["` + filepath.Join(src, "server.js") + `"]},"remote":` + remote + `}}`
	config := filepath.Join(dir, "claude_desktop_config.json")
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := serveAdmin(t, dir, &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")})

	backups := filepath.Join(dir, "backups")
	for _, run := range []string{"the import", "a second import"} {
		im := importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}
		code, stderr := runCapturingStderr(t, func() int { return im.run(config) })
		if code != exitOK {
			t.Errorf("%s = %d (%s); want %d: a remote entry is no failure", run, code, stderr, exitOK)
		}
		b, err := os.ReadFile(config)
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ MCPServers map[string]json.RawMessage }
		if err := json.Unmarshal(b, &got); err != nil || !sameJSON(got.MCPServers["remote"], json.RawMessage(remote)) {
			t.Errorf("after %s the remote entry is %s (%v); want %s", run, got.MCPServers["remote"], err, remote)
		}
	}
}

// TestUndoAfterAnImportKilledBeforeItsRename: an import killed after it
// marked its backups rewritten but before it renamed the new config over
// the old one leaves the old entry in place. Its undo has nothing to put
// back and removes the vat.
func TestUndoAfterAnImportKilledBeforeItsRename(t *testing.T) {
	dir := t.TempDir()
	config, cfg := notesConfig(t, dir, "/srv/notes/server.js")
	f := &fakeSupervisor{installed: true}
	sock := serveAdmin(t, dir, f)

	backups := filepath.Join(dir, "backups")
	var c struct{ MCPServers map[string]json.RawMessage }
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	bk := &backup{
		Stamp: "20260101T000000.000000000Z-0001", Name: "notes", Vat: "notes", Config: config, Key: "mcpServers",
		Entry: c.MCPServers["notes"], Rewritten: true, RewrittenTo: json.RawMessage(`{"type":"http","url":"http://localhost:8787/notes/mcp"}`),
	}
	if err := writeBackup(backups, bk); err != nil {
		t.Fatal(err)
	}
	if code, stderr := runCapturingStderr(t, func() int { return undoImport(newAdmin(sock, 10*time.Second), backups, nil) }); code != exitOK {
		t.Errorf("undo = %d (%s); want %d", code, stderr, exitOK)
	}
	if b, err := os.ReadFile(config); err != nil || string(b) != string(cfg) {
		t.Errorf("the config after the undo:\n%s (%v)\nwant it as it was:\n%s", b, err, cfg)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.installed {
		t.Errorf("the vat is still there after the undo")
	}
}

// TestImportKeepsTheConfigsOwner: run as root (sudo) on an owner's
// config, the rewrite and the undo made a new file owned by root with
// the old mode, 0600: the owner's client could no longer read its own
// config. The new file now has the old one's owner and group.
func TestImportKeepsTheConfigsOwner(t *testing.T) {
	testenv.RequireRoot(t) // to give the config another owner
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, _ := notesConfig(t, dir, filepath.Join(src, "server.js"))
	const uid, gid = 4321, 4322
	if err := os.Chown(config, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(config, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := serveAdmin(t, dir, &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")})

	check := func(step string) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(config, &st); err != nil || st.Uid != uid || st.Gid != gid || st.Mode&0o777 != 0o600 {
			t.Errorf("after %s the config is owned by %d:%d, mode %o (%v); want %d:%d, 0600", step, st.Uid, st.Gid, st.Mode&0o777, err, uid, gid)
		}
	}
	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}
	mustImport(t, &im, config)
	check("the import")
	mustUndo(t, sock, backups)
	check("the undo")
}

// TestImportUndoRestoresTheBytes: the rewrite and the undo encoded the
// whole config again from maps: members and servers sorted, the
// owner's layout and escapes gone, so an undo did not give back the file
// the import found. Now only the imported entry's value changes, and an
// undo puts the same bytes back.
func TestImportUndoRestoresTheBytes(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	cfg := "{\n\t\"zoom\": 1.50,\n\t\"mcpServers\": {\n\t\t\"zeta\": {\"url\": \"https://z.example/mcp?a=1&b=\\u00e9\"},\n" +
		"\t\t\"notes\": {\"command\": \"/usr/bin/node\", \"args\": [\"" + filepath.Join(src, "server.js") + "\"], \"env\": {\"KEY\": \"<secret>\"}}\n\t},\n\t\"alpha\": [ ]\n}\n"
	config := filepath.Join(dir, "claude_desktop_config.json")
	if err := os.WriteFile(config, []byte(cfg), 0o640); err != nil {
		t.Fatal(err)
	}
	sock := serveAdmin(t, dir, &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")})

	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}
	mustImport(t, &im, config)
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(cfg, `{"command"`)
	end := strings.Index(cfg, "}}\n") + 2
	want := cfg[:start] + `{"type":"http","url":"http://localhost:8787/notes/mcp"}` + cfg[end:]
	if string(b) != want {
		t.Errorf("the config after the import:\n%s\nwant only the entry changed:\n%s", b, want)
	}
	mustUndo(t, sock, backups)
	if b, err := os.ReadFile(config); err != nil || string(b) != cfg {
		t.Errorf("the config after the undo:\n%s (%v)\nwant the bytes the import found:\n%s", b, err, cfg)
	}
	if fi, err := os.Stat(config); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the config's mode after the undo: %v, %v; want 0640", fi.Mode(), err)
	}
}

// TestImportRefusesAReadOnlyConfig: a rename does not ask the file's
// mode, so a config the owner made read-only (0444, to keep it as it is)
// was replaced all the same. The import now refuses it before it
// installs anything, saying why, and leaves it as it is.
func TestImportRefusesAReadOnlyConfig(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, cfg := notesConfig(t, dir, filepath.Join(src, "server.js"))
	if err := os.Chmod(config, 0o444); err != nil {
		t.Fatal(err)
	}
	f := &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")}
	sock := serveAdmin(t, dir, f)

	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}
	code, stderr := runCapturingStderr(t, func() int { return im.run(config) })
	if code != exitError || !strings.Contains(stderr, "read-only") {
		t.Errorf("import = %d (%s); want %d saying the config is read-only", code, stderr, exitError)
	}
	if b, err := os.ReadFile(config); err != nil || string(b) != string(cfg) {
		t.Errorf("the config after the refused import:\n%s (%v)\nwant it as it was:\n%s", b, err, cfg)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.installed || len(f.deletes) != 0 {
		t.Errorf("the refused import installed %v, deleted %q; want nothing done", f.installed, f.deletes)
	}
}

// TestImportRefusesAConfigNotAFile: the config was read whole, whatever
// it was. A fifo hung the import, and a huge file (a wrong path, a log)
// was read into memory before it was refused. Both now fail at once,
// saying why.
func TestImportRefusesAConfigNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, []byte(`{"mcpServers":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 1<<30); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, path, want string }{
		{"a fifo", fifo, "not a regular file"},
		{"a huge file", huge, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			im := importer{a: newAdmin(filepath.Join(dir, "admin.sock"), time.Second), backups: filepath.Join(dir, "backups")}
			done := make(chan struct{})
			var code int
			var stderr string
			go func() {
				defer close(done)
				code, stderr = runCapturingStderr(t, func() int { return im.run(tt.path) })
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				// Let the hung read end.
				if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
					w.Close()
				}
				<-done
				t.Fatalf("import of %s hung for 10s", tt.name)
			}
			if code != exitError || !strings.Contains(stderr, tt.want) {
				t.Errorf("import = %d (%s); want %d saying %q", code, stderr, exitError, tt.want)
			}
		})
	}
}

// editingSupervisor is fakeSupervisor, and while it installs, the
// client writes its config again: edit is the new config.
type editingSupervisor struct {
	fakeSupervisor
	config string
	edit   []byte
}

func (f *editingSupervisor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPut {
		_ = os.WriteFile(f.config, f.edit, 0o600)
	}
	f.fakeSupervisor.ServeHTTP(w, r)
}

// TestImportKeepsAnEntryEditedMeanwhile: an install takes minutes, and
// meanwhile the client or the owner may write the config again. The
// rewrite read the file again but put the vat's URL over the server's
// entry whatever it had become, and the backup held the entry as it was
// before: the edit was lost, and an undo put the older entry back. That
// server is now left as it is now and its vat removed.
func TestImportKeepsAnEntryEditedMeanwhile(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, _ := notesConfig(t, dir, filepath.Join(src, "server.js"))
	edit := []byte(`{"mcpServers":{"notes":{"command":"/usr/bin/node","args":["` + filepath.Join(src, "server.js") + `"],"env":{"NOTES_KEY":"new"}}}}`)
	f := &editingSupervisor{fakeSupervisor: fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")}, config: config, edit: edit}
	sock := serveAdmin(t, dir, f)

	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}
	code, stderr := runCapturingStderr(t, func() int { return im.run(config) })
	if code != exitError || !strings.Contains(stderr, "changed during the import") {
		t.Errorf("import = %d (%s); want %d saying the entry changed during the import", code, stderr, exitError)
	}
	if b, err := os.ReadFile(config); err != nil || string(b) != string(edit) {
		t.Errorf("the config after the import:\n%s (%v)\nwant the edit kept:\n%s", b, err, edit)
	}
	if live, err := liveBackups(backups); err != nil || len(live) != 0 {
		t.Errorf("live backups: %d, %v; want none", len(live), err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.installed {
		t.Errorf("the vat is still there; want it removed")
	}
}

// runCapturingStdout runs f with os.Stdout going to a pipe, and returns
// f's result and what it wrote there.
func runCapturingStdout(t *testing.T, f func() int) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	old := os.Stdout
	os.Stdout = w
	got := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	code := f()
	os.Stdout = old
	w.Close()
	return code, <-got
}

// TestImportClaimsOnlyWhatStayed: a server was printed "imported as vat"
// as soon as its vat was installed. When the rewrite then failed (here
// its entry changed meanwhile), the vat was removed again, but stdout,
// which a script reads, still said imported.
func TestImportClaimsOnlyWhatStayed(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, _ := notesConfig(t, dir, filepath.Join(src, "server.js"))
	f := &editingSupervisor{fakeSupervisor: fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")}, config: config, edit: []byte(`{"mcpServers":{"notes":{"url":"http://elsewhere/mcp"}}}`)}
	sock := serveAdmin(t, dir, f)

	im := importer{a: newAdmin(sock, 10*time.Second), backups: filepath.Join(dir, "backups"), rewrite: "http://localhost:8787"}
	var stderr string
	code, stdout := runCapturingStdout(t, func() int {
		code, e := runCapturingStderr(t, func() int { return im.run(config) })
		stderr = e
		return code
	})
	if code != exitError || strings.Contains(stdout, "imported") {
		t.Errorf("import = %d, stdout %q (stderr %q); want %d and no server said imported", code, stdout, stderr, exitError)
	}
}

// TestImportTakesAnEntryOnlyReformattedMeanwhile: a client that saves
// its config again during the import (its own settings) writes the same
// entries in its own layout. Only the layout changed: the server is
// imported, and an undo gives back the file as the client last wrote it.
func TestImportTakesAnEntryOnlyReformattedMeanwhile(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, _ := notesConfig(t, dir, filepath.Join(src, "server.js"))
	edit := []byte("{\n  \"mcpServers\": {\n    \"notes\": {\n      \"command\": \"/usr/bin/node\",\n      \"args\": [\"" + filepath.Join(src, "server.js") + "\"]\n    }\n  },\n  \"theme\": \"dark\"\n}\n")
	f := &editingSupervisor{fakeSupervisor: fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")}, config: config, edit: edit}
	sock := serveAdmin(t, dir, f)

	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}
	if code, stderr := runCapturingStderr(t, func() int { return im.run(config) }); code != exitOK {
		t.Fatalf("import = %d (%s); want %d: only the layout changed", code, stderr, exitOK)
	}
	mustUndo(t, sock, backups)
	if b, err := os.ReadFile(config); err != nil || string(b) != string(edit) {
		t.Errorf("the config after the undo:\n%s (%v)\nwant the client's last write:\n%s", b, err, edit)
	}
}

// TestImportRewriteKeepsTheEntrysOtherKeys: some clients keep more in an
// entry than how to start it (Cline's "disabled", "autoApprove"). The
// rewrite wrote only {"type","url"}, so a server the owner had disabled
// came back enabled, now through toybox. Only the keys that start a
// stdio server are replaced.
func TestImportRewriteKeepsTheEntrysOtherKeys(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	cfg := `{"mcpServers":{"notes":{"command":"/usr/bin/node","args":["` + filepath.Join(src, "server.js") + `"],"env":{"K":"v"},"disabled":true,"autoApprove":["read"],"timeout":60}}}`
	config := filepath.Join(dir, "cline_mcp_settings.json")
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := serveAdmin(t, dir, &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")})

	im := importer{a: newAdmin(sock, 10*time.Second), backups: filepath.Join(dir, "backups"), rewrite: "http://localhost:8787"}
	mustImport(t, &im, config)
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ MCPServers map[string]json.RawMessage }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := json.RawMessage(`{"type":"http","url":"http://localhost:8787/notes/mcp","disabled":true,"autoApprove":["read"],"timeout":60}`)
	if !sameJSON(got.MCPServers["notes"], want) {
		t.Errorf("the rewritten entry = %s; want %s", got.MCPServers["notes"], want)
	}
}

// TestImportLeavesASharedBackupFolder: each backup write made its folder
// 0700. Given a folder already there and shared (--backups /tmp, or ~),
// the import took it from everyone else: /tmp lost its sticky bit and
// became root's alone. A folder already there that others may enter is
// now refused, saying why, and its mode is left as it is.
func TestImportLeavesASharedBackupFolder(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, cfg := notesConfig(t, dir, filepath.Join(src, "server.js"))
	shared := filepath.Join(dir, "tmp")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}
	f := &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")}
	sock := serveAdmin(t, dir, f)

	im := importer{a: newAdmin(sock, 10*time.Second), backups: shared, rewrite: "http://localhost:8787"}
	code, stderr := runCapturingStderr(t, func() int { return im.run(config) })
	if code != exitError || !strings.Contains(stderr, "others may") {
		t.Errorf("import = %d (%s); want %d saying others may enter the backup folder", code, stderr, exitError)
	}
	if fi, err := os.Stat(shared); err != nil || fi.Mode()&(fs.ModePerm|fs.ModeSticky) != 0o777|fs.ModeSticky {
		t.Errorf("the shared folder after the import: %v, %v; want its mode left 1777", fi.Mode(), err)
	}
	if b, err := os.ReadFile(config); err != nil || string(b) != string(cfg) {
		t.Errorf("the config after the refused import:\n%s (%v)\nwant it as it was", b, err)
	}
}

// errorSupervisor answers every request with 500, as a supervisor that
// cannot read its state does, or another service on the socket.
type errorSupervisor struct{}

func (errorSupervisor) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, `{"error":"reading the state: input/output error"}`, http.StatusInternalServerError)
}

// TestImportSaysWhatTheSupervisorSaid: any answer to the import's first
// question (GET /<vat>) but 404 was taken for "vat already exists: remove
// it or rename the server", which was not true and hid the reason.
func TestImportSaysWhatTheSupervisorSaid(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, _ := notesConfig(t, dir, filepath.Join(src, "server.js"))
	sock := serveAdmin(t, dir, errorSupervisor{})

	im := importer{a: newAdmin(sock, 10*time.Second), backups: filepath.Join(dir, "backups")}
	code, stderr := runCapturingStderr(t, func() int { return im.run(config) })
	if code != exitError || strings.Contains(stderr, "already exists") || !strings.Contains(stderr, "input/output error") {
		t.Errorf("import = %d (%s); want %d with the supervisor's reason, not that the vat exists", code, stderr, exitError)
	}
}

// TestImportRefusesARewriteURLWithAQuery: --rewrite URL becomes
// URL/<vat>/mcp in each entry. A URL with a query or a fragment was
// taken, and every rewritten entry pointed inside that query
// ("http://h/?k=v/notes/mcp"), reaching no vat.
func TestImportRefusesARewriteURLWithAQuery(t *testing.T) {
	dir := t.TempDir()
	config, cfg := notesConfig(t, dir, "/srv/notes/server.js")
	for _, u := range []string{"http://localhost:8787/?k=v", "http://localhost:8787/#top"} {
		code, stderr := runCapturingStderr(t, func() int {
			return importMain([]string{"--admin", filepath.Join(dir, "none.sock"), "--backups", filepath.Join(dir, "backups"), "--rewrite", u, config})
		})
		if code != exitUsage || !strings.Contains(stderr, "--rewrite") {
			t.Errorf("import --rewrite %s = %d (%s); want %d naming --rewrite", u, code, stderr, exitUsage)
		}
	}
	if b, err := os.ReadFile(config); err != nil || string(b) != string(cfg) {
		t.Errorf("the config: %s (%v); want it as it was", b, err)
	}
}

// TestUndoSaysWhenTheVatWasGone: an undo whose vat was already removed
// (its DELETE answered 404) printed "vat notes removed" all the same. It
// now says the vat was no longer installed.
func TestUndoSaysWhenTheVatWasGone(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, _ := notesConfig(t, dir, filepath.Join(src, "server.js"))
	f := &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")}
	sock := serveAdmin(t, dir, f)
	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups}
	mustImport(t, &im, config)
	f.mu.Lock()
	f.installed = false // removed meanwhile, by other means
	f.mu.Unlock()
	code, out := runCapturingStdout(t, func() int { return undoImport(newAdmin(sock, 10*time.Second), backups, nil) })
	if code != exitOK || strings.Contains(out, "removed") || !strings.Contains(out, "no longer installed") {
		t.Errorf("undo = %d, %q; want %d saying the vat was no longer installed", code, out, exitOK)
	}
}

// TestUndoWhenTheConfigIsGone: an undo whose config was deleted (or
// moved) since the import failed on it and kept its backup live, so
// every later undo failed on it again, for ever, and its vat stayed. The
// undo now removes the vat, says the entry could not go back and where it
// is kept, and marks the backup undone: a later undo is not stuck on it.
func TestUndoWhenTheConfigIsGone(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, _ := notesConfig(t, dir, filepath.Join(src, "server.js"))
	f := &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")}
	sock := serveAdmin(t, dir, f)
	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}
	mustImport(t, &im, config)
	live, err := liveBackups(backups)
	if err != nil || len(live) != 1 {
		t.Fatalf("live backups: %d, %v; want 1", len(live), err)
	}
	if err := os.Rename(config, config+".moved"); err != nil {
		t.Fatal(err)
	}
	code, stderr := runCapturingStderr(t, func() int { return undoImport(newAdmin(sock, 10*time.Second), backups, nil) })
	if code != exitError || !strings.Contains(stderr, config) || !strings.Contains(stderr, "is gone") || !strings.Contains(stderr, live[0].file) {
		t.Errorf("undo = %d (%s); want %d saying %s is gone and where its entry is kept (%s)", code, stderr, exitError, config, live[0].file)
	}
	f.mu.Lock()
	installed := f.installed
	f.mu.Unlock()
	if installed {
		t.Errorf("the vat is still there after the undo; want it removed")
	}
	code, out := runCapturingStdout(t, func() int { return undoImport(newAdmin(sock, 10*time.Second), backups, nil) })
	if code != exitOK || !strings.Contains(out, "nothing to undo") {
		t.Errorf("a second undo = %d, %q; want %d, nothing to undo", code, out, exitOK)
	}
	b, err := os.ReadFile(live[0].file)
	if err != nil || !strings.Contains(string(b), "server.js") {
		t.Errorf("the backup after the undo: %s (%v); want it kept, with its entry", b, err)
	}
	if _, err := os.Stat(config); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the undo made %s again (%v); want it left gone", config, err)
	}
}

// TestImportUndoJSONC: VS Code's mcp.json holds comments and trailing
// commas. The rewrite keeps every one outside the imported entry, and the
// undo puts the entry back as it was written, its own comments too: the
// file is then byte for byte the one the import found.
func TestImportUndoJSONC(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	cfg := "{\n  // my servers\n  \"servers\": {\n    /* notes: local */\n    \"notes\": {\n      \"command\": \"/usr/bin/node\", // node 22\n      \"args\": [\"" + filepath.Join(src, "server.js") + "\",],\n    },\n    \"web\": {\"type\": \"http\", \"url\": \"https://w.example//mcp\",},\n  },\n}\n"
	config := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := serveAdmin(t, dir, &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")})
	backups := filepath.Join(dir, "backups")
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}
	mustImport(t, &im, config)
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(cfg, "{\n      \"command\"")
	end := strings.Index(cfg, "    },\n") + len("    }")
	want := cfg[:start] + `{"type":"http","url":"http://localhost:8787/notes/mcp"}` + cfg[end:]
	if string(b) != want {
		t.Errorf("the config after the import:\n%s\nwant only the entry changed:\n%s", b, want)
	}
	mustUndo(t, sock, backups)
	if b, err := os.ReadFile(config); err != nil || string(b) != cfg {
		t.Errorf("the config after the undo:\n%s (%v)\nwant the bytes the import found:\n%s", b, err, cfg)
	}
}

// TestImportKilledBeforeItsRename: the rewrite writes the new config, the
// operator's secrets in it, beside the old one and renames it over. A
// kill before the rename left that copy there for good, with the
// config's mode widened onto it (0644 here) while it was written. The
// copy is now the config's owner's and no one else's until its rename,
// and the next run that writes or undoes the config removes it, saying
// so.
func TestImportKilledBeforeItsRename(t *testing.T) {
	testenv.RequireRoot(t) // to give the config another owner
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, cfg := notesConfig(t, dir, filepath.Join(src, "server.js"))
	const uid, gid = 4321, 4322
	if err := os.Chown(config, uid, gid); err != nil {
		t.Fatal(err)
	}
	f := &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")}
	sock := serveAdmin(t, dir, f)
	backups := filepath.Join(dir, "backups")

	left := killWhileWriting(t, importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}, config, dir)
	var st unix.Stat_t
	if err := unix.Stat(left, &st); err != nil {
		t.Fatalf("the copy a killed run leaves: %v", err)
	}
	if st.Mode&0o077 != 0 || st.Uid != uid || st.Gid != gid {
		t.Errorf("the copy a killed run leaves is %d:%d mode %04o; want %d:%d and no one else's (0600)", st.Uid, st.Gid, st.Mode&0o7777, uid, gid)
	}

	code, stderr := runCapturingStderr(t, func() int { return undoImport(newAdmin(sock, 10*time.Second), backups, nil) })
	if code != exitOK || !strings.Contains(stderr, left) {
		t.Errorf("undo = %d (%s); want %d naming the copy %s it removed", code, stderr, exitOK, left)
	}
	if _, err := os.Lstat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the copy a killed run left is still there after the undo (%v)", err)
	}
	if b, err := os.ReadFile(config); err != nil || string(b) != string(cfg) {
		t.Errorf("the config after the undo:\n%s (%v)\nwant it as it was:\n%s", b, err, cfg)
	}
}

// TestImportUnderSudoKeepsTheUsersFiles: run by root (sudo) for a user's
// config with its backups in the user's home, the import made the backup
// folders and files root's, 0700 and 0600: the user could not read their
// own backups, nor run the undo without root. Backups now belong to the
// owner of the folder they are made in, and the config keeps its owner
// and mode through the rewrite and the undo.
func TestImportUnderSudoKeepsTheUsersFiles(t *testing.T) {
	testenv.RequireRoot(t) // to be root writing for another uid
	const uid, gid = 4321, 4322
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	src := notesServer(t, home)
	config, _ := notesConfig(t, home, filepath.Join(src, "server.js"))
	if err := filepath.WalkDir(home, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(config, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SUDO_UID", "4321")
	t.Setenv("SUDO_GID", "4322")
	sock := serveAdmin(t, dir, &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")})
	backups := filepath.Join(home, ".local", "state", "toybox", "import-backups")

	check := func(step string) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(config, &st); err != nil || st.Uid != uid || st.Gid != gid || st.Mode&0o777 != 0o600 {
			t.Errorf("after %s the config is %d:%d mode %04o (%v); want %d:%d 0600", step, st.Uid, st.Gid, st.Mode&0o777, err, uid, gid)
		}
		n := 0
		for p := backups; p != home; p = filepath.Dir(p) {
			if err := unix.Lstat(p, &st); err != nil || st.Uid != uid || st.Gid != gid {
				t.Errorf("after %s the folder %s is %d:%d (%v); want the user's, %d:%d", step, p, st.Uid, st.Gid, err, uid, gid)
			}
		}
		ents, err := os.ReadDir(backups)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			p := filepath.Join(backups, e.Name())
			n++
			if err := unix.Lstat(p, &st); err != nil || st.Uid != uid || st.Gid != gid || st.Mode&0o077 != 0 {
				t.Errorf("after %s the backup %s is %d:%d mode %04o (%v); want the user's alone, %d:%d", step, e.Name(), st.Uid, st.Gid, st.Mode&0o777, err, uid, gid)
			}
		}
		if n < 2 {
			t.Errorf("after %s the backups hold %d files; want the entry's and the config's", step, n)
		}
	}
	im := importer{a: newAdmin(sock, 10*time.Second), backups: backups, rewrite: "http://localhost:8787"}
	mustImport(t, &im, config)
	check("the import")
	mustUndo(t, sock, backups)
	check("the undo")
}

// TestDefaultBackupsUnderSudo: sudo sets HOME to root's, so an import a
// user ran with sudo kept its backups in /root, where the user could not
// read them or undo without root. The default folder is now in the home
// of the user who ran sudo, and the import says so.
func TestDefaultBackupsUnderSudo(t *testing.T) {
	homes := map[string]string{"1000": "/home/alice"}
	homeOf := func(uid string) (string, error) {
		if h, ok := homes[uid]; ok {
			return h, nil
		}
		return "", fs.ErrNotExist
	}
	tests := []struct {
		name     string
		euid     int
		env      map[string]string
		dir, why string
	}{
		{"a user", 1000, map[string]string{"HOME": "/home/alice"}, "/home/alice/.local/state/toybox/import-backups", ""},
		{"xdg", 1000, map[string]string{"HOME": "/home/alice", "XDG_STATE_HOME": "/x"}, "/x/toybox/import-backups", ""},
		{"sudo", 0, map[string]string{"HOME": "/root", "SUDO_UID": "1000"}, "/home/alice/.local/state/toybox/import-backups", "uid 1000"},
		{"sudo, no such user", 0, map[string]string{"HOME": "/root", "SUDO_UID": "1001"}, "/root/.local/state/toybox/import-backups", ""},
		{"sudo by root", 0, map[string]string{"HOME": "/root", "SUDO_UID": "0"}, "/root/.local/state/toybox/import-backups", ""},
		{"root", 0, map[string]string{"HOME": "/root"}, "/root/.local/state/toybox/import-backups", ""},
		{"SUDO_UID not root", 1000, map[string]string{"HOME": "/home/bob", "SUDO_UID": "1000"}, "/home/bob/.local/state/toybox/import-backups", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, why := defaultBackups(func(k string) string { return tt.env[k] }, tt.euid, homeOf)
			if dir != tt.dir || (tt.why == "") != (why == "") || !strings.Contains(why, tt.why) || (why != "" && !strings.Contains(why, dir)) {
				t.Errorf("defaultBackups(%v, euid %d) = %q, %q; want %q and a reason naming %q", tt.env, tt.euid, dir, why, tt.dir, tt.why)
			}
		})
	}
}

// mustImport runs im on config and fails the test unless it succeeds.
func mustImport(t *testing.T, im *importer, config string) {
	t.Helper()
	if code, stderr := runCapturingStderr(t, func() int { return im.run(config) }); code != exitOK {
		t.Fatalf("import = %d (%s); want %d", code, stderr, exitOK)
	}
}

// mustUndo undoes every import whose backups are in backups, through the
// admin socket sock, and fails the test unless it succeeds.
func mustUndo(t *testing.T, sock, backups string) {
	t.Helper()
	if code, stderr := runCapturingStderr(t, func() int { return undoImport(newAdmin(sock, 10*time.Second), backups, nil) }); code != exitOK {
		t.Fatalf("undo = %d (%s); want %d", code, stderr, exitOK)
	}
}

// holdLock opens p and takes the lock a run writing it holds, as a run
// writing that copy at this moment does, until the test ends.
func holdLock(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
}

// TestImportRemovesBackupLeftovers: a run killed while it wrote a backup
// left its copy (.<backup>.toybox-<random>, the entry and its env values)
// in the backup folder, where nothing looked at it again. The next import
// removes it, saying so, and leaves every other file there as it is: the
// owner's own, and a copy another run is writing now (it holds its lock).
// A copy an older toybox left (.<backup>.<random>) goes too.
func TestImportRemovesBackupLeftovers(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, _ := notesConfig(t, dir, filepath.Join(src, "server.js"))
	f := &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")}
	sock := serveAdmin(t, dir, f)
	backups := filepath.Join(dir, "backups")

	// Killed as it writes the server's backup.
	left := killWhileWriting(t, importer{a: newAdmin(sock, 10*time.Second), backups: backups}, config, backups)
	if _, err := os.Lstat(left); err != nil {
		t.Fatalf("the copy a killed run leaves: %v", err)
	}
	old := filepath.Join(backups, ".20250101T000000.000000000Z-0001-notes.json.3141592653")
	inUse := filepath.Join(backups, ".20250101T000000.000000000Z-0002-notes.json.toybox-2718281828")
	theirs := []string{
		filepath.Join(backups, "notes.txt"),
		filepath.Join(backups, ".hidden"),
		filepath.Join(backups, ".notes.json.toybox-draft"),
		filepath.Join(backups, ".notes.json.bak"),
		inUse,
	}
	files := map[string]string{old: `{"env":"sk-old"}`}
	for _, p := range theirs {
		files[p] = "the owner's\n"
	}
	writeFiles(t, files)
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	holdLock(t, inUse)

	im := &importer{a: newAdmin(sock, 10*time.Second), backups: backups}
	code, stderr := runCapturingStderr(t, func() int { return im.run(config) })
	if code != exitOK {
		t.Fatalf("the next import = %d (%s); want %d", code, stderr, exitOK)
	}
	removedAndKept(t, stderr, []string{left, old}, theirs)
}

// TestImportRemovesOldConfigCopies: a copy of the config a killed run left
// beside it (.<file>.toybox-<random>, the env values in it) was removed
// only by a run that rewrote the config or undid an import. An import
// without --rewrite now removes it too. A copy another run is writing now
// (it holds its lock) stays, and so does every .<file>.<digits>: an older
// toybox named its copies so, but so may the owner name a copy of their
// own (a timestamp), and that is not toybox's to remove.
func TestImportRemovesOldConfigCopies(t *testing.T) {
	dir := t.TempDir()
	src := notesServer(t, dir)
	config, cfg := notesConfig(t, dir, filepath.Join(src, "server.js"))
	f := &fakeSupervisor{dataDir: filepath.Join(dir, "state", "data", "notes")}
	sock := serveAdmin(t, dir, f)
	base := filepath.Join(dir, ".claude_desktop_config.json")
	stale := []string{base + ".toybox-1414213562"}
	keep := []string{
		base + ".toybox-1732050807", // in use: its run holds the lock
		base + ".1618033988",        // an older toybox's, written just now
		base + ".bak",
		base + ".12ab",
		filepath.Join(dir, ".other.json.2718281828"),
		// An older toybox's name, an hour old, is also what the owner's
		// own timestamped copy looks like: not toybox's to remove.
		base + ".1733600000",
	}
	files := map[string]string{}
	for _, p := range append(slices.Clone(stale), keep...) {
		files[p] = string(cfg)
	}
	writeFiles(t, files)
	hourAgo := time.Now().Add(-time.Hour)
	for _, p := range append(slices.Clone(stale), keep[2:]...) {
		if err := os.Chtimes(p, hourAgo, hourAgo); err != nil {
			t.Fatal(err)
		}
	}
	holdLock(t, keep[0])

	im := &importer{a: newAdmin(sock, 10*time.Second), backups: filepath.Join(dir, "backups")}
	code, stderr := runCapturingStderr(t, func() int { return im.run(config) })
	if code != exitOK {
		t.Fatalf("import = %d (%s); want %d", code, stderr, exitOK)
	}
	removedAndKept(t, stderr, stale, keep)
}

// removedAndKept checks that an import removed each of gone, leftovers of
// killed runs, naming it in its stderr, and left each of kept.
func removedAndKept(t *testing.T, stderr string, gone, kept []string) {
	t.Helper()
	for _, p := range gone {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s, a copy a killed run left, is still there after the next import (%v)", filepath.Base(p), err)
		}
		if !strings.Contains(stderr, p) {
			t.Errorf("the next import does not name %s it removed: %s", p, stderr)
		}
	}
	for _, p := range kept {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s, not a leftover of toybox's or one in use, is gone after the import: %v", filepath.Base(p), err)
		}
	}
}

// killWhileWriting runs im on config until it has written a copy of a file
// into dir, and ends the run there as a kill would: its files closed, its
// goroutine ended, no cleanup of its own after it. It returns the copy's
// name.
func killWhileWriting(t *testing.T, im importer, config, dir string) string {
	t.Helper()
	var left string
	testHookWritten = func(f *os.File) {
		if filepath.Dir(f.Name()) == dir {
			left = f.Name()
			f.Close()
			runtime.Goexit()
		}
	}
	t.Cleanup(func() { testHookWritten = nil })
	done := make(chan struct{})
	go func() {
		defer close(done)
		im.run(config)
	}()
	<-done
	testHookWritten = nil
	if left == "" {
		t.Fatalf("the import wrote no copy of a file into %s", dir)
	}
	return left
}
