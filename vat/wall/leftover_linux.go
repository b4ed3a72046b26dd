//go:build linux

package wall

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"toybox/vat/wall/mountinfo"
)

// EndLeftovers kills every wall of stateDir that an earlier supervisor left
// running, and returns how many walls (mount namespaces) it ended. Call it
// before any wall of stateDir starts.
//
// A wall is meant to end with its supervisor (--die-with-parent), but that
// is racy (containers/bubblewrap#633): bubblewrap's sandbox process asks
// for SIGKILL on its parent's death only once the sandbox is set up, and a
// parent that is gone by then never sends it. A supervisor killed while a
// wall is being set up (SIGKILL, a crash, the OOM killer) leaves that wall
// running, reparented to init: its app keeps the data folder and the vat's
// uid, beside the copy the next supervisor starts. A wall of stateDir is a
// process in a mount namespace other than ours whose mount table binds an
// install folder of stateDir (<state>/code/<sha256>) at its own path, as
// every wall does, or a bubblewrap process that holds a descriptor of one
// (a sandbox process whose parent died before letting it go on waits for
// good). Processes
// EndLeftovers may not inspect (another user's, under a supervisor that is
// not root) are left alone.
func EndLeftovers(stateDir string) (int, error) {
	real, err := filepath.EvalSymlinks(stateDir)
	if err != nil {
		return 0, fmt.Errorf("ending leftover walls: %w", err)
	}
	ours, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return 0, fmt.Errorf("ending leftover walls: %w", err)
	}
	codeDir := filepath.Join(real, "code")
	ended := map[string]bool{}
	// A killed wall's pid 1 takes its PID namespace with it; the rounds
	// after the first catch a process that was still being set up, and
	// end when none is left (or after a second of a wall that will not
	// die).
	for range 100 {
		found, err := killLeftovers(codeDir, ours)
		if err != nil {
			return len(ended), err
		}
		if len(found) == 0 {
			return len(ended), nil
		}
		for ns := range found {
			ended[ns] = true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return len(ended), fmt.Errorf("ending leftover walls of %s: still running after a second", stateDir)
}

// killLeftovers sends SIGKILL to every live process whose mount namespace
// (not ours) binds an install folder in codeDir, and returns those
// namespaces.
func killLeftovers(codeDir, ours string) (map[string]bool, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("ending leftover walls: %w", err)
	}
	verdict := map[string]bool{} // mount namespace -> one of codeDir's walls
	found := map[string]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		// The pidfd pins the process: what is read below is its, and the
		// signal cannot reach another process given its pid since.
		pfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone, or not ours to open
		}
		ns, err := os.Readlink("/proc/" + e.Name() + "/ns/mnt")
		if err != nil || ns == ours {
			_ = unix.Close(pfd)
			continue
		}
		wall, seen := verdict[ns]
		if !seen {
			wall = bindsInstallFolder(e.Name(), codeDir)
			verdict[ns] = wall
		}
		if wall || isBwrap(e.Name()) && holdsInstallFolder(e.Name(), codeDir) {
			if err := unix.PidfdSendSignal(pfd, unix.SIGKILL, nil, 0); err == nil {
				found[ns] = true
			} else if !errors.Is(err, unix.ESRCH) {
				_ = unix.Close(pfd)
				return found, fmt.Errorf("ending a leftover wall (pid %d): %w", pid, os.NewSyscallError("pidfd_send_signal", err))
			}
		}
		_ = unix.Close(pfd)
	}
	return found, nil
}

var digestDir = regexp.MustCompile(`^[0-9a-f]{64}$`)

// bindsInstallFolder reports whether the mount table of process pid has a
// mount point <codeDir>/<sha256>: a wall's install folder, bound at its own
// path.
func bindsInstallFolder(pid, codeDir string) bool {
	f, err := os.Open("/proc/" + pid + "/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mount-point options ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := mountinfo.Unescape(fields[4])
		if filepath.Dir(mp) == codeDir && digestDir.MatchString(filepath.Base(mp)) {
			return true
		}
	}
	return false
}

// isBwrap reports whether process pid runs bubblewrap (its command name):
// only a sandbox process is ended for holding an install folder, never,
// say, an operator's program reading one from another mount namespace
// (the supervisor's own, under systemd).
func isBwrap(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/comm")
	return err == nil && strings.TrimSpace(string(b)) == "bwrap"
}

// holdsInstallFolder reports whether process pid holds a descriptor of an
// install folder in codeDir: bubblewrap's sandbox process before it has
// bound it. One whose parent died before letting it go on waits so for
// good.
func holdsInstallFolder(pid, codeDir string) bool {
	dir := "/proc/" + pid + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		p, err := os.Readlink(dir + "/" + e.Name())
		if err == nil && filepath.Dir(p) == codeDir && digestDir.MatchString(filepath.Base(p)) {
			return true
		}
	}
	return false
}
