package wall

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"toybox/vat/wall/cgroup"
)

// taskFence is the socket a wall's entry reads the task fence from: the
// cgroup.procs of its own folder of the wall's group (cgroup.Group.Home),
// opened by the supervisor. The wall's first process starts in the app's
// folder (Group.Add); the entry starts the app there, then writes itself
// into its own.
// The supervisor sends them once the group is made, before the wall's
// seccomp gate opens (so before the entry runs); an entry that reads no
// fence (the supervisor died first) starts no app.
type taskFence struct{ w *os.File }

// taskFence makes the fence of a wall whose cgroup will keep a reserve of
// tasks (its host's cgroups hold tasks) and returns the entry's option
// naming its end; none otherwise. The table owns the fence from now on.
func (t *fdTable) taskFence(h *cgroup.Host) ([]string, error) {
	if !h.Support().Has(cgroup.Tasks) {
		return nil, nil
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the task fence's socket: %w", os.NewSyscallError("socketpair", err))
	}
	t.fence = &taskFence{w: os.NewFile(uintptr(fds[1]), "task-fence")}
	return t.pass(os.NewFile(uintptr(fds[0]), "task-fence-entry"), "--task-fence-fd"), nil
}

// hand sends the entry g's own folder and closes the socket.
func (f *taskFence) hand(g *cgroup.Group) error {
	if f == nil {
		return nil
	}
	defer f.close()
	if g == nil {
		return fmt.Errorf("%w: the wall has no cgroup to fence its app's tasks in", ErrLimits)
	}
	home, err := g.Home()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLimits, err)
	}
	if home == nil {
		return fmt.Errorf("%w: the wall's cgroup keeps no reserve of tasks", ErrLimits)
	}
	defer home.Close()
	rights := unix.UnixRights(int(home.Fd()))
	err = unix.Sendmsg(int(f.w.Fd()), []byte{0}, rights, nil, 0)
	if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
		err = unix.ESRCH // the entry's end is gone with its sandbox
	}
	if err != nil {
		return fmt.Errorf("handing the wall its task fence: %w", os.NewSyscallError("sendmsg", err))
	}
	return nil
}

// close gives the fence up: an entry waiting on it reads EOF.
func (f *taskFence) close() {
	if f != nil && f.w != nil {
		_ = f.w.Close()
		f.w = nil
	}
}
