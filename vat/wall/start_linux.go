package wall

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"toybox/vat/wall/seccomp"
)

// Log attribute keys.
const (
	keyVat    = "vat"
	keyTier   = "tier"
	keyPid    = "pid"
	keyReason = "reason"
	keyMillis = "ms"
)

// startTimeout bounds how long bwrap may take to set the sandbox up.
const startTimeout = 20 * time.Second

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

// catches reports whether the wall's pid 1 has a handler for sig (its
// SigCgt in /proc); false when that cannot be read.
func (p *Process) catches(sig unix.Signal) bool {
	if p.child <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.child) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// Stop asks the app to end (SIGTERM, forwarded by toybox-entry), and after
// grace kills the whole wall. It waits for the wall to end and returns Wait's
// error.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	term := func() {
		// The wall's pid 1: toybox-entry, which forwards it to the app's
		// process group. Until its handler is there, a pid 1 drops it;
		// the kill after grace still ends it.
		if p.child > 0 {
			_ = unix.Kill(p.child, unix.SIGTERM)
		} else {
			_ = p.cmd.Process.Signal(unix.SIGTERM)
		}
	}
	// A wall that was just started may not have its handler yet (pid 1
	// drops unhandled signals): the request is repeated until one was
	// sent while the wall's pid 1 caught it. Not after: a second one can
	// mean "hurry" to an app (the entry forwards every one).
	heard := p.catches(unix.SIGTERM)
	term()
	t := time.NewTimer(grace)
	defer t.Stop()
	resend := time.NewTicker(200 * time.Millisecond)
	defer resend.Stop()
	for n := 0; ; n++ {
		select {
		case <-p.done:
			return p.err
		case <-resend.C:
			if n < 5 && !heard {
				heard = p.catches(unix.SIGTERM)
				term()
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
	if err != nil && p.head != nil && p.plan != nil {
		// bubblewrap's own lines only ("bwrap: ..." at a line's start):
		// the app shares this stderr, and what it merely quotes must not
		// draw the hint. Either line means the wall was never built, and
		// the error is ErrBwrap: starting it again fails the same way (an
		// app that prints such a line itself only turns itself off).
		for _, line := range strings.Split(p.head.String(), "\n") {
			if strings.HasPrefix(line, "bwrap: ") && strings.Contains(line, "Can't find source path") && strings.Contains(line, "Permission denied") {
				err = fmt.Errorf("%w: %w: %s%s", ErrBwrap, err, strings.TrimSpace(line), unreachableHint(p.plan))
				break
			}
			if strings.HasPrefix(line, "bwrap: execvp /proc/self/fd/") {
				err = fmt.Errorf("%w: %w: %s%s", ErrBwrap, err, strings.TrimSpace(line), entryExecHint(p.plan))
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

// fdTable numbers the descriptors bwrap inherits. It is the only place that
// knows that ExtraFiles[i] is fd 3+i.
type fdTable struct {
	files []*os.File
	gate  *seccompGate // the seccomp program's pipe, filled once the door is open
}

// pass hands f to bwrap and returns "flag N" for its number there. The table
// owns f from now on.
func (t *fdTable) pass(f *os.File, flag string) []string {
	return []string{flag, strconv.Itoa(t.hold(f))}
}

// hold hands f to bwrap with no option naming it and returns its number
// there. The table owns f from now on.
func (t *fdTable) hold(f *os.File) int {
	t.files = append(t.files, f)
	return 3 + len(t.files) - 1
}

func (t *fdTable) closeAll() {
	for _, f := range t.files {
		_ = f.Close()
	}
	t.files = nil
}

// cleanup runs registered releases in reverse unless released.
type cleanup struct{ fns []func() }

func (c *cleanup) add(f func()) { c.fns = append(c.fns, f) }

func (c *cleanup) run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
	c.fns = nil
}

// Start builds the plan, opens every bind by fd, compiles the seccomp filter
// and launches bwrap. It takes ownership of spec.EntryCap and spec.AppCap
// (closing its copies on return, success or not). On any error nothing is
// left running and the error says what failed.
func Start(ctx context.Context, spec Spec, logger *slog.Logger) (*Process, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var cl cleanup
	defer cl.run()
	for _, f := range []*os.File{spec.EntryCap, spec.AppCap} {
		if f != nil {
			cl.add(func() { _ = f.Close() })
		}
	}
	began := time.Now()
	p, err := start(ctx, spec, logger, &cl)
	if err != nil {
		logger.Error("wall refused", keyVat, spec.ID, keyReason, err.Error())
		return nil, err
	}
	logger.Info("wall started", keyVat, spec.ID, keyTier, p.tier, keyPid, p.Pid(), keyMillis, time.Since(began).Milliseconds())
	return p, nil
}

func start(ctx context.Context, spec Spec, logger *slog.Logger, cl *cleanup) (*Process, error) {
	if spec.AppCap == nil {
		return nil, fmt.Errorf("starting the wall for %q: %w: no app capability", spec.ID, ErrSpec)
	}
	if !spec.Net.None && spec.EntryCap == nil {
		return nil, fmt.Errorf("starting the wall for %q: %w: a network shape but no entry capability", spec.ID, ErrSpec)
	}
	bwrap, err := lookBwrap(spec.Bwrap)
	if err != nil {
		return nil, fmt.Errorf("starting the wall for %q: %w: %w", spec.ID, ErrBwrap, err)
	}
	plan, err := BuildPlan(spec)
	if err != nil {
		return nil, err
	}
	if err := ensureEtcView(plan); err != nil {
		return nil, fmt.Errorf("starting the wall for %q: %w", spec.ID, err)
	}
	if plan.HostUID >= 0 {
		if err := own(spec, plan); err != nil {
			return nil, fmt.Errorf("starting the wall for %q: %w", spec.ID, err)
		}
	}
	// The wall's cgroup, made (with its limits) while bubblewrap starts:
	// at the door its first process moves in. Where the host gives none,
	// the wall has none (its status says so); where it does, a group that
	// cannot be made leaves the vat off.
	lim := spec.Limits
	if lim.Tasks == 0 {
		lim.Tasks = plan.MaxTasks
	}
	grp := makeGroup(spec.Cgroups, spec.ID, lim)
	cl.add(grp.remove)
	var fds fdTable
	cl.add(fds.closeAll)
	cl.add(func() { fds.gate.close() })
	views := &viewHold{}
	cl.add(func() { _ = views.release() }) // a start that fails binds nothing
	opts, command, err := plan.render(&fds, spec, views)
	if err != nil {
		return nil, fmt.Errorf("starting the wall for %q: %w", spec.ID, err)
	}
	// The status pipe: bwrap writes the sandbox's pid once it is set up, so
	// a sandbox that cannot start is an error here, not a silent exit later.
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting the wall for %q: status pipe: %w", spec.ID, err)
	}
	cl.add(func() { _ = statusR.Close() })
	opts = append(fds.pass(statusW, "--json-status-fd"), opts...)
	// The door: the sandbox's first process waits on it (--block-fd, once
	// its namespaces and mounts are made, before anything of the vat's
	// runs) until its limits are set (limit). bubblewrap goes on at EOF as
	// at a byte, and that process asks for its parent's death only after
	// the door. A supervisor that dies before opening it (bwrap dies with
	// it, the sandbox does not) closes the door's only write end, and the
	// sandbox goes on to read its seccomp program, which the supervisor
	// writes only once the door is open (seccompGate): empty, the kernel
	// refuses it and bubblewrap ends before anything of the vat runs. So a
	// sandbox whose supervisor died during its setup ends on its own; it
	// never runs the vat with no limit, nor waits for the next supervisor.
	// bubblewrap closes the door once through; nothing of it reaches the
	// vat.
	door, err := newDoor()
	if err != nil {
		return nil, fmt.Errorf("starting the wall for %q: %w", spec.ID, err)
	}
	doorW := door.w
	defer doorW.Close()
	opts = append(fds.pass(door.r, "--block-fd"), opts...)
	// bwrap's options go through a descriptor (--args), not its argv:
	// /proc/<pid>/cmdline is readable by every user of the host, and the
	// options carry the owner's environment values (--setenv).
	argsFile, err := argsFile(opts)
	if err != nil {
		return nil, fmt.Errorf("starting the wall for %q: %w", spec.ID, err)
	}
	args := append(fds.pass(argsFile, "--args"), "--")
	args = append(args, command...)

	cmd := exec.Command(bwrap, args...)
	cmd.Args[0] = "bwrap"
	cmd.Env = []string{} // bwrap itself gets nothing of the supervisor's environment
	cmd.Dir = "/"
	cmd.ExtraFiles = fds.files
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	head := &headWriter{max: 4096}
	if spec.Stderr != nil {
		head.w = spec.Stderr
	}
	cmd.Stderr = head
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if plan.HostUID >= 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(plan.HostUID), Gid: uint32(plan.HostGID), Groups: []uint32{}}
		if spec.CodeGroup > 0 {
			cmd.SysProcAttr.Credential.Groups = []uint32{uint32(spec.CodeGroup)}
		}
	}
	// Nothing of the supervisor's may reach the wall but what fds hands
	// over: mark every descriptor close-on-exec (ExtraFiles are dup2'ed
	// into the child regardless). Go opens its own that way already; this
	// catches one left inheritable by accident.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, fmt.Errorf("starting the wall for %q: marking descriptors close-on-exec: %w", spec.ID, os.NewSyscallError("close_range", err))
	}
	// Pdeathsig follows the thread that forked; keep it for the fork.
	runtime.LockOSThread()
	err = cmd.Start()
	runtime.UnlockOSThread()
	// The child's copies are bwrap's now; ours go, so EOF means "bwrap gone".
	fds.closeAll()
	if err != nil {
		forgetBwrap() // moved or removed: the next start looks again
		return nil, fmt.Errorf("starting the wall for %q: %w: %w", spec.ID, ErrBwrap, err)
	}
	p := &Process{id: spec.ID, tier: plan.Tier, cmd: cmd, logger: logger, done: make(chan struct{}), status: statusR, statusRead: make(chan struct{}), head: head, plan: plan, views: views, grp: grp}
	go p.reap()
	// Before the door the sandbox's first process is still in bwrap's
	// process group (it makes its own session only after): ending the
	// group ends it too. Ending bwrap alone left it waiting at the door
	// (or for bwrap's go-ahead) and holding bwrap's stderr, so the wait
	// below never ended.
	kill := func() { _ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL); _ = cmd.Process.Kill(); <-p.done }

	child, err := readChildPid(ctx, statusR, p.statusRead)
	if err != nil {
		kill()
		msg := strings.TrimSpace(head.String())
		if msg == "" {
			msg = fmt.Sprint(p.err)
		}
		err = fmt.Errorf("starting the wall for %q: %w: %s (%w)", spec.ID, ErrBwrap, msg, err)
		// When no sandbox can start here at all (the preflight's minimal
		// one fails too), the vat's reason carries the preflight's cause
		// and fix; otherwise the failure is this wall's own.
		if ctx.Err() == nil {
			if perr := Probe(ctx, spec.Bwrap); perr != nil {
				err = fmt.Errorf("%w; %w", err, perr)
			}
		}
		return nil, err
	}
	p.child = child
	// A sandbox already gone (a bind bubblewrap could not make) runs
	// nothing: the wall ends with bubblewrap's own reason, as without a
	// door.
	err = limit(child, plan, grp, doorW)
	if err == nil {
		err = fds.gate.open()
	}
	if err != nil && !sandboxGone(err) {
		// The sandbox's process is not bwrap's to end yet (it asks for
		// its parent's death after the door): end it first.
		_ = unix.Kill(child, unix.SIGKILL)
		kill()
		return nil, fmt.Errorf("starting the wall for %q: %w", spec.ID, err)
	}
	cl.fns = nil // success: the wall owns what it was handed; close our copies below
	for _, f := range []*os.File{spec.EntryCap, spec.AppCap} {
		if f != nil {
			_ = f.Close()
		}
	}
	return p, nil
}

