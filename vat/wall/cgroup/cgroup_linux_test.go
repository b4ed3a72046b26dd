package cgroup

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"toybox/tests/testenv"
)

func open(t *testing.T, version int) *Host {
	t.Helper()
	rnd := make([]byte, 6)
	_, _ = rand.Read(rnd)
	h := Open(Config{Name: "toybox-test-" + hex.EncodeToString(rnd), Version: version})
	t.Cleanup(h.Close)
	if h.Support().Version != version {
		testenv.Unavailable(t, "no cgroup v"+strconv.Itoa(version)+" here: "+h.Support().Missing[Memory])
	}
	return h
}

// sleeper starts a process that lives until it is killed.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	c := exec.Command("sleep", "600")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	return c
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// killed reports whether c ended by SIGKILL.
func killed(c *exec.Cmd) bool {
	err := c.Wait()
	ee, ok := errors.AsType[*exec.ExitError](err)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// TestV1 makes a wall's groups in this host's v1 hierarchies (memory, cpu,
// cpuacct, pids: this test machine mounts them so), moves a process in,
// and removes them, killing it.
func TestV1(t *testing.T) {
	h := open(t, 1)
	for _, k := range []string{Memory, CPU, Tasks} {
		if !h.Support().Has(k) {
			t.Fatalf("v1 here, but no %s limit: %s", k, h.Support().Missing[k])
		}
	}
	g, err := h.New("alice", Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Tasks: 100})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"memory.limit_in_bytes": strconv.Itoa(64 << 20),
		"cpu.cfs_quota_us":      "50000",
		"cpu.cfs_period_us":     "100000",
		"pids.max":              "100",
	}
	if h.swap {
		want["memory.memsw.limit_in_bytes"] = strconv.Itoa(64 << 20)
	}
	found := map[string]bool{}
	for _, d := range g.Dirs() {
		for f, v := range want {
			if p := filepath.Join(d, f); exists(p) {
				found[f] = true
				if got := read(t, p); got != v {
					t.Errorf("%s = %s; want %s", p, got, v)
				}
			}
		}
	}
	for f := range want {
		if !found[f] {
			t.Errorf("no %s in %v", f, g.Dirs())
		}
	}
	c := sleeper(t)
	if err := g.Add(c.Process.Pid); err != nil {
		t.Fatal(err)
	}
	self := read(t, "/proc/"+strconv.Itoa(c.Process.Pid)+"/cgroup")
	for _, c := range []string{"memory", "cpu", "pids"} {
		if !strings.Contains(self+"\n", ":"+c+":") || !strings.Contains(self+"\n", "/"+filepath.Base(h.v1[c])+"/vat-alice\n") {
			t.Errorf("the process's cgroups do not name the wall's %s group:\n%s", c, self)
		}
	}
	if _, err := g.CPUTime(); err != nil {
		t.Errorf("CPUTime: %v", err)
	}
	if n := g.OOMKills(); n != 0 {
		t.Errorf("OOMKills = %d; want 0", n)
	}
	dirs := g.Dirs()
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if !killed(c) {
		t.Error("the process in the group lived on after Remove")
	}
	for _, d := range dirs {
		if exists(d) {
			t.Errorf("%s is still there", d)
		}
	}
}

// TestV1SharedHierarchy: most cgroup v1 hosts mount cpu and cpuacct as
// one hierarchy (/sys/fs/cgroup/cpu,cpuacct). New made the wall's group
// there once for cpu, writing its CPU cap, then again for cpuacct: it
// found the folder there, took it for a leftover, removed it and made it
// anew, without the cap. Limits() said the cap held, and so did the
// vat's status; the wall ran with no CPU limit. Each hierarchy holds one
// folder of the group, with every limit of its controllers.
//
// The test machine mounts them apart, so the mount table here says the
// cpu hierarchy holds cpuacct too: one folder for both, as such a host
// has (its cpuacct files are missing, so CPU time is not read).
func TestV1SharedHierarchy(t *testing.T) {
	open(t, 1) // a v1 host, or skip
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		switch {
		case strings.HasSuffix(l, " - cgroup cgroup rw,cpuacct"):
			continue // folded into cpu's, below
		case strings.HasSuffix(l, " - cgroup cgroup rw,cpu"):
			l += ",cpuacct"
		}
		lines = append(lines, l)
	}
	mi := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(mi, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rnd := make([]byte, 6)
	_, _ = rand.Read(rnd)
	h := Open(Config{Name: "toybox-test-" + hex.EncodeToString(rnd), Version: 1, MountInfo: mi})
	t.Cleanup(h.Close)
	if h.v1["cpu"] == "" || h.v1["cpu"] != h.v1["cpuacct"] {
		testenv.Unavailable(t, "no cpu hierarchy to share with cpuacct here")
	}
	g, err := h.New("carol", Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Tasks: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Remove() })
	if got := g.Limits().CPUs; got != 0.5 {
		t.Errorf("Limits().CPUs = %g; want 0.5", got)
	}
	cpu := filepath.Join(h.v1["cpu"], "vat-carol")
	if got := read(t, filepath.Join(cpu, "cpu.cfs_quota_us")); got != "50000" {
		t.Errorf("%s/cpu.cfs_quota_us = %s, while Limits() says %g CPUs; want 50000", cpu, got, g.Limits().CPUs)
	}
	seen := map[string]bool{}
	for _, d := range g.Dirs() {
		if seen[d] {
			t.Errorf("Dirs() names %s twice: %v", d, g.Dirs())
		}
		seen[d] = true
	}
	c := sleeper(t)
	if err := g.Add(c.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if !killed(c) {
		t.Error("the process in the group lived on after Remove")
	}
}

