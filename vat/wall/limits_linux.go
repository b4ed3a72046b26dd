package wall

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"toybox/vat/wall/cgroup"
)

// groupMaking is a wall's cgroup being made while bubblewrap sets the
// sandbox up: off the spawn's path (a group costs about half a
// millisecond on cgroup v1, where it is four), wanted only at the block.
type groupMaking struct {
	done chan struct{}
	g    *cgroup.Group
	err  error
}

// makeGroup starts making vat id's group in h with l; nil when h makes
// none (the wall then has no cgroup of its own).
func makeGroup(h *cgroup.Host, id string, l cgroup.Limits) *groupMaking {
	if !h.Enabled() {
		return nil
	}
	if l.Tasks > 0 {
		l.TaskReserve = TaskReserve
	}
	m := &groupMaking{done: make(chan struct{})}
	go func() {
		defer close(m.done)
		m.g, m.err = h.New(id, l)
	}()
	return m
}

// wait returns the group once it is made (nil, nil for none).
func (m *groupMaking) wait() (*cgroup.Group, error) {
	if m == nil {
		return nil, nil
	}
	<-m.done
	return m.g, m.err
}

// remove removes the group, once made (a start that failed).
func (m *groupMaking) remove() {
	if g, _ := m.wait(); g != nil {
		_ = g.Remove()
	}
}

// group returns the wall's cgroup, nil when it has none.
func (p *Process) group() *cgroup.Group {
	g, _ := p.grp.wait()
	return g
}

// Limits returns the limits the wall's cgroup holds it to: only those
// the host enforces (zero fields: none).
func (p *Process) Limits() cgroup.Limits {
	if g := p.group(); g != nil {
		return g.Limits()
	}
	return cgroup.Limits{}
}

// sandboxGone reports whether limit failed only because the sandbox was
// gone: its process (ESRCH), or it and bubblewrap both, the block's only
// readers, once its limit was set (EPIPE).
func sandboxGone(err error) bool {
	return errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EPIPE)
}

// limit sets the wall's limits on its first process (child, bwrap's
// sandbox process, still waiting at the block), then releases the block.
//
// The process moves into the wall's cgroup (grp's, if any), so that
// everything of the vat's is made in it, and its oom_score_adj goes to
// OOMScoreAdj, which everything it starts inherits: when the host runs out
// of memory, the kernel kills a vat before the supervisor.
//
// RLIMIT_NPROC bounds the tasks of the wall.
// The kernel counts them per user namespace and uid (since Linux 5.14).
// Everything in the wall is one uid in the wall's own namespace.
// So the limit counts the wall's tasks alone.
// They are also charged to the uid that made the namespace, up to its own
// limit (docs/walls.md).
// The limit is soft and hard, so the app cannot raise it.
// Set on bwrap before it made the namespace, it would count the
// supervisor's uid across every wall (when not root).
// Before the app forks is the only time it binds them all: hence the block.
func limit(child int, plan *Plan, grp *groupMaking, blockW *os.File) error {
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
	if _, err := blockW.Write([]byte{0}); err != nil {
		return fmt.Errorf("releasing the wall's block: %w", err)
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

// group returns the group once made (nil for none, or one that failed).
func (m *groupMaking) group() *cgroup.Group {
	g, _ := m.wait()
	return g
}
