package wall

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"toybox/vat/procstatus"
	"toybox/vat/wall/entry"
)

// Process is a running wall. Its methods are safe for concurrent use.
type Process struct {
	id     string
	tier   string
	cmd    *exec.Cmd
	child  int // the wall's pid 1 on the host (toybox-entry, or the app)
	logger *slog.Logger

	done   chan struct{}
	err    error
	status *os.File    // bwrap's JSON status pipe (read end)
	head   *headWriter // the start of bwrap's stderr
	plan   *Plan
	views  *viewHold    // the /etc view it binds, released when it ends
	grp    *groupMaking // its cgroup (nil: none), removed when it ends
	// ran is the entry's answer that it ran (entryRan), read and closed
	// when the wall ends.
	ran *entryRan
	// statusRead is closed once the child pid has been read (or could not
	// be): reap closes status only then, so an app that exits at once
	// cannot have its pid's record closed under the reader.
	statusRead chan struct{}
}

// Pid is bwrap's pid on the host.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Tier is TierWalled or TierWalledNoSeccomp.
func (p *Process) Tier() string { return p.tier }

// Egress reports whether the wall's programs get out through transparent
// egress; when not, why is why the proxy alone serves it ("" for a wall
// with no way out).
func (p *Process) Egress() (transparent bool, why string) {
	return p.plan.Transparent, p.plan.ProxyOnly
}

// Wait waits for the wall to end and returns the app's exit: nil, an
// *exec.ExitError carrying the app's status (bwrap exits with it), or an
// error saying what failed. A wall the kernel killed for going past its
// memory limit returns an error wrapping ErrOutOfMemory.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// forwards reports whether the wall's pid 1, toybox-entry, forwards a
// SIGTERM to the app (entry.Forwarding); false when that cannot be read.
func (p *Process) forwards() bool {
	st, err := procstatus.Read(p.child)
	if err != nil {
		return false
	}
	mask, err := strconv.ParseUint(st["SigIgn"], 16, 64)
	return err == nil && entry.Forwarding(mask)
}

// ask sends the wall one stop request and reports whether it did. The
// wall's pid 1 is toybox-entry, which forwards a SIGTERM to the app's
// process group once it catches it. Before that a SIGTERM ends the entry
// (Go's default, exit status 2), and the wall with it, the app never
// hearing it: then ask sends nothing.
func (p *Process) ask() bool {
	if p.child <= 0 {
		_ = p.cmd.Process.Signal(unix.SIGTERM)
		return true
	}
	if !p.forwards() {
		return false
	}
	_ = unix.Kill(p.child, unix.SIGTERM)
	return true
}

// Stop asks the app to end (SIGTERM, forwarded by toybox-entry), and after
// grace kills the whole wall. It waits for the wall to end and returns Wait's
// error.
//
// It asks once: a second SIGTERM can mean "hurry" to an app (the entry
// forwards every one). A wall just started may not forward one yet; Stop
// looks again every 10 ms until it does or grace ends.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	asked := p.ask()
	t := time.NewTimer(grace)
	defer t.Stop()
	again := time.NewTicker(10 * time.Millisecond)
	defer again.Stop()
	for {
		select {
		case <-p.done:
			return p.err
		case <-again.C:
			if !asked {
				asked = p.ask()
			}
			continue
		case <-t.C:
		}
		break
	}
	if p.child > 0 {
		// pid 1 of the wall: the kernel kills everything inside with it.
		_ = unix.Kill(p.child, unix.SIGKILL)
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return p.err
}

func (p *Process) reap() {
	err := p.cmd.Wait()
	if p.status != nil {
		<-p.statusRead // EOF at the latest: bwrap's write end is gone
		_ = p.status.Close()
	}
	// An entry that answered ran: bubblewrap built the wall, and a
	// "bwrap: " line is the app's own. Believed, it made the vat "off: it
	// could not run inside its wall", whose Fix-it card offers to run it
	// without the wall: an app could ask for its own escape.
	entryRan := p.ran.answered()
	p.ran.close()
	if err != nil && p.head != nil && p.plan != nil && !entryRan {
		// bubblewrap's own lines only ("bwrap: ..." at a line's start):
		// the app shares this stderr, and what it merely quotes must not
		// draw the hint. Either line means the wall was never built, and
		// the error is ErrBwrap: starting it again fails the same way.
		// The error carries the line as bwrapLine rebuilds it, never as
		// written: an app's bytes would reach the operator's screens.
		for _, line := range strings.Split(p.head.String(), "\n") {
			if l, ok := bwrapLine(line, bwrapUnreachable); ok {
				err = fmt.Errorf("%w: %w: %s%s", ErrBwrap, err, l, unreachableHint(p.plan))
				break
			}
			if l, ok := bwrapLine(line, bwrapExecvp); ok {
				err = fmt.Errorf("%w: %w: %s%s", ErrBwrap, err, l, entryExecHint(p.plan))
				break
			}
		}
	}
	if g := p.group(); g != nil {
		// Read before the group goes: its counters go with it.
		if err != nil && g.OOMKills() > 0 {
			err = fmt.Errorf("%w (%d MiB): %w", ErrOutOfMemory, g.Limits().MemoryBytes>>20, err)
		}
		if rerr := g.Remove(); rerr != nil {
			p.logger.Warn("removing the wall's cgroup", keyVat, p.id, keyReason, rerr.Error())
		}
	}
	// The wall's mounts are gone with its processes.
	if rerr := p.views.release(); rerr != nil {
		p.logger.Warn("clearing old /etc views", keyVat, p.id, keyReason, rerr.Error())
	}
	p.err = err
	p.logger.Info("wall ended", keyVat, p.id, keyPid, p.cmd.Process.Pid, keyReason, fmt.Sprint(err))
	close(p.done)
}

