//go:build linux

package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"toybox/vat/wall/mountinfo"
)

// Config says where a Host makes its walls' groups.
type Config struct {
	// Name is the walls' folder, one per supervisor (per state dir): two
	// supervisors sharing a cgroup never touch each other's walls.
	// Required: a single path element.
	Name string
	// MountInfo and Self are the mount table and this process's cgroups.
	// If empty, /proc/self/mountinfo and /proc/self/cgroup.
	MountInfo, Self string
	// Pid is the process moved into a leaf of its own when its cgroup v2
	// must hand its controllers down. If zero, this process.
	Pid int
	// Version picks the cgroup version: 2 or 1. If zero, v2 where its
	// memory controller reaches this process's cgroup, else v1 where a
	// host mounts its controllers, else v2 with what it offers.
	Version int
}

// periodMicros is the CPU cap's period: the kernel's default (100 ms).
const periodMicros = 100000

// supervisorLeaf is the cgroup v2 leaf this process moves into when its
// own cgroup must hand its controllers down to the walls.
const supervisorLeaf = "supervisor"

// Host makes the walls' groups. Its methods are safe for concurrent use.
type Host struct {
	sup  Support
	v2   string            // the walls' folder on cgroup v2; "" on v1
	v1   map[string]string // on v1: controller (memory, cpu, cpuacct, pids) → the walls' folder
	swap bool              // the group's swap limit can be set
	kill bool              // cgroup v2's cgroup.kill is there
	// noSwap says why a wall may go past its memory limit into swap, the
	// kernel not accounting it; "" where it does. Support claims it
	// missing only while the host has swap: swapon(8) may come at any time.
	noSwap string
}

// Enabled reports whether h makes groups at all (Support().Version > 0).
// A wall started without one runs with none of these limits.
func (h *Host) Enabled() bool { return h != nil && h.sup.Version > 0 }

// Support says which limits the host enforces.
func (h *Host) Support() Support {
	if h == nil {
		return Support{Missing: allMissing("no cgroups were opened")}
	}
	s := h.sup
	s.Missing = map[string]string{}
	for k, v := range h.sup.Missing {
		s.Missing[k] = v
	}
	s.Where = slices.Clone(h.sup.Where)
	if h.noSwap != "" && swapTotal() > 0 {
		s.Missing[Swap] = h.noSwap
	}
	return s
}

func allMissing(why string) map[string]string {
	m := map[string]string{}
	for _, k := range Kinds {
		m[k] = why
	}
	return m
}

// Open finds where this host lets the supervisor make the walls' groups,
// makes the walls' folder there, and says which limits it enforces. It
// never fails outright: what it cannot do is in Support().Missing (and a
// Host with Version 0 makes no group).
func Open(cfg Config) *Host {
	h := &Host{sup: Support{Missing: map[string]string{}}}
	if cfg.Name == "" || strings.ContainsRune(cfg.Name, '/') || cfg.Name == "." || cfg.Name == ".." {
		h.sup.Missing = allMissing("no name for the walls' folder")
		return h
	}
	if cfg.MountInfo == "" {
		cfg.MountInfo = "/proc/self/mountinfo"
	}
	if cfg.Self == "" {
		cfg.Self = "/proc/self/cgroup"
	}
	if cfg.Pid == 0 {
		cfg.Pid = os.Getpid()
	}
	mounts, err := readMounts(cfg.MountInfo)
	if err != nil {
		h.sup.Missing = allMissing(err.Error())
		return h
	}
	self, err := readSelf(cfg.Self)
	if err != nil {
		h.sup.Missing = allMissing(err.Error())
		return h
	}
	v2dir, v2ok := v2Dir(mounts, self)
	var avail []string
	if v2ok {
		avail = readFields(filepath.Join(v2dir, "cgroup.controllers"))
	}
	v1 := v1Dirs(mounts, self)
	switch {
	case cfg.Version == 2 && v2ok:
		h.openV2(cfg, v2dir, avail)
	case cfg.Version == 1 && len(v1) > 0:
		h.openV1(cfg, v1)
	case cfg.Version != 0:
		h.sup.Missing = allMissing(fmt.Sprintf("this process is in no cgroup v%d hierarchy", cfg.Version))
	case v2ok && slices.Contains(avail, "memory"):
		h.openV2(cfg, v2dir, avail)
	case len(v1) > 0:
		h.openV1(cfg, v1)
	case v2ok:
		h.openV2(cfg, v2dir, avail)
	default:
		h.sup.Missing = allMissing("this host mounts no cgroup hierarchy (fix: mount cgroup2 at /sys/fs/cgroup)")
	}
	return h
}

