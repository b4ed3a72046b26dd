package unixsock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	l, err := Listen(path, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o660 {
		t.Errorf("mode = %o; want 660", got)
	}
	// A live socket is never replaced.
	if _, err := Listen(path, 0o600); err == nil || !strings.Contains(err.Error(), "live socket") {
		t.Errorf("Listen on a live socket = %v; want a refusal naming it live", err)
	}
	// A stale one is.
	_ = l.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("closing the listener removed its path: %v", err)
	}
	l, err = Listen(path, 0o600)
	if err != nil {
		t.Fatalf("Listen over a stale socket = %v; want it replaced", err)
	}
	_ = l.Close()
	// Anything else is an error, and stays.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file, 0o600); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a file = %v; want a refusal", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Errorf("the file now holds %q; want it untouched", b)
	}
}

// TestListenNeverWider: under a umask of 0 the socket still has mode, and
// the process's umask is put back.
func TestListenNeverWider(t *testing.T) {
	old := unix.Umask(0)
	defer unix.Umask(old)
	path := filepath.Join(t.TempDir(), "s.sock")
	var st unix.Stat_t
	l, err := Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if got := st.Mode & 0o777; got != 0o600 {
		t.Errorf("mode = %o; want 600", got)
	}
	if got := unix.Umask(old); got != 0 {
		t.Errorf("Listen left the umask at %o; want it restored to 0", got)
	}
	unix.Umask(0)
}
