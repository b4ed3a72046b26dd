package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockName is the file in a state dir that the supervisor serving it
// holds locked (flock) for as long as it runs.
const LockName = "serve.lock"

// ErrLocked is wrapped by Lock's error when another process holds the
// state dir.
var ErrLocked = errors.New("the state dir is in use")

// Lock takes the state dir for one supervisor, creating the dir (0700,
// as Open does) if it is missing, and returns the lock, held until it is
// closed or the process ends. Call it before anything else reads or
// writes the state dir: a second supervisor on the same dir would tidy
// away the first one's uploads, start every vat a second time beside the
// first's, and end the first one's walls as leftovers. If another process
// holds it, the error (wrapping ErrLocked) names the dir and the pid that
// holds it.
func Lock(stateDir string) (*os.File, error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("creating state dir: %w", err)
	}
	p := filepath.Join(abs, LockName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the state dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(p)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = "process " + strconv.Itoa(pid)
			}
			return nil, fmt.Errorf("%w: %s holds %s (another toybox serve on the same --state; two would run every vat twice)", ErrLocked, holder, p)
		}
		return nil, fmt.Errorf("locking the state dir: %w", os.NewSyscallError("flock", err))
	}
	// Who holds it, for the next one's error; the lock is what counts.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