// delegateFix and delegateFixV1 say how to give toybox cgroups of its own.
const (
	delegateFix   = "run toybox under systemd with Delegate=yes (systemd/toybox.service), or as root"
	delegateFixV1 = "run toybox as root, or on a host with cgroup v2 under systemd with Delegate=yes: systemd hands no cgroup v1 controller to a service that is not root"
)

func (h *Host) openV2(cfg Config, dir string, avail []string) {
	var want []string
	for _, c := range []string{"memory", "cpu", "pids"} {
		if slices.Contains(avail, c) {
			want = append(want, c)
		}
	}
	enabled, why := enableV2(dir, want, cfg.Pid)
	walls := filepath.Join(dir, cfg.Name)
	if err := os.Mkdir(walls, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		h.sup.Missing = allMissing(fmt.Sprintf("making %s: %v (fix: %s)", walls, err, delegateFix))
		return
	}
	if len(enabled) > 0 {
		// The walls' folder hands them on to each wall's group.
		if err := writeFile(filepath.Join(walls, "cgroup.subtree_control"), plus(enabled)); err != nil {
			h.sup.Missing = allMissing(fmt.Sprintf("handing the controllers to %s: %v", walls, err))
			return
		}
	}
	h.v2 = walls
	h.sup.Version = 2
	h.sup.Where = []string{walls}
	h.kill = exists(filepath.Join(walls, "cgroup.kill"))
	missing := func(c, kind string) {
		if slices.Contains(enabled, c) {
			return
		}
		switch {
		case why != "":
			h.sup.Missing[kind] = why
		default:
			h.sup.Missing[kind] = fmt.Sprintf("the cgroup %s is not given the %s controller (fix: %s)", dir, c, delegateFix)
		}
	}
	missing("memory", Memory)
	missing("cpu", CPU)
	missing("pids", Tasks)
	if _, ok := h.sup.Missing[Memory]; ok {
		h.sup.Missing[Swap] = h.sup.Missing[Memory]
	} else {
		h.swap = exists(filepath.Join(walls, "memory.swap.max"))
		if !h.swap {
			h.noSwap = "the kernel does not account swap: a wall may go past its memory limit into swap (fix: a kernel with CONFIG_MEMCG_SWAP, booted without swapaccount=0)"
		}
	}
}

// enableV2 makes sure dir hands want down to its children and returns what
// it hands down. Where dir holds processes (cgroup v2 then refuses), the
// process pid moves into a leaf of its own first. why says what kept a
// controller back.
func enableV2(dir string, want []string, pid int) (enabled []string, why string) {
	have := readFields(filepath.Join(dir, "cgroup.subtree_control"))
	var need []string
	for _, c := range want {
		if !slices.Contains(have, c) {
			need = append(need, c)
		}
	}
	if len(need) == 0 {
		return want, ""
	}
	ctl := filepath.Join(dir, "cgroup.subtree_control")
	err := writeFile(ctl, plus(need))
	if errors.Is(err, unix.EBUSY) {
		leaf := filepath.Join(dir, supervisorLeaf)
		if merr := os.Mkdir(leaf, 0o755); merr != nil && !errors.Is(merr, fs.ErrExist) {
			return intersect(want, have), fmt.Sprintf("making %s for toybox itself: %v (fix: %s)", leaf, merr, delegateFix)
		}
		if merr := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(pid)); merr != nil {
			return intersect(want, have), fmt.Sprintf("moving toybox into %s: %v (fix: %s)", leaf, merr, delegateFix)
		}
		err = writeFile(ctl, plus(need))
	}
	if err != nil {
		// One at a time: a controller the kernel refuses (cpu, while a
		// realtime thread runs) keeps the others.
		for _, c := range need {
			if writeFile(ctl, "+"+c) == nil {
				have = append(have, c)
			}
		}
		switch {
		case errors.Is(err, unix.EBUSY):
			why = fmt.Sprintf("the cgroup %s holds processes other than toybox, so it cannot hand its controllers to the walls (fix: run toybox in a cgroup of its own: under systemd with Delegate=yes, or systemd-run --scope -p Delegate=yes)", dir)
		default:
			why = fmt.Sprintf("writing %s: %v (fix: %s)", ctl, err, delegateFix)
		}
		return intersect(want, have), why
	}
	return want, ""
}