// door is the pipe a sandbox waits at: r is bwrap's --block-fd, w the
// supervisor's, its only write end (EOF at r means the supervisor is gone).
type door struct{ r, w *os.File }

func newDoor() (door, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return door{}, fmt.Errorf("door pipe: %w", err)
	}
	return door{r: r, w: w}, nil
}

// sandboxGone reports whether limit failed only because the sandbox was
// gone: its process (ESRCH), or it and bubblewrap both, the door's only
// readers, once its limit was set (EPIPE).
func sandboxGone(err error) bool {
	return errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EPIPE)
}

// limit sets the wall's limits on its first process (child, bwrap's
// sandbox process, still waiting at the door), then opens the door.
//
// The process moves into the wall's cgroup (grp's, if any), so that
// everything of the vat's is made in it, and its oom_score_adj goes to
// OOMScoreAdj, which everything it starts inherits: when the host runs out
// of memory, the kernel kills a vat before the supervisor.
//
// RLIMIT_NPROC bounds the tasks of the wall: the kernel counts them per user
// namespace and uid (since Linux 5.14), and everything in the wall is one
// uid in the wall's own namespace, so the limit counts the wall's tasks
// alone (they are also charged to the uid that made the namespace, up to
// its own limit: docs/walls.md); soft and hard, so the app cannot raise it. Set on bwrap before it made the
// namespace, the limit would count the supervisor's uid across every wall
// (when not root), and before the app forks is the only time it binds them
// all: hence the door.
func limit(child int, plan *Plan, grp *groupMaking, door *os.File) error {
	g, err := grp.wait()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLimits, err)
	}
	if g != nil {
		if err := g.Add(child); err != nil {
			return fmt.Errorf("%w: %w", ErrLimits, err)
		}
	}
	if err := os.WriteFile("/proc/"+strconv.Itoa(child)+"/oom_score_adj", []byte(strconv.Itoa(OOMScoreAdj)), 0); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = unix.ESRCH // its /proc folder: the sandbox is gone
		}
		return fmt.Errorf("setting the wall's oom_score_adj (%d): %w", OOMScoreAdj, err)
	}
	n := uint64(plan.MaxTasks)
	if err := prlimitAs(child, plan.HostUID, plan.HostGID, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
		return fmt.Errorf("setting the wall's task limit (%d): %w", n, err)
	}
	if _, err := door.Write([]byte{0}); err != nil {
		return fmt.Errorf("opening the wall's door: %w", err)
	}
	return nil
}

