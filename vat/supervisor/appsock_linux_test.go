package supervisor

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDialAppPaths: the folders up to the run folder are the supervisor's
// and may go through a symlink (a state dir the operator linked); the last
// name is the vat's and may not be one.
func TestDialAppPaths(t *testing.T) {
	real := filepath.Join(t.TempDir(), "state-real")
	run := filepath.Join(real, "run", "alice")
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(run, "app.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	linked := filepath.Join(t.TempDir(), "state")
	if err := os.Symlink(real, linked); err != nil {
		t.Fatal(err)
	}
	c, err := dialApp(context.Background(), filepath.Join(linked, "run", "alice", "app.sock"))
	if err != nil {
		t.Fatalf("through a symlinked state dir: %v", err)
	}
	_ = c.Close()
	// The vat's own name: a symlink, a folder, a file are refused.
	if err := os.Symlink(filepath.Join(run, "app.sock"), filepath.Join(run, "link.sock")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(run, "dir.sock"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"link.sock": "is a symlink", "dir.sock": "is a folder"} {
		_, err := dialApp(context.Background(), filepath.Join(linked, "run", "alice", name))
		if !errors.Is(err, ErrAppSocket) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want a refusal saying it %s", name, err, want)
		}
	}
}