// unreachableHint names, for a wall whose bubblewrap was refused a bind
// source ("Can't find source path /proc/self/fd/N: Permission denied": it
// reopens each source as the wall's uid), the folders on the way to a
// source that uid cannot search by their mode bits. It only explains a
// failure: an ACL may grant what the bits do not.
func unreachableHint(plan *Plan) string {
	if plan.HostUID < 0 {
		return ""
	}
	var hints []string
	seen := map[string]bool{}
	for _, op := range plan.Ops {
		if op.Kind != OpBindFD && op.Kind != OpROBindFD {
			continue
		}
		for dir := filepath.Dir(op.Src); ; dir = filepath.Dir(dir) {
			if fi, err := os.Stat(dir); err == nil && classPerm(fi, plan.HostUID, plan.HostGID, plan.CodeGroup)&0o001 == 0 && !seen[dir] {
				seen[dir] = true
				hints = append(hints, fmt.Sprintf("%s (mode %v, on the way to %s)", dir, fi.Mode().Perm(), op.Src))
			}
			if dir == "/" {
				break
			}
		}
	}
	if len(hints) == 0 {
		return ""
	}
	return fmt.Sprintf(" (the wall runs as uid %d, which cannot search %s; fix: chmod o+x, or move the files)", plan.HostUID, strings.Join(hints, ", "))
}

// The two lines of bubblewrap's that end a wall before it was built,
// up to their descriptor's number: a bind source it could not reach, and
// toybox-entry it could not run. Both name the file by its descriptor.
const (
	bwrapUnreachable = "bwrap: Can't find source path /proc/self/fd/"
	bwrapExecvp      = "bwrap: execvp /proc/self/fd/"
)

// bwrapLine reports whether line is bubblewrap's line of the form prefix
// (bwrapUnreachable or bwrapExecvp), then a descriptor's number, then ": "
// and an errno's text (strerror), and returns it rebuilt from those parts.
// The app shares bubblewrap's stderr and may print such a line itself, so
// nothing else of it is kept: no byte of an app's reaches the error. An
// unreachable bind source counts only with "Permission denied".
func bwrapLine(line, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
	if !ok {
		return "", false
	}
	num, why, _ := strings.Cut(rest, ": ")
	fd, err := strconv.Atoi(num)
	if err != nil || fd < 0 || strconv.Itoa(fd) != num {
		return "", false
	}
	errno := ""
	for e := unix.Errno(1); e < 256 && why != ""; e++ {
		if t := e.Error(); strings.EqualFold(t, why) { // Go spells strerror's text in lower case
			errno = strings.ToUpper(t[:1]) + t[1:]
			break
		}
	}
	switch {
	case prefix == bwrapUnreachable && errno != "Permission denied":
		return "", false
	case errno == "":
		return prefix + num, true
	}
	return prefix + num + ": " + errno, true
}

// entryExecHint names, for a wall whose bubblewrap could not run
// toybox-entry ("execvp /proc/self/fd/N: Permission denied": it runs the
// entry from its descriptor), the entry's file and what keeps the wall's
// uid from running it (EntryUnrunnable).
func entryExecHint(plan *Plan) string {
	for _, op := range plan.Ops {
		if op.Kind != OpExecFD {
			continue
		}
		uid, gid := plan.HostUID, plan.HostGID
		if uid < 0 {
			uid, gid = os.Getuid(), os.Getgid()
		}
		check := op.Src
		if op.held != nil {
			// The file the wall ran, which may no longer be at Src.
			check = "/proc/self/fd/" + strconv.Itoa(int(op.held.f.Fd()))
		}
		if why := EntryUnrunnable(check, uid, gid, plan.CodeGroup); len(why) > 0 {
			return fmt.Sprintf(" (toybox-entry, %s: %s)", op.Src, strings.Join(why, "; "))
		}
		return fmt.Sprintf(" (toybox-entry, %s)", op.Src)
	}
	return ""
}

// EntryUnrunnable says what keeps a wall running as uid and gid (and
// the supplementary group extra, if > 0) from running the toybox-entry at
// path, each with its fix: its mode bits, or a file system mounted
// noexec. Nothing when neither does (an ACL or a security module may still
// refuse).
func EntryUnrunnable(path string, uid, gid, extra int) []string {
	var why []string
	if fi, err := os.Stat(path); err == nil && classPerm(fi, uid, gid, extra)&0o001 == 0 {
		// a+x: the class that counts may be the owner's or the group's
		// (o+x alone leaves an owner's 0644 unrunnable by its owner).
		why = append(why, fmt.Sprintf("its mode %v does not let uid %d execute it (fix: chmod a+x)", fi.Mode().Perm(), uid))
	}
	var st unix.Statfs_t
	if unix.Statfs(path, &st) == nil && st.Flags&unix.ST_NOEXEC != 0 {
		why = append(why, "it lies on a file system mounted noexec (fix: install it elsewhere)")
	}
	return why
}

// headWriter forwards to w (if any) and keeps the first max bytes, for an
// error message when bwrap fails.
type headWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	max int
}

func (h *headWriter) Write(b []byte) (int, error) {
	h.mu.Lock()
	if room := h.max - len(h.buf); room > 0 {
		h.buf = append(h.buf, b[:min(room, len(b))]...)
	}
	h.mu.Unlock()
	if h.w != nil {
		_, _ = h.w.Write(b)
	}
	return len(b), nil
}

func (h *headWriter) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.buf)
}