func (h *Host) openV1(cfg Config, dirs map[string]string) {
	h.v1 = map[string]string{}
	h.sup.Version = 1
	kinds := map[string]string{"memory": Memory, "cpu": CPU, "pids": Tasks}
	for _, c := range []string{"memory", "cpu", "cpuacct", "pids"} {
		parent, ok := dirs[c]
		if !ok {
			if k, named := kinds[c]; named {
				h.sup.Missing[k] = fmt.Sprintf("this host mounts no cgroup hierarchy with the %s controller", c)
			}
			continue
		}
		walls := filepath.Join(parent, cfg.Name)
		if err := os.Mkdir(walls, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			if k, named := kinds[c]; named {
				h.sup.Missing[k] = fmt.Sprintf("making %s: %v (fix: %s)", walls, err, delegateFixV1)
			}
			continue
		}
		h.v1[c] = walls
		if !slices.Contains(h.sup.Where, walls) { // one hierarchy, two controllers
			h.sup.Where = append(h.sup.Where, walls)
		}
	}
	if _, ok := h.v1["memory"]; !ok {
		h.sup.Missing[Swap] = h.sup.Missing[Memory]
	} else {
		h.swap = exists(filepath.Join(h.v1["memory"], "memory.memsw.limit_in_bytes"))
		if !h.swap {
			h.noSwap = "the kernel does not account swap: a wall may go past its memory limit into swap (fix: boot with swapaccount=1)"
		}
	}
	if len(h.v1) == 0 {
		h.sup.Version = 0
	}
}

// Group is one wall's cgroup (one folder per hierarchy on v1).
type Group struct {
	h     *Host
	dirs  []string
	procs []string // the cgroup.procs Add writes: one per folder of dirs
	mem   string   // the folder holding the memory controller's files
	cpu   string   // the folder holding the CPU time used
	app   string   // the app's folder, "" for none
	home  string   // the entry's folder, beside app (Home)
	set   Limits

	mu      sync.Mutex
	removed bool // Remove ran: dirs are gone (a new wall's group may have their names)
}

// appLeaf and entryLeaf are the folders of a wall's group that hold its
// app's tasks and its first process's (the entry), where the group keeps a
// reserve of tasks (Limits.TaskReserve). entryLeaf is made on cgroup v2
// only, whose groups hold processes only in leaves; on v1 the entry's
// folder is the group's own.
const (
	appLeaf   = "app"
	entryLeaf = "entry"
)

// groupPrefix begins each wall's group name: a vat id alone may be the
// name of a cgroup file (v1's "tasks").
const groupPrefix = "vat-"

