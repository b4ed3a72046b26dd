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
// good). A package install's prepare wall binds a folder of its own below
// <state>/prepare/<vat>-*/ instead, and is ended the same way. Processes
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
	ws := wallFolders{code: filepath.Join(real, "code"), prepare: filepath.Join(real, "prepare")}
	ended := map[string]bool{}
	// A killed wall's pid 1 takes its PID namespace with it; the rounds
	// after the first catch a process that was still being set up, and
	// end when none is left (or after a second of a wall that will not
	// die).
	for range 100 {
		found, err := killLeftovers(ws, ours)
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

// wallFolders are the folders of a state dir that only its walls bind.
type wallFolders struct {
	code    string // the code store: <code>/<sha256>, a vat's install folder
	prepare string // <prepare>/<vat>-*/<folder>, a prepare wall's
}

// has reports whether p is a folder only a wall of ws binds: an install
// folder, or a prepare wall's code, data or run folder.
func (ws wallFolders) has(p string) bool {
	return filepath.Dir(p) == ws.code && digestDir.MatchString(filepath.Base(p)) ||
		filepath.Dir(filepath.Dir(p)) == ws.prepare
}

// killLeftovers sends SIGKILL to every live process whose mount namespace
// (not ours) binds a folder of ws, and returns those namespaces.
func killLeftovers(ws wallFolders, ours string) (map[string]bool, error) {
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
			wall = bindsWallFolder(e.Name(), ws)
			verdict[ns] = wall
		}
		if wall || isBwrap(e.Name()) && holdsWallFolder(e.Name(), ws) {
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

// bindsWallFolder reports whether the mount table of process pid has a
// folder of ws as a mount point: a wall's install folder (or a prepare
// wall's folder), bound at its own path.
func bindsWallFolder(pid string, ws wallFolders) bool {
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
		if ws.has(mountinfo.Unescape(fields[4])) {
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

// holdsWallFolder reports whether process pid holds a descriptor of a
// folder of ws: bubblewrap's sandbox process before it has bound it. One
// whose parent died before letting it go on waits so for good.
func holdsWallFolder(pid string, ws wallFolders) bool {
	dir := "/proc/" + pid + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		p, err := os.Readlink(dir + "/" + e.Name())
		if err == nil && ws.has(p) {
			return true
		}
	}
	return false
}