// prlimitAs sets resource res of process pid. The kernel lets a process
// whose real ids are the target's set its limits without CAP_SYS_RESOURCE.
// A supervisor that is not root is the wall's uid already (uid < 0). A root
// one runs the wall as the vat's own uid and may lack CAP_SYS_RESOURCE (a
// container's root, this project's CI): it asks from one thread whose real
// ids are the wall's for the call, and back to its own after. That thread
// must not end: a wall's bwrap dies with the thread that forked it
// (Pdeathsig), which may be this one; so one whose ids cannot be put back
// is parked for good instead, never to run other code.
func prlimitAs(pid, uid, gid, res int, rl *unix.Rlimit) error {
	if uid < 0 {
		return os.NewSyscallError("prlimit", unix.Prlimit(pid, res, rl, nil))
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ruid, rgid := unix.Getuid(), unix.Getgid()
		err := threadIDs(uid, gid)
		if err == nil {
			err = os.NewSyscallError("prlimit", unix.Prlimit(pid, res, rl, nil))
		}
		if back := threadIDs(ruid, rgid); back != nil {
			done <- errors.Join(err, fmt.Errorf("taking back the thread's ids: %w", back))
			select {}
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

// threadIDs sets the real uid and gid of the calling thread alone (the
// effective and saved ones stay).
func threadIDs(uid, gid int) error {
	keep := ^uintptr(0) // -1: leave that id as it is
	if _, _, e := unix.RawSyscall(sysSetresgid, uintptr(gid), keep, keep); e != 0 {
		return os.NewSyscallError("setresgid", e)
	}
	if _, _, e := unix.RawSyscall(sysSetresuid, uintptr(uid), keep, keep); e != 0 {
		return os.NewSyscallError("setresuid", e)
	}
	return nil
}

// readChildPid reads bwrap's first JSON status ({"child-pid": N}). It
// closes read when its reader is done with r.
func readChildPid(ctx context.Context, r *os.File, read chan<- struct{}) (int, error) {
	type result struct {
		pid int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer close(read)
		var st struct {
			ChildPid int `json:"child-pid"`
		}
		dec := json.NewDecoder(bufio.NewReader(r))
		if err := dec.Decode(&st); err != nil {
			ch <- result{err: fmt.Errorf("reading bwrap's status: %w", err)}
			return
		}
		if st.ChildPid <= 0 {
			ch <- result{err: errors.New("bwrap's status names no child pid")}
			return
		}
		ch <- result{pid: st.ChildPid}
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case res := <-ch:
		return res.pid, res.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-t.C:
		return 0, fmt.Errorf("bwrap did not set the sandbox up within %v", startTimeout)
	}
}

// own makes the vat's own folders belong to the uid the wall runs as, and
// the way to its bind sources searchable by it: bubblewrap resolves each
// --bind-fd source's path (then checks it is the descriptor's file) as that
// uid. Folders inside the state dir gain o+x (search, not listing); a folder
// above it that is not searchable is an error naming the fix.
func own(spec Spec, plan *Plan) error {
	for _, d := range []string{spec.DataDir, spec.RunDir} {
		if err := os.Lchown(d, plan.HostUID, plan.HostGID); err != nil {
			return fmt.Errorf("handing %s to uid %d: %w", d, plan.HostUID, err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("setting the mode of %s: %w", d, err)
		}
	}
	if fi, err := os.Stat(plan.Chdir); err != nil {
		return fmt.Errorf("checking the install folder: %w", err)
	} else if !mayReadExec(fi, plan.HostUID, plan.HostGID, plan.CodeGroup) {
		return fmt.Errorf("the install folder %s is not readable by uid %d (mode %v; fix: make it readable by that uid or its code group)", plan.Chdir, plan.HostUID, fi.Mode().Perm())
	}
	state, err := filepath.EvalSymlinks(spec.StateDir)
	if err != nil {
		return fmt.Errorf("resolving the state dir: %w", err)
	}
	for dir := filepath.Dir(state); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("checking %s: %w", dir, err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("the path to the state dir is not searchable by uid %d: %s has mode %v (fix: chmod o+x %s)", plan.HostUID, dir, fi.Mode().Perm(), dir)
		}
		if dir == "/" {
			break
		}
	}
	for _, op := range plan.Ops {
		if (op.Kind != OpBindFD && op.Kind != OpROBindFD) || !within(op.Src, state) {
			continue
		}
		for dir := filepath.Dir(op.Src); dir == state || within(dir, state); dir = filepath.Dir(dir) {
			fi, err := os.Stat(dir)
			if err != nil {
				return fmt.Errorf("checking %s: %w", dir, err)
			}
			// Searchable by the wall already (its own, or the code
			// group's: sealed code is not opened to others).
			if classPerm(fi, plan.HostUID, plan.HostGID, plan.CodeGroup)&0o001 == 0 {
				if err := os.Chmod(dir, fi.Mode().Perm()|0o001); err != nil {
					return fmt.Errorf("making %s searchable: %w", dir, err)
				}
			}
		}
	}
	return nil
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
		if why := EntryUnrunnable(op.Src, uid, gid, plan.CodeGroup); len(why) > 0 {
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

// argsFile holds bwrap's options, NUL-separated, for --args: a sealed
// memfd, rewound, that only bwrap reads.
func argsFile(opts []string) (*os.File, error) {
	fd, err := unix.MemfdCreate("bwrap-args", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("the options' descriptor: %w", os.NewSyscallError("memfd_create", err))
	}
	f := os.NewFile(uintptr(fd), "bwrap-args")
	var b strings.Builder
	for _, o := range opts {
		if strings.IndexByte(o, 0) >= 0 {
			_ = f.Close()
			return nil, fmt.Errorf("%w: a wall option holds a NUL byte", ErrSpec)
		}
		b.WriteString(o)
		b.WriteByte(0)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("writing the options' descriptor: %w", err)
	}
	// Sealed: nothing can change the options between here and bwrap's read.
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("sealing the options' descriptor: %w", os.NewSyscallError("fcntl F_ADD_SEALS", err))
	}
	if _, err := f.Seek(0, 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("rewinding the options' descriptor: %w", err)
	}
	return f, nil
}

// render turns the plan into bwrap's options and the command it runs,
// opening each fd bind and data file and passing it through fds. The /etc
// view it opens is counted in views, which the caller releases when the
// wall ends.
func (p *Plan) render(fds *fdTable, spec Spec, views *viewHold) (opts, command []string, err error) {
	a := []string{
		"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup",
		"--uid", strconv.Itoa(p.UID), "--gid", strconv.Itoa(p.GID),
		"--hostname", "toybox",
		"--die-with-parent", "--new-session",
		"--cap-drop", "ALL",
		"--clearenv",
	}
	// No bwrap init inside the wall: it would be a process of the vat's
	// own uid running outside the seccomp filter, its memory open to the
	// app through /proc. The wall's pid 1 is toybox-entry (filtered, not
	// dumpable; it reaps and forwards signals).
	a = append(a, "--as-pid-1")
	// No user namespace of the vat's own: the seccomp filter refuses
	// unshare, setns, clone with any namespace flag, and clone3. Where
	// there is no filter (walled-noseccomp), bubblewrap's
	// --disable-userns does it instead; with one, it would only add a
	// second user namespace to every spawn.
	if !p.Seccomp {
		a = append(a, "--disable-userns")
	}
	entryPath := ""
	for _, kv := range p.Env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	for i := range p.Ops {
		op := &p.Ops[i]
		switch op.Kind {
		case OpROBind:
			a = append(a, "--ro-bind", op.Src, op.Dest)
		case OpSymlink:
			a = append(a, "--symlink", op.Src, op.Dest)
		case OpTmpfs:
			if op.Size > 0 {
				a = append(a, "--size", strconv.FormatInt(op.Size, 10))
			}
			a = append(a, "--tmpfs", op.Dest)
		case OpDir:
			a = append(a, "--dir", op.Dest)
		case OpProc:
			a = append(a, "--proc", op.Dest)
		case OpDev:
			a = appendDev(a, op.Dest, spec.StateDir)
		case OpMaskFile:
			a = append(a, "--ro-bind", "/dev/null", op.Dest)
		case OpMaskDir:
			a = append(a, "--perms", "0555", "--size", strconv.Itoa(MaskBytes), "--tmpfs", op.Dest)
		case OpFile, OpROData:
			f, err := dataFile(op.Dest, op.Data)
			if err != nil {
				return nil, nil, err
			}
			a = append(a, "--perms", "0444")
			a = append(append(a, fds.pass(f, "--"+string(op.Kind))...), op.Dest)
		case OpExecFD:
			f, _, err := openBind(op)
			if err != nil {
				return nil, nil, err
			}
			entryPath = "/proc/self/fd/" + strconv.Itoa(fds.hold(f))
		case OpROBindFD, OpBindFD:
			var f *os.File
			var err error
			if op.Src == p.EtcView && p.EtcView != "" {
				f, err = views.open(op)
			} else {
				f, _, err = openBind(op)
			}
			if err != nil {
				return nil, nil, err
			}
			a = append(append(a, fds.pass(f, "--"+string(op.Kind))...), op.Dest)
		default:
			return nil, nil, fmt.Errorf("unknown plan op %q", op.Kind)
		}
	}
	// The root (a tmpfs bwrap made) goes read-only: the app writes only
	// where a bind or a tmpfs lets it (its data, /run/toybox, /tmp).
	a = append(a, "--remount-ro", "/", "--chdir", p.Chdir)
	// Every wall reads a seccomp program once its door is open, through
	// a pipe the supervisor fills only then (seccompGate): the filter, or
	// where there is none (walled-noseccomp), one that allows everything.
	prog := allowAll
	if p.Seccomp {
		var err error
		if prog, err = seccomp.BPF(seccomp.Options{Inotify: p.Inotify, Notifier: p.Transparent}); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrNoSeccomp, err)
		}
	}
	sc, err := fds.seccompGate(prog)
	if err != nil {
		return nil, nil, err
	}
	a = append(a, sc...)
	// The entry's own descriptors: its capability and the app's, which it
	// makes the app's fd 3.
	if entryPath == "" {
		return nil, nil, fmt.Errorf("%w: no toybox-entry in the plan", ErrSpec)
	}
	entry := []string{entryPath, "--vat", p.ID}
	if !p.NoNet {
		ec, err := dupFile(spec.EntryCap, "entry-cap")
		if err != nil {
			return nil, nil, err
		}
		entry = append(entry, fds.pass(ec, "--cap-fd")...)
		entry = append(entry, "--proxy-port", strconv.Itoa(p.ProxyPort))
		if p.Transparent {
			entry = append(entry, "--egress-mode", "transparent")
		}
		for _, f := range p.Forwards {
			entry = append(entry, "--forward", fmt.Sprintf("%d=%s", f.Port, joinHostPort(f.Host, f.TargetPort)))
		}
	}
	if p.ListenPort != 0 {
		entry = append(entry, "--listen-port", strconv.Itoa(p.ListenPort), "--listen-path", ListenPath)
	}
	if p.MCP != nil {
		// The bridge's socket: the supervisor keeps its own copy.
		ml, err := dupFile(spec.MCP.Listener, "mcp-listen")
		if err != nil {
			return nil, nil, err
		}
		entry = append(entry, p.MCP.flags()...)
		entry = append(entry, fds.pass(ml, "--mcp-fd")...)
	}
	ac, err := dupFile(spec.AppCap, "app-cap")
	if err != nil {
		return nil, nil, err
	}
	entry = append(entry, fds.pass(ac, "--app-cap-fd")...)
	entry = append(entry, "--")
	entry = append(entry, p.Command...)
	return a, entry, nil
}

func joinHostPort(host string, port uint16) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(int(port))
	}
	return host + ":" + strconv.Itoa(int(port))
}

