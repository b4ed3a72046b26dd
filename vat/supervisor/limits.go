package supervisor

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"strconv"

	"toybox/vat/store"
	"toybox/vat/wall"
	"toybox/vat/wall/cgroup"
)

// Limits are the operator's limits for every wall: each vat's by default,
// and the most its owner may set for it. A zero field: no limit of that
// kind.
type Limits struct {
	MemoryBytes int64   // the wall's memory (swap none beyond it)
	CPUs        float64 // the wall's CPU time, in CPUs
	DiskBytes   int64   // the vat's data folder, a file system of its own
}

// InForce are the limits a running vat is held to, as GET /<vat> shows
// them: only those the host enforces.
type InForce struct {
	MemoryMiB int64   `json:"memory_mib,omitempty"`
	CPUs      float64 `json:"cpus,omitempty"`
	Tasks     int     `json:"tasks,omitempty"`
	DiskMiB   int64   `json:"disk_mib,omitempty"`
}

// The names of the limits, as InForce and Status.Unlimited give them.
const (
	limMemory = "memory"
	limSwap   = "swap"
	limCPU    = "cpu"
	limTasks  = "tasks"
	limDisk   = "disk"
)

// limitParams are the PUT /<vat> parameters that set an owner's limits.
var limitParams = []string{"memory_mib", "cpus", "disk_mib"}

// parseLimits reads the owner's limits from q. sent says whether any was
// given (an upgrade without one keeps the old ones).
func parseLimits(q url.Values) (l store.Limits, sent bool, err error) {
	for _, k := range limitParams {
		if !q.Has(k) {
			continue
		}
		sent = true
		v := q.Get(k)
		switch k {
		case "cpus":
			f, perr := strconv.ParseFloat(v, 64)
			if perr != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0.01 {
				return l, sent, fmt.Errorf("%w: cpus=%q: want a number of CPUs of at least 0.01, such as 0.5", ErrBadInput, v)
			}
			l.CPUs = f
		default:
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || n < 1 || n > 1<<30 {
				return l, sent, fmt.Errorf("%w: %s=%q: want a whole number of MiB from 1", ErrBadInput, k, v)
			}
			if k == "memory_mib" {
				l.MemoryMiB = n
			} else {
				l.DiskMiB = n
			}
		}
	}
	return l, sent, nil
}

// checkLimits refuses an owner's limit above the operator's.
func (s *Supervisor) checkLimits(l store.Limits) error {
	op := s.cfg.Limits
	switch {
	case l.MemoryMiB > 0 && op.MemoryBytes > 0 && l.MemoryMiB<<20 > op.MemoryBytes:
		return fmt.Errorf("%w: memory_mib=%d is above this host's limit, %d MiB", ErrBadInput, l.MemoryMiB, op.MemoryBytes>>20)
	case l.CPUs > 0 && op.CPUs > 0 && l.CPUs > op.CPUs:
		return fmt.Errorf("%w: cpus=%g is above this host's limit, %g", ErrBadInput, l.CPUs, op.CPUs)
	case l.DiskMiB > 0 && op.DiskBytes > 0 && l.DiskMiB<<20 > op.DiskBytes:
		return fmt.Errorf("%w: disk_mib=%d is above this host's limit, %d MiB", ErrBadInput, l.DiskMiB, op.DiskBytes>>20)
	case l.DiskMiB > 0 && l.DiskMiB<<20 < diskMin:
		return fmt.Errorf("%w: disk_mib=%d is below the least a data folder gets, %d MiB", ErrBadInput, l.DiskMiB, diskMin>>20)
	}
	return nil
}

// diskMin is the smallest disk limit (disk.MinBytes).
const diskMin = 16 << 20

// limitsFor returns the limits vat rec runs under (Limits.For).
func (s *Supervisor) limitsFor(rec store.Record) Limits { return s.cfg.Limits.For(rec) }

// For returns the limits vat rec runs under on a host whose operator set
// op: the owner's where set, else the operator's, never above the
// operator's.
func (op Limits) For(rec store.Record) Limits {
	l := op
	pick := func(own, max int64) int64 {
		if own > 0 && (max == 0 || own < max) {
			return own
		}
		return max
	}
	l.MemoryBytes = pick(rec.Limits.MemoryMiB<<20, op.MemoryBytes)
	l.DiskBytes = pick(rec.Limits.DiskMiB<<20, op.DiskBytes)
	if c := rec.Limits.CPUs; c > 0 && (op.CPUs == 0 || c < op.CPUs) {
		l.CPUs = c
	}
	return l
}

// wallLimits are the cgroup limits for l.
func wallLimits(l Limits) cgroup.Limits {
	return cgroup.Limits{MemoryBytes: l.MemoryBytes, CPUs: l.CPUs}
}

// limited is what a Process with a cgroup says it is held to
// (*wall.Process).
type limited interface{ Limits() cgroup.Limits }

// inForce returns the limits a spawn is held to (from its cgroup's own
// account, and the disk size mounted) and why each other limit is not.
func (s *Supervisor) inForce(p Process, want Limits, disk int64, diskWhy string) (InForce, map[string]string) {
	var got cgroup.Limits
	if lp, ok := p.(limited); ok {
		got = lp.Limits()
	}
	f := InForce{MemoryMiB: got.MemoryBytes >> 20, CPUs: got.CPUs, Tasks: got.Tasks, DiskMiB: disk >> 20}
	if p.Tier() == "" {
		// Its user writes where it likes: the data folder's size holds
		// none of it.
		f.DiskMiB = 0
	}
	why := map[string]string{}
	sup := s.cfg.Cgroups.Support()
	reason := func(kind string, asked bool) string {
		switch {
		case p.Tier() == "":
			return "it runs without its wall"
		case !asked:
			return "this host's operator set none"
		case s.cfg.Cgroups == nil:
			return "the supervisor gives walls no cgroups"
		case sup.Missing[kind] != "":
			return sup.Missing[kind]
		}
		return "not set"
	}
	if f.MemoryMiB == 0 {
		why[limMemory] = reason(cgroup.Memory, want.MemoryBytes > 0)
	} else if r := sup.Missing[cgroup.Swap]; r != "" {
		why[limSwap] = r
	}
	if f.CPUs == 0 {
		why[limCPU] = reason(cgroup.CPU, want.CPUs > 0)
	}
	if f.Tasks == 0 && p.Tier() != "" {
		// Its RLIMIT_NPROC holds it all the same (wall.Spec.MaxTasks).
		f.Tasks = cmp.Or(s.cfg.WallMaxTasks, wall.MaxTasks)
	}
	if f.Tasks == 0 {
		why[limTasks] = reason(cgroup.Tasks, true)
	}
	if f.DiskMiB == 0 {
		switch {
		case p.Tier() == "":
			why[limDisk] = "it runs without its wall"
		case want.DiskBytes == 0:
			why[limDisk] = "this host's operator set none"
		case diskWhy != "":
			why[limDisk] = diskWhy
		default:
			why[limDisk] = "not set"
		}
	}
	return f, why
}