// New makes the group of the wall of vat id ("vat-<id>") and sets l in
// it, where the host enforces each. A group of that name left over (a wall of an earlier
// supervisor) is ended and made anew. On error nothing is left behind.
func (h *Host) New(id string, l Limits) (*Group, error) {
	if h == nil || h.sup.Version == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoGroups, h.Support().Missing[Memory])
	}
	if id == "" || strings.ContainsRune(id, '/') || id == "." || id == ".." {
		return nil, fmt.Errorf("making a cgroup: bad name %q", id)
	}
	g := &Group{h: h}
	fail := func(err error) (*Group, error) {
		_ = g.Remove()
		return nil, err
	}
	mk := func(parent string) (string, error) {
		dir := filepath.Join(parent, groupPrefix+id)
		err := os.Mkdir(dir, 0o755)
		if errors.Is(err, fs.ErrExist) {
			if err := h.removeDir(dir); err != nil {
				return "", fmt.Errorf("ending the leftover cgroup %s: %w", dir, err)
			}
			err = os.Mkdir(dir, 0o755)
		}
		if err != nil {
			return "", fmt.Errorf("making the wall's cgroup: %w", err)
		}
		g.dirs = append(g.dirs, dir)
		g.procs = append(g.procs, filepath.Join(dir, "cgroup.procs"))
		return dir, nil
	}
	// fence makes the app's folder below dir, holding l.Tasks less the
	// reserve (and the entry's, on v2), where Add puts the wall's first
	// process.
	reserve := 0
	if l.Tasks > 0 && l.TaskReserve > 0 {
		reserve = min(l.TaskReserve, l.Tasks/2)
	}
	fence := func(dir string, v2 bool) error {
		g.home = dir
		if v2 {
			// A v2 group that hands a controller down holds no process:
			// the wall's first process goes into a leaf of its own.
			if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+pids"); err != nil {
				return fmt.Errorf("handing the tasks controller to the wall's app: %w", err)
			}
			g.home = filepath.Join(dir, entryLeaf)
			if err := os.Mkdir(g.home, 0o755); err != nil {
				return fmt.Errorf("making the wall's cgroup: %w", err)
			}
		}
		app := filepath.Join(dir, appLeaf)
		if err := os.Mkdir(app, 0o755); err != nil {
			return fmt.Errorf("making the wall's cgroup: %w", err)
		}
		g.app = app
		g.procs[slices.Index(g.dirs, dir)] = filepath.Join(app, "cgroup.procs")
		return writeAll(app, []kv{{"pids.max", strconv.Itoa(l.Tasks - reserve)}})
	}
	s := h.sup
	if h.v2 != "" {
		dir, err := mk(h.v2)
		if err != nil {
			return fail(err)
		}
		g.mem, g.cpu = dir, dir
		var w []kv
		if l.MemoryBytes > 0 && s.Has(Memory) {
			// The whole wall goes when the kernel kills for memory: a
			// wall missing one process is not the vat that was started.
			w = append(w, kv{"memory.max", strconv.FormatInt(l.MemoryBytes, 10)}, kv{"memory.oom.group", "1"})
			if h.swap {
				w = append(w, kv{"memory.swap.max", "0"})
			}
			g.set.MemoryBytes = l.MemoryBytes
		}
		if l.CPUs > 0 && s.Has(CPU) {
			w = append(w, kv{"cpu.max", fmt.Sprintf("%d %d", quota(l.CPUs), periodMicros)})
			g.set.CPUs = l.CPUs
		}
		if l.Tasks > 0 && s.Has(Tasks) {
			w = append(w, kv{"pids.max", strconv.Itoa(l.Tasks)})
			g.set.Tasks = l.Tasks
			g.set.TaskReserve = reserve
		}
		if err := writeAll(dir, w); err != nil {
			return fail(err)
		}
		if g.set.TaskReserve > 0 {
			if err := fence(dir, true); err != nil {
				return fail(err)
			}
		}
		return g, nil
	}
	// Only the hierarchies of the limits set (cpuacct counts the CPU
	// time a cap holds).
	want := map[string]bool{"memory": l.MemoryBytes > 0, "cpu": l.CPUs > 0, "cpuacct": l.CPUs > 0, "pids": l.Tasks > 0}
	// Controllers mounted as one hierarchy (cpu,cpuacct on most v1
	// hosts) share one folder of the group, made once: made again, it
	// would lose the limits already set in it.
	made := map[string]string{} // the walls' folder → the group's there
	for _, c := range []string{"memory", "cpu", "cpuacct", "pids"} {
		parent, ok := h.v1[c]
		if !ok || !want[c] {
			continue
		}
		dir, ok := made[parent]
		if !ok {
			var err error
			if dir, err = mk(parent); err != nil {
				return fail(err)
			}
			made[parent] = dir
		}
		var w []kv
		switch c {
		case "memory":
			g.mem = dir
			if l.MemoryBytes > 0 {
				// memsw (memory and swap together) may not be below the
				// memory limit: set after it, equal to it, no swap.
				w = append(w, kv{"memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)})
				if h.swap {
					w = append(w, kv{"memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)})
				}
				g.set.MemoryBytes = l.MemoryBytes
			}
		case "cpu":
			if l.CPUs > 0 {
				w = append(w, kv{"cpu.cfs_period_us", strconv.Itoa(periodMicros)}, kv{"cpu.cfs_quota_us", strconv.FormatInt(quota(l.CPUs), 10)})
				g.set.CPUs = l.CPUs
			}
		case "cpuacct":
			g.cpu = dir
		case "pids":
			if l.Tasks > 0 {
				w = append(w, kv{"pids.max", strconv.Itoa(l.Tasks)})
				g.set.Tasks = l.Tasks
				g.set.TaskReserve = reserve
			}
		}
		if err := writeAll(dir, w); err != nil {
			return fail(err)
		}
		if c == "pids" && g.set.TaskReserve > 0 {
			if err := fence(dir, false); err != nil {
				return fail(err)
			}
		}
	}
	return g, nil
}

// quota is the CPU time of cpus in one period, in microseconds (at least
// the kernel's least, 1 ms).
func quota(cpus float64) int64 { return max(int64(cpus*periodMicros), 1000) }

type kv struct{ file, value string }

func writeAll(dir string, w []kv) error {
	for _, e := range w {
		if err := writeFile(filepath.Join(dir, e.file), e.value); err != nil {
			return fmt.Errorf("setting the wall's limit: %w", err)
		}
	}
	return nil
}

// Limits returns the limits the group holds its wall to: those the host
// enforces.
func (g *Group) Limits() Limits { return g.set }

// Add moves process pid (and its threads) into the group: into the app's
// folder where the group keeps a reserve of tasks (the wall's first
// process, which starts the app there and then moves itself out: Home).
func (g *Group) Add(pid int) error {
	for _, procs := range g.procs {
		if err := writeFile(procs, strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("moving the wall into its cgroup: %w", err)
		}
	}
	return nil
}

// OOMKills returns how many of the group's processes the kernel killed for
// going past its memory limit.
func (g *Group) OOMKills() int {
	if g.mem == "" {
		return 0
	}
	file := "memory.oom_control" // v1
	if g.h.v2 != "" {
		file = "memory.events"
	}
	return int(readKey(filepath.Join(g.mem, file), "oom_kill"))
}

// CPUTime returns the CPU time the group's processes have used.
func (g *Group) CPUTime() (time.Duration, error) {
	if g.cpu == "" {
		return 0, fmt.Errorf("%w: no CPU accounting", ErrNoGroups)
	}
	if g.h.v2 != "" {
		b, err := os.ReadFile(filepath.Join(g.cpu, "cpu.stat"))
		if err != nil {
			return 0, err
		}
		us, ok := keyIn(string(b), "usage_usec")
		if !ok {
			return 0, errors.New("cpu.stat has no usage_usec")
		}
		return time.Duration(us) * time.Microsecond, nil
	}
	b, err := os.ReadFile(filepath.Join(g.cpu, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(ns), err
}

// Dirs returns the group's folders (one per hierarchy on v1); none once
// it is removed.
func (g *Group) Dirs() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return nil
	}
	return slices.Clone(g.dirs)
}

// Remove ends whatever still runs in the group and removes it, once: a
// later call removes nothing (a new wall's group may have the same
// names by then). It may run beside Dirs: a wall's group is removed by
// the goroutine that reaps it.
func (g *Group) Remove() error {
	g.mu.Lock()
	removed := g.removed
	g.removed = true
	g.mu.Unlock()
	if removed {
		return nil
	}
	var errs []error
	for _, dir := range g.dirs {
		if err := g.h.removeDir(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Home opens the cgroup.procs of the entry's folder of the group, where the
// group keeps a reserve of tasks; nil where it keeps none. The caller
// closes it. A process holding it moves itself (pid 0) or a process of its
// own pid namespace there with the rights of this process, the opener:
// the wall's entry, put in the app's folder by Add, moves itself out so
// once it has started its app there.
func (g *Group) Home() (*os.File, error) {
	if g.app == "" {
		return nil, nil
	}
	f, err := os.OpenFile(filepath.Join(g.home, "cgroup.procs"), os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the wall's cgroup: %w", err)
	}
	return f, nil
}

// removeDir kills every process in the group dir (its folders' too) and
// removes it. The processes of a wall whose pid 1 ended are being torn
// down by the kernel: the folder goes once they are gone.
func (h *Host) removeDir(dir string) error {
	if ents, rerr := os.ReadDir(dir); rerr == nil {
		for _, e := range ents {
			if e.IsDir() {
				if err := h.removeDir(filepath.Join(dir, e.Name())); err != nil {
					return err
				}
			}
		}
	}
	err := unix.Rmdir(dir)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	for i := 0; i < 200; i++ {
		if h.kill {
			_ = writeFile(filepath.Join(dir, "cgroup.kill"), "1")
		} else {
			for _, f := range readFields(filepath.Join(dir, "cgroup.procs")) {
				if pid, perr := strconv.Atoi(f); perr == nil && pid > 0 {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("removing the cgroup %s: %w", dir, &os.PathError{Op: "rmdir", Path: dir, Err: err})
}

// Sweep ends and removes every wall's group left in the walls' folder (by
// an earlier supervisor that did not live to remove them), and returns how
// many it removed. Call it before any wall starts.
func (h *Host) Sweep() (int, error) {
	if h == nil {
		return 0, nil
	}
	n := 0
	var errs []error
	for _, walls := range h.sup.Where {
		ents, err := os.ReadDir(walls)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), groupPrefix) {
				continue
			}
			if err := h.removeDir(filepath.Join(walls, e.Name())); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

// Close removes the walls' folder where no wall's group is left in it.
func (h *Host) Close() {
	if h == nil {
		return
	}
	for _, walls := range h.sup.Where {
		_ = unix.Rmdir(walls)
	}
}

// mount is one line of mountinfo.
type mount struct{ root, point, fstype, super string }

func readMounts(path string) ([]mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mount-point options [optional...] - fstype source super-options
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 || (b[0] != "cgroup" && b[0] != "cgroup2") {
			continue
		}
		out = append(out, mount{root: mountinfo.Unescape(a[3]), point: mountinfo.Unescape(a[4]), fstype: b[0], super: b[2]})
	}
	return out, sc.Err()
}

// readSelf maps each controller of /proc/self/cgroup ("" for v2) to this
// process's cgroup there.
func readSelf(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading this process's cgroups: %w", err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// within returns this process's cgroup path p as a folder of mount m, or
// false where m does not show it (a mount of another part of the tree).
func within(m mount, p string) (string, bool) {
	if p == "" {
		return "", false
	}
	rel := p
	if m.root != "/" {
		if p != m.root && !strings.HasPrefix(p, m.root+"/") {
			return "", false
		}
		rel = strings.TrimPrefix(p, m.root)
	}
	dir := filepath.Join(m.point, rel)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", false
	}
	return dir, true
}

// v2Dir returns this process's cgroup v2 folder (the mount at
// /sys/fs/cgroup first).
func v2Dir(mounts []mount, self map[string]string) (string, bool) {
	p, ok := self[""]
	if !ok {
		return "", false
	}
	var best string
	for _, m := range mounts {
		if m.fstype != "cgroup2" {
			continue
		}
		if dir, ok := within(m, p); ok && (best == "" || m.point == "/sys/fs/cgroup") {
			best = dir
		}
	}
	return best, best != ""
}

// v1Dirs maps each v1 controller toybox uses to this process's folder in
// its hierarchy.
func v1Dirs(mounts []mount, self map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range mounts {
		if m.fstype != "cgroup" {
			continue
		}
		opts := strings.Split(m.super, ",")
		for _, c := range []string{"memory", "cpu", "cpuacct", "pids"} {
			if _, done := out[c]; done || !slices.Contains(opts, c) {
				continue
			}
			if dir, ok := within(m, self[c]); ok {
				out[c] = dir
			}
		}
	}
	return out
}

func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readFields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// readKey returns the value of key in a "key value" file (0 if absent).
func readKey(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := keyIn(string(b), key)
	return v
}

func keyIn(s, key string) (int64, bool) {
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

func plus(cs []string) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = "+" + c
	}
	return strings.Join(out, " ")
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// swapTotal returns the host's swap in kB. A variable so a test can turn
// swap on and off: swapon(8) changes the whole host, and other tests'
// walls share it.
var swapTotal = meminfoSwap

// meminfoSwap returns the host's swap in kB (/proc/meminfo).
func meminfoSwap() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SwapTotal:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