// dupFile duplicates f (CLOEXEC) so the fd table owns its own copy.
func dupFile(f *os.File, name string) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("duplicating the %s descriptor: %w", name, os.NewSyscallError("fcntl", err))
	}
	return os.NewFile(uintptr(fd), name), nil
}

// dataFile puts data in a sealed memfd for --file (bubblewrap copies it into the wall).
func dataFile(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("toybox-data:"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("data for %s: %w", name, os.NewSyscallError("memfd_create", err))
	}
	f := os.NewFile(uintptr(fd), "data:"+name)
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("data for %s: %w", name, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("data for %s: %w", name, err)
	}
	return f, nil
}

// openBind opens a bind source as an O_PATH descriptor without following any
// symlink on the way (openat2 RESOLVE_NO_SYMLINKS, or O_NOFOLLOW and a
// check of the opened path where openat2 is missing), then checks that it is
// the very file the plan saw.
func openBind(op *Op) (*os.File, fileID, error) {
	flags := uint64(unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW)
	if op.dir {
		flags |= unix.O_DIRECTORY
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, op.Src, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Open(op.Src, int(flags), 0)
		if err == nil {
			if got, lerr := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); lerr != nil || got != op.Src {
				_ = unix.Close(fd)
				return nil, fileID{}, fmt.Errorf("%w: %s now resolves to %q", ErrSymlink, op.Src, got)
			}
		}
	}
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR) && op.dir:
		return nil, fileID{}, fmt.Errorf("%w: %s (%s) is, or passes through, a symlink or not a folder: %w", ErrSymlink, op.Src, op.Why, err)
	case err != nil:
		return nil, fileID{}, fmt.Errorf("opening %s (%s) for its bind: %w", op.Src, op.Why, &os.PathError{Op: "openat2", Path: op.Src, Err: err})
	}
	f := os.NewFile(uintptr(fd), "bind:"+op.Src)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = f.Close()
		return nil, fileID{}, fmt.Errorf("checking %s: %w", op.Src, os.NewSyscallError("fstat", err))
	}
	if op.id != (fileID{}) && (uint64(st.Dev) != op.id.dev || st.Ino != op.id.ino) {
		_ = f.Close()
		return nil, fileID{}, fmt.Errorf("%w: %s (%s) is not the file that was planned", ErrChanged, op.Src, op.Why)
	}
	return f, fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
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
