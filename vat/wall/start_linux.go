package wall

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

// cleanup runs registered releases in reverse when Start returns, success
// or not. The switchboard has its own, since neither side may import the
// other.
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
	h := spec.Host
	if h == nil {
		return nil, fmt.Errorf("starting the wall for %q: %w: no Host (wall.NewHost, one per supervisor)", spec.ID, ErrSpec)
	}
	bwrap, err := h.lookBwrap(spec.Bwrap)
	if err != nil {
		return nil, fmt.Errorf("starting the wall for %q: %w: %w", spec.ID, ErrBwrap, err)
	}
	plan, err := BuildPlan(spec)
	if err != nil {
		return nil, err
	}
	if err := h.ensureEtcView(plan); err != nil {
		return nil, fmt.Errorf("starting the wall for %q: %w", spec.ID, err)
	}
	if plan.HostUID >= 0 {
		if err := own(spec, plan); err != nil {
			return nil, fmt.Errorf("starting the wall for %q: %w", spec.ID, err)
		}
	}
	// The wall's cgroup, made (with its limits) while bubblewrap starts:
	// at the block its first process moves in. Where the host gives none,
	// the wall has none (its status says so); where it does, a group that
	// cannot be made leaves the vat off.
	lim := spec.Limits
	if lim.Tasks == 0 {
		lim.Tasks = plan.MaxTasks
	}
	grp := makeGroup(spec.Cgroups, string(spec.ID), lim)
	cl.add(grp.remove)
	var fds fdTable
	cl.add(fds.closeAll)
	cl.add(func() { fds.gate.close() })
	cl.add(func() { fds.fence.close() })
	cl.add(func() { fds.ran.close() })
	views := h.newViewHold()
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
	// The block holds the sandbox until its limits are set (limit).
	// The sandbox's first process waits on it (--block-fd) once its
	// namespaces and mounts are made, before anything of the vat's runs.
	// bubblewrap goes on at EOF as at a byte.
	// That process asks for its parent's death only after the block.
	// A supervisor that dies before releasing it closes its only write end.
	// bwrap dies with the supervisor; the sandbox does not.
	// The sandbox then reads its seccomp program, which the supervisor
	// writes only once the block is released (seccompGate).
	// The kernel refuses that empty program, and bubblewrap ends before
	// anything of the vat runs.
	// So a sandbox whose supervisor died during its setup ends on its own.
	// It never runs the vat with no limit, nor waits for the next supervisor.
	// bubblewrap closes the block once through; nothing of it reaches the vat.
	blk, err := newBlock()
	if err != nil {
		return nil, fmt.Errorf("starting the wall for %q: %w", spec.ID, err)
	}
	blockW := blk.w
	defer blockW.Close()
	opts = append(fds.pass(blk.r, "--block-fd"), opts...)
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
		h.forgetBwrap() // moved or removed: the next start looks again
		return nil, fmt.Errorf("starting the wall for %q: %w: %w", spec.ID, ErrBwrap, err)
	}
	p := &Process{id: string(spec.ID), tier: plan.Tier, cmd: cmd, logger: logger, done: make(chan struct{}), status: statusR, statusRead: make(chan struct{}), head: head, plan: plan, views: views, grp: grp, ran: fds.ran}
	go p.reap()
	// Before the block the sandbox's first process is still in bwrap's
	// process group (it makes its own session only after): ending the
	// group ends it too. Ending bwrap alone left it waiting at the block
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
	// block.
	err = limit(child, plan, grp, blockW)
	if err == nil {
		err = fds.fence.hand(grp.group())
	}
	if err == nil {
		err = fds.gate.open()
	}
	if err != nil && !sandboxGone(err) {
		// The sandbox's process is not bwrap's to end yet (it asks for
		// its parent's death after the block): end it first.
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

// block is the pipe a sandbox waits at until the supervisor has set its
// limits. Writing a byte to w releases it.
type block struct {
	r *os.File // bwrap's --block-fd
	w *os.File // the supervisor's, the only write end: EOF at r means the supervisor is gone
}

func newBlock() (block, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return block{}, fmt.Errorf("block pipe: %w", err)
	}
	return block{r: r, w: w}, nil
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
