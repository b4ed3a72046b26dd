// Package cgroup gives each wall a control group of its own.
//
// The group holds the wall's memory (swap included), CPU time and tasks to
// the limits its vat was given. The supervisor opens the host's cgroups once
// (Open): cgroup v2 where its memory controller reaches this process's
// cgroup, else the v1 hierarchies a host mounts for memory, cpu, cpuacct and
// pids. Host.Support says which limits the host enforces; a limit it
// cannot enforce is reported, never claimed. Swap is judged at each call:
// swap may be turned on after Open. Each wall's group is made
// while bubblewrap starts (Host.New), its first process moved into it at
// the wall's door (Group.Add), and it is removed when the wall ends
// (Group.Remove). Groups an earlier supervisor left are swept (Host.Sweep).
//
// Layout. All walls of one supervisor share one folder, Config.Name, with a
// group per wall named for its vat ("vat-<id>"). On v2 the folder sits in this process's
// cgroup, which must offer the controllers (systemd's Delegate=yes); where
// that cgroup holds this process, the process first moves into a leaf of
// its own, "supervisor" (cgroup v2 hands controllers down only from a cgroup
// with no processes of its own). On v1 the folder sits in this process's
// cgroup of each hierarchy.
package cgroup

import "errors"

// Limits are what one wall's group holds it to. A zero field sets nothing.
type Limits struct {
	// MemoryBytes is the most memory the wall's processes may use (their
	// pages, page cache and tmpfs files included). Swap is not a way
	// around it: the group may use no swap.
	MemoryBytes int64
	// CPUs caps the wall's CPU time, in CPUs: 0.5 is half of one CPU in
	// every 100 ms period. Within the cap every wall has the same weight.
	CPUs float64
	// Tasks is the most processes and threads the wall may hold at once
	// (pids.max).
	Tasks int
	// TaskReserve is how many of Tasks the wall's first process keeps for
	// itself (at most half): the group's app folder, where the app's
	// processes start (Group.Fence), holds Tasks less the reserve.
	TaskReserve int
}

// The kinds of limit, as Support names them.
const (
	Memory = "memory"
	Swap   = "swap"
	CPU    = "cpu"
	Tasks  = "tasks"
)

// Kinds lists every kind of limit in a stable order.
var Kinds = []string{Memory, Swap, CPU, Tasks}

// Support says which limits a Host enforces.
type Support struct {
	// Version is 2 or 1: the cgroup version the groups are made in. 0: no
	// group can be made at all.
	Version int
	// Where is the walls' folder (one per hierarchy on v1).
	Where []string
	// Missing maps each kind of limit (Memory, Swap, CPU, Tasks) the host
	// cannot enforce to why not.
	Missing map[string]string
}

// Has reports whether kind is enforced.
func (s Support) Has(kind string) bool {
	_, missing := s.Missing[kind]
	return s.Version > 0 && !missing
}

// Sentinels.
var (
	// ErrUnsupported: this platform has no cgroups.
	ErrUnsupported = errors.New("cgroups are only supported on linux")
	// ErrNoGroups: this host gives the supervisor no cgroup to make the
	// walls' groups in.
	ErrNoGroups = errors.New("no cgroup for the walls")
)
