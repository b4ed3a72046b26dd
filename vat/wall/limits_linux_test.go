package wall

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"toybox/tests/testenv"
	"toybox/vat/wall/cgroup"
)

// cgroups opens this host's cgroups for a test's walls (a folder of the
// test's own), requiring that the host enforces kinds.
func cgroups(t *testing.T, kinds ...string) *cgroup.Host {
	t.Helper()
	rnd := make([]byte, 6)
	_, _ = rand.Read(rnd)
	h := cgroup.Open(cgroup.Config{Name: "toybox-test-" + hex.EncodeToString(rnd)})
	t.Cleanup(h.Close)
	sup := h.Support()
	for _, k := range kinds {
		if !sup.Has(k) {
			testenv.Unavailable(t, "this host enforces no "+k+" limit for walls: "+sup.Missing[k])
		}
	}
	return h
}

// TestAttackMemoryHog: a vat that allocates past its memory limit is
// killed by the kernel, and Wait says it ran out of memory (with the
// limit). Without the wall's cgroup it allocates all it asks for (the
// victim says BREACH) and exits 0.
func TestAttackMemoryHog(t *testing.T) {
	for _, shape := range []string{"no way out", "with the entry"} {
		t.Run(shape, func(t *testing.T) {
			f := newFixture(t, "hog")
			f.spec.Cgroups = cgroups(t, cgroup.Memory)
			f.spec.Limits = cgroup.Limits{MemoryBytes: 128 << 20}
			f.spec.Env = map[string]string{"VICTIM_ARG": "1024"}
			var out string
			var err error
			if shape == "with the entry" {
				f.spec.Net = Net{}
				ea, eb := socketpair(t)
				defer eb.Close()
				f.spec.EntryCap = ea
				out, err = f.runVictimNoVat(t, "eat", eb)
			} else {
				out, err = f.runVictim(t, "eat")
			}
			if !errors.Is(err, ErrOutOfMemory) {
				t.Fatalf("Wait = %v; want ErrOutOfMemory; output:\n%s", err, tail(out))
			}
			if !strings.Contains(err.Error(), "(128 MiB)") {
				t.Errorf("Wait = %v; want the limit named (128 MiB)", err)
			}
			if strings.Contains(out, "BREACH") {
				t.Errorf("the vat allocated past its limit:\n%s", tail(out))
			}
			ate := lines(out, "ATE ")
			if len(ate) == 0 {
				t.Fatalf("the vat allocated nothing before it was killed:\n%s", out)
			}
			if n, _ := strconv.Atoi(ate[len(ate)-1]); n > 128 {
				t.Errorf("the vat held %d MiB under a 128 MiB limit", n)
			}
		})
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}

// TestAttackForkBombCgroup: a fork bomb stops at the wall's pids.max, here
// below its RLIMIT_NPROC (which alone let it start about 256), and short of
// the tasks the entry keeps for itself (TaskReserve): the bomb holds all it
// could start, and the entry still answers a CONNECT on its proxy (a
// no-grant vat: refused with 403). Without the reserve in the cgroup the
// app took every task of the wall (49 processes beside the entry's 9
// threads, here), and an entry that then needed a thread died, and its
// wall with it.
func TestAttackForkBombCgroup(t *testing.T) {
	const tasks = 64
	f := newFixture(t, "bomber")
	f.spec.Cgroups = cgroups(t, cgroup.Tasks)
	f.spec.MaxTasks = 256
	f.spec.Limits = cgroup.Limits{Tasks: tasks}
	f.spec.Env = map[string]string{"VICTIM_ARG": "1024"}
	f.spec.Net = Net{}
	ea, eb := socketpair(t)
	defer eb.Close()
	f.spec.EntryCap = ea
	out, err := f.runVictimNoVat(t, "forkproxy", eb)
	if err != nil {
		t.Fatalf("Wait = %v (want the wall's pid 1 to live through it); output:\n%s", err, tail(out))
	}
	held(t, out)
	forked := lines(out, "FORKED ")
	if len(forked) != 1 {
		t.Fatalf("the bomb did not say how far it got:\n%s", tail(out))
	}
	n, _ := strconv.Atoi(forked[0])
	t.Logf("the bomb started %d processes", n)
	if n >= tasks-TaskReserve {
		t.Errorf("started %d processes in a wall whose app may hold %d tasks", n, tasks-TaskReserve)
	}
	if got := lines(out, "PROXY "); len(got) != 1 || !strings.HasPrefix(got[0], "HTTP/1.1 403") {
		t.Errorf("the entry's proxy answered %q under the bomb; want HTTP/1.1 403\n%s", got, tail(out))
	}
}

// TestAttackCPUSpinner: a vat spinning on every CPU is held to its cap, as
// the kernel's CPU accounting of its cgroup counts it. Without the cap it
// takes both cores of the test machine (about 2 CPU-seconds a second).
func TestAttackCPUSpinner(t *testing.T) {
	f := newFixture(t, "spinner")
	f.spec.Cgroups = cgroups(t, cgroup.CPU)
	f.spec.Limits = cgroup.Limits{CPUs: 0.2}
	p, _ := f.startVictim(t, "spin", false)
	defer p.Stop(0)
	if got := p.Limits().CPUs; got != 0.2 {
		t.Fatalf("Limits().CPUs = %v; want 0.2", got)
	}
	used0, err := p.group().CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	time.Sleep(3 * time.Second)
	used, err := p.group().CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	share := (used - used0).Seconds() / time.Since(began).Seconds()
	t.Logf("the spinner used %v of CPU in %v: %.2f CPUs", used-used0, time.Since(began), share)
	// The kernel may hand out one period's quota late: a period of slack.
	if share > 0.3 {
		t.Errorf("the spinner used %.2f CPUs under a cap of 0.2", share)
	}
}

// TestWallOOMScore: a wall's processes have oom_score_adj OOMScoreAdj, so
// the kernel kills a vat before the supervisor.
func TestWallOOMScore(t *testing.T) {
	f := newFixture(t, "oomscore")
	out, err := f.runVictim(t, "oomscore")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if got := lines(out, "OOMSCORE "); len(got) != 1 || got[0] != strconv.Itoa(OOMScoreAdj) {
		t.Errorf("oom_score_adj inside = %v; want %d\n%s", got, OOMScoreAdj, out)
	}
}

// TestWallCgroupGoes: a wall's cgroup is made before it starts, holds its
// processes, and is removed when it ends.
func TestWallCgroupGoes(t *testing.T) {
	f := newFixture(t, "grouped")
	h := cgroups(t, cgroup.Memory, cgroup.Tasks)
	f.spec.Cgroups = h
	f.spec.Limits = cgroup.Limits{MemoryBytes: 256 << 20}
	p, _ := f.startVictim(t, "sleep", false)
	dirs := p.group().Dirs()
	if len(dirs) == 0 {
		t.Fatal("the wall has no cgroup")
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil || !strings.Contains(string(b), strconv.Itoa(p.child)) {
			t.Errorf("%s/cgroup.procs = %q, %v; want the wall's pid 1 (%d)", d, b, err, p.child)
		}
	}
	if got := p.Limits(); got.MemoryBytes != 256<<20 || got.Tasks != MaxTasks {
		t.Errorf("Limits() = %+v; want 256 MiB and %d tasks", got, MaxTasks)
	}
	_ = p.Stop(time.Second)
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after the wall ended (%v)", d, err)
		}
	}
}

// TestWallWithoutCgroups: where the host gives the supervisor no cgroup
// (a service that is not root on a cgroup v1 host: found under systemd in
// tests/systemd), the wall still runs, and claims no limit.
func TestWallWithoutCgroups(t *testing.T) {
	f := newFixture(t, "nogroups")
	f.spec.Cgroups = cgroup.Open(cgroup.Config{Name: "toybox-test-none", MountInfo: filepath.Join(t.TempDir(), "no-mountinfo")})
	if f.spec.Cgroups.Enabled() {
		t.Fatal("a host with no mount table makes groups")
	}
	f.spec.Limits = cgroup.Limits{MemoryBytes: 64 << 20, CPUs: 1}
	p, _ := f.startVictim(t, "sleep", false)
	defer p.Stop(0)
	if got := p.Limits(); got != (cgroup.Limits{}) {
		t.Errorf("Limits() = %+v; want none", got)
	}
}
