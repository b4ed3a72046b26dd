package packages

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPrepareNPMReadsLockBounded: npm's package-lock.json is written
// inside the prepare wall, from the registry's answers. The supervisor
// read it with os.ReadFile: a lock of any size was read whole into its
// memory (twice), a fifo in its place blocked the install for good, and a
// link was followed to whatever host file it named. It is now read as
// uv's requirements.txt is: a file of the prepare folder, at most
// maxNPMLock bytes.
func TestPrepareNPMReadsLockBounded(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, []byte(`{"lockfileVersion":3,"packages":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		make func(p string) error // what the resolve step leaves at p
		want error
		text string
	}{
		{name: "a lock past the limit", want: ErrBadLock, text: "larger than", make: func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteString(`{"lockfileVersion":3,"packages":{}}`); err != nil {
				return err
			}
			// Sparse: the JSON's trailing whitespace, past the limit.
			return f.Truncate(maxNPMLock + 1)
		}},
		{name: "a fifo", want: ErrTreeReplaced, make: func(p string) error { return unix.Mkfifo(p, 0o644) }},
		{name: "a link to a host file", want: ErrTreeReplaced, make: func(p string) error { return os.Symlink(host, p) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work := t.TempDir()
			lockFile := filepath.Join(work, "project", "package-lock.json")
			run := func(_ context.Context, step string, _ []string, _ map[string]string) error {
				if step != "resolve" {
					return errors.New("only the resolve step runs here")
				}
				return tt.make(lockFile)
			}
			sp, err := ParsePackage("npm:tb-mcp-hello@1.0.0")
			if err != nil {
				t.Fatal(err)
			}
			cfg := NPMConfig{Registry: "http://127.0.0.1:1/", Node: "/usr/bin/node", NodeVersion: "22.0.0", NPM: "/usr/lib/npm/bin/npm-cli.js", Script: "/nonexistent/fetch.js"}
			done := make(chan error, 1)
			go func() {
				_, _, err := PrepareNPM(context.Background(), cfg, run, work, Request{Spec: sp, MCP: json.RawMessage(`{"transport":"stdio"}`)})
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
					t.Errorf("PrepareNPM = %v; want %v (%q)", err, tt.want, tt.text)
				}
			case <-time.After(10 * time.Second):
				// Let the blocked read end: a writer opens and closes.
				if w, err := os.OpenFile(lockFile, os.O_WRONLY, 0); err == nil {
					w.Close()
				}
				t.Fatalf("PrepareNPM still reading %s after 10s", lockFile)
			}
		})
	}
}
