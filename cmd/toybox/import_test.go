package main

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
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
		_, _ = w.Write([]byte(`{}`))
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
			for p, b := range files {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
				"notes": map[string]any{"command": "/usr/bin/node", "args": []string{filepath.Join(src, "server.js"), filepath.Join(src, "notes.json")}},
			}})
			config := filepath.Join(dir, "claude_desktop_config.json")
			if err := os.WriteFile(config, cfg, 0o644); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(dir, "admin.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			f := &fakeSupervisor{dataDir: data}
			srv := &http.Server{Handler: f}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()

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