// TestV2 makes a wall's group in this host's cgroup v2 hierarchy. On the
// test machine (a v1/v2 hybrid) it offers none of memory, cpu and pids: the
// group is made, holds its process and goes (cgroup.kill), and Support says
// each limit is missing, and why.
func TestV2(t *testing.T) {
	h := open(t, 2)
	sup := h.Support()
	for _, k := range Kinds {
		if !sup.Has(k) && !strings.Contains(sup.Missing[k], "fix:") && !strings.Contains(sup.Missing[k], "swap") {
			t.Errorf("missing %s without a fix: %q", k, sup.Missing[k])
		}
	}
	g, err := h.New("bob", Limits{MemoryBytes: 64 << 20, CPUs: 1, Tasks: 100})
	if err != nil {
		t.Fatal(err)
	}
	// Only what the host enforces is claimed.
	got := g.Limits()
	if (got.MemoryBytes != 0) != sup.Has(Memory) || (got.CPUs != 0) != sup.Has(CPU) || (got.Tasks != 0) != sup.Has(Tasks) {
		t.Errorf("Limits() = %+v under %+v", got, sup)
	}
	c := sleeper(t)
	if err := g.Add(c.Process.Pid); err != nil {
		t.Fatal(err)
	}
	self := read(t, "/proc/"+strconv.Itoa(c.Process.Pid)+"/cgroup")
	if !strings.Contains(self, "0::/") || !strings.Contains(self, filepath.Base(h.v2)+"/vat-bob") {
		t.Errorf("the process's cgroups do not name the wall's group:\n%s", self)
	}
	if _, err := g.CPUTime(); err != nil {
		t.Errorf("CPUTime: %v", err)
	}
	dir := g.Dirs()[0]
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if !killed(c) {
		t.Error("the process in the group lived on after Remove")
	}
	if exists(dir) {
		t.Errorf("%s is still there", dir)
	}
}

// TestSweep: groups a killed supervisor left (a process still in one) are
// ended and removed by the next one's Sweep, and New replaces a group of
// the same name.
func TestSweep(t *testing.T) {
	for _, v := range []int{1, 2} {
		t.Run("v"+strconv.Itoa(v), func(t *testing.T) {
			h := open(t, v)
			// "tasks": a vat id that is also the name of a v1 cgroup file.
			g, err := h.New("tasks", Limits{Tasks: 10})
			if err != nil {
				t.Fatal(err)
			}
			c := sleeper(t)
			if err := g.Add(c.Process.Pid); err != nil {
				t.Fatal(err)
			}
			// The same name again (a wall started while the old one's
			// group is there): the old one's process goes.
			g2, err := h.New("tasks", Limits{Tasks: 10})
			if err != nil {
				t.Fatal(err)
			}
			if !killed(c) {
				t.Error("the leftover group's process lived on")
			}
			c2 := sleeper(t)
			if err := g2.Add(c2.Process.Pid); err != nil {
				t.Fatal(err)
			}
			next := Open(Config{Name: filepath.Base(h.sup.Where[0]), Version: v})
			n, err := next.Sweep()
			if err != nil || n != len(g2.Dirs()) {
				t.Errorf("Sweep = %d, %v; want %d", n, err, len(g2.Dirs()))
			}
			if !killed(c2) {
				t.Error("Sweep left the group's process running")
			}
			for _, d := range g2.Dirs() {
				if exists(d) {
					t.Errorf("%s is still there", d)
				}
			}
		})
	}
}

