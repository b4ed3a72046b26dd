package store

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLockIsOneSupervisorsAtATime: a second supervisor on a state dir
// in use is refused, naming who holds it; once the first lets go, the
// state dir can be taken again.
func TestLockIsOneSupervisorsAtATime(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	first, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), LockName) {
		t.Fatalf("a second Lock = %v; want ErrLocked naming this process and the lock file", err)
	}
	// A lock file left by an earlier run (a supervisor that was killed)
	// does not count: only a held lock does.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Lock(dir)
	if err != nil {
		t.Fatalf("Lock after the first let go = %v", err)
	}
	_ = again.Close()
}