// TestFind: which folders Open uses, from the mount table and this
// process's cgroups, for the layouts hosts have.
func TestFind(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"v2/system.slice/toybox.service", "memory/process_api/x", "cpu", "cpuacct", "pids", "unified", "ctr/sub"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	line := func(mroot, point, fstype, super string) string {
		return "30 20 0:26 " + mroot + " " + filepath.Join(root, point) + " rw,nosuid - " + fstype + " cgroup " + super
	}
	tests := []struct {
		name, mounts, self string
		v2                 string
		v1                 map[string]string
	}{
		{
			name:   "systemd, cgroup v2 only",
			mounts: line("/", "v2", "cgroup2", "rw,nsdelegate"),
			self:   "0::/system.slice/toybox.service",
			v2:     "v2/system.slice/toybox.service",
			v1:     map[string]string{},
		},
		{
			name: "hybrid (this test machine)",
			mounts: strings.Join([]string{
				line("/", "memory", "cgroup", "rw,memory"), line("/", "cpu", "cgroup", "rw,cpu"),
				line("/", "cpuacct", "cgroup", "rw,cpuacct"), line("/", "pids", "cgroup", "rw,pids"),
				line("/", "unified", "cgroup2", "rw"),
			}, "\n"),
			self: "8:pids:/\n4:memory:/process_api/x\n2:cpuacct:/\n1:cpu:/\n0::/",
			v2:   "unified",
			v1:   map[string]string{"memory": "memory/process_api/x", "cpu": "cpu", "cpuacct": "cpuacct", "pids": "pids"},
		},
		{
			name:   "a container's mount of part of the tree",
			mounts: line("/docker/abc", "ctr", "cgroup2", "rw"),
			self:   "0::/docker/abc/sub",
			v2:     "ctr/sub",
			v1:     map[string]string{},
		},
		{
			name:   "a cgroup the mount does not show",
			mounts: line("/docker/abc", "ctr", "cgroup2", "rw"),
			self:   "0::/elsewhere",
			v1:     map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mi := filepath.Join(t.TempDir(), "mountinfo")
			sf := filepath.Join(t.TempDir(), "cgroup")
			if err := os.WriteFile(mi, []byte(tt.mounts+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(sf, []byte(tt.self+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			mounts, err := readMounts(mi)
			if err != nil {
				t.Fatal(err)
			}
			self, err := readSelf(sf)
			if err != nil {
				t.Fatal(err)
			}
			v2, ok := v2Dir(mounts, self)
			if want := tt.v2 != ""; ok != want || ok && v2 != filepath.Join(root, tt.v2) {
				t.Errorf("v2Dir = %q, %v; want %q", v2, ok, tt.v2)
			}
			v1 := v1Dirs(mounts, self)
			if len(v1) != len(tt.v1) {
				t.Errorf("v1Dirs = %v; want %v", v1, tt.v1)
			}
			for c, d := range tt.v1 {
				if v1[c] != filepath.Join(root, d) {
					t.Errorf("v1Dirs[%s] = %q; want %q", c, v1[c], filepath.Join(root, d))
				}
			}
		})
	}
}

// BenchmarkGroup is what a wall's group costs a spawn: made with its
// limits, a process moved in, removed.
func BenchmarkGroup(b *testing.B) {
	rnd := make([]byte, 6)
	_, _ = rand.Read(rnd)
	h := Open(Config{Name: "toybox-bench-" + hex.EncodeToString(rnd)})
	defer h.Close()
	if !h.Enabled() {
		b.Skip("no cgroups here")
	}
	c := exec.Command("sleep", "600")
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	home := Open(Config{Name: "toybox-bench-home-" + hex.EncodeToString(rnd)})
	defer home.Close()
	back, err := home.New("home", Limits{})
	if err != nil {
		b.Fatal(err)
	}
	defer back.Remove()
	for b.Loop() {
		g, err := h.New("bench", Limits{MemoryBytes: 512 << 20, CPUs: 1, Tasks: 1024})
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Add(c.Process.Pid); err != nil {
			b.Fatal(err)
		}
		if err := back.Add(c.Process.Pid); err != nil { // out again, so that Remove does not kill it
			b.Fatal(err)
		}
		if err := g.Remove(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFence: a group that keeps a reserve of tasks has an app folder whose
// pids.max is the wall's less the reserve; its first process (Add) goes
// into it, and Home's descriptor moves a process out, into the entry's.
func TestFence(t *testing.T) {
	var why []string
	for _, v := range []int{1, 2} {
		h := Open(Config{Name: "toybox-test-fence-" + strconv.Itoa(os.Getpid()), Version: v})
		if !h.Support().Has(Tasks) {
			// A hybrid host (this test machine) gives its v2 hierarchy no
			// controller; the other version runs.
			why = append(why, "v"+strconv.Itoa(v)+": "+h.Support().Missing[Tasks])
			h.Close()
			continue
		}
		h.Close()
		t.Run("v"+strconv.Itoa(v), func(t *testing.T) {
			h := open(t, v)
			g, err := h.New("fenced", Limits{Tasks: 100, TaskReserve: 30})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Remove()
			if got := g.Limits(); got.Tasks != 100 || got.TaskReserve != 30 {
				t.Errorf("Limits() = %+v; want 100 tasks, 30 kept", got)
			}
			if got := read(t, filepath.Join(g.app, "pids.max")); got != "70" {
				t.Errorf("the app's pids.max = %s; want 70", got)
			}
			c := sleeper(t)
			pid := strconv.Itoa(c.Process.Pid)
			if err := g.Add(c.Process.Pid); err != nil {
				t.Fatal(err)
			}
			if got := read(t, filepath.Join(g.app, "cgroup.procs")); got != pid {
				t.Errorf("the app's cgroup.procs = %q; want %s", got, pid)
			}
			home, err := g.Home()
			if err != nil {
				t.Fatal(err)
			}
			defer home.Close()
			if _, err := home.WriteString(pid); err != nil {
				t.Fatal(err)
			}
			if got := read(t, filepath.Join(g.app, "cgroup.procs")); got != "" {
				t.Errorf("the app's cgroup.procs = %q after the move out; want none", got)
			}
			if got := read(t, filepath.Join(g.home, "cgroup.procs")); got != pid {
				t.Errorf("the entry's cgroup.procs = %q after the move; want %s", got, pid)
			}
			// Half at most: a reserve past it leaves the app half.
			g2, err := h.New("halved", Limits{Tasks: 20, TaskReserve: 32})
			if err != nil {
				t.Fatal(err)
			}
			defer g2.Remove()
			if got := read(t, filepath.Join(g2.app, "pids.max")); got != "10" {
				t.Errorf("the app's pids.max = %s under 20 tasks; want 10", got)
			}
		})
	}
	if len(why) == 2 {
		testenv.Unavailable(t, "no cgroup here holds tasks: "+strings.Join(why, "; "))
	}
}

// fakeV2 lays out a cgroup v2 folder that offers memory, cpu and pids
// but, as a kernel without swap accounting, no memory.swap.max, and
// returns the mountinfo and cgroup files that show this process in it.
func fakeV2(t *testing.T) (mountInfo, self string) {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "cgroup")
	walls := filepath.Join(root, "walls")
	if err := os.MkdirAll(walls, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, v := range map[string]string{
		filepath.Join(root, "cgroup.controllers"):      "memory cpu pids\n",
		filepath.Join(root, "cgroup.subtree_control"):  "memory cpu pids\n",
		filepath.Join(walls, "cgroup.subtree_control"): "",
		filepath.Join(dir, "mountinfo"):                "30 25 0:26 / " + root + " rw,nosuid - cgroup2 cgroup2 rw\n",
		filepath.Join(dir, "self"):                     "0::/\n",
	} {
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "mountinfo"), filepath.Join(dir, "self")
}

// TestSwapJudgedWhenAsked: on a kernel that does not account swap, a
// host without swap when toybox opened its cgroups may turn swap on
// later (swapon). From then on a wall may go past its memory limit into
// swap, so Support must stop claiming the swap limit, and claim it again
// once swap is off.
func TestSwapJudgedWhenAsked(t *testing.T) {
	mi, self := fakeV2(t)
	swap := int64(0)
	old := swapTotal
	swapTotal = func() int64 { return swap }
	t.Cleanup(func() { swapTotal = old })
	h := Open(Config{Name: "walls", Version: 2, MountInfo: mi, Self: self})
	if v := h.Support().Version; v != 2 {
		t.Fatalf("Support().Version = %d (%v); want 2", v, h.Support().Missing)
	}
	if !h.Support().Has(Memory) || !h.Support().Has(Swap) {
		t.Fatalf("no swap at Open: Support().Missing = %v; want memory and swap enforced", h.Support().Missing)
	}
	swap = 1 << 20 // swapon
	if h.Support().Has(Swap) {
		t.Errorf("swap on after Open, not accounted: Support().Has(Swap) = true; want false (a wall may go past its memory limit into swap)")
	}
	if why := h.Support().Missing[Swap]; !strings.Contains(why, "swap") || !strings.Contains(why, "fix:") {
		t.Errorf("Support().Missing[Swap] = %q; want why and a fix", why)
	}
	swap = 0 // swapoff
	if !h.Support().Has(Swap) {
		t.Errorf("swap off again: Support().Missing[Swap] = %q; want swap enforced", h.Support().Missing[Swap])
	}
}
