package wall

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// procChildren lists the live children of pid (of all its threads).
func procChildren(pid int) []int {
	var out []int
	lists, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, l := range lists {
		b, _ := os.ReadFile(l)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil && procField(n, "State:") != "" && !strings.HasPrefix(procField(n, "State:"), "Z") {
				out = append(out, n)
			}
		}
	}
	return out
}

// procField is a field of /proc/pid/status ("" if none).
func procField(pid int, key string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// wallBwrap waits for a wall's bwrap among pid's children (one run with
// --args, not the preflight's) and returns it.
func wallBwrap(t *testing.T, pid int) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		for _, c := range procChildren(pid) {
			cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
			if procField(c, "Name:") == "bwrap" && strings.Contains(string(cl), "--args") {
				return c
			}
		}
	}
	t.Fatal("no wall's bwrap appeared")
	return 0
}

// tasksLimit is pid's RLIMIT_NPROC line in /proc/pid/limits.
func tasksLimit(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Max processes") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return ""
}

// supervisorEnv names what a re-executed test binary does as a supervisor
// of its own (see TestMain and supervise), for the tests that kill one or
// change its limits for good.
const supervisorEnv = "WALL_SUPERVISOR"

// supervise is such a supervisor: it starts one wall of the victim from
// the fixture below $WALL_SUP_ROOT, its output to $WALL_SUP_OUT.
//   - "block": a limit of 100 tasks; the victim says its own ("nproc"); it
//     waits for the wall (TestSandboxEndsWhenSupervisorDiesAtTheBlock kills it).
//   - "refused": its own hard task limit lowered to 100 first, a wall of
//     200 asked; prints START-ERROR and Start's error, or fails when the
//     wall started (TestRefusedLimitIsNoStart).
func supervise(mode string) int {
	limit, victimMode := 100, "nproc"
	if mode == "refused" {
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: 100, Max: 100}); err != nil {
			fmt.Println("setrlimit:", err)
			return 1
		}
		limit, victimMode = 200, "hello"
	}
	f, err := makeFixture(os.Getenv("WALL_SUP_ROOT"), mode, os.Getenv("WALL_SUP_ENTRY"), os.Getenv("WALL_SUP_BIN"))
	if err == nil {
		err = f.makeCaps()
	}
	var out *os.File
	if err == nil {
		out, err = os.OpenFile(os.Getenv("WALL_SUP_OUT"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	}
	if err != nil {
		fmt.Println("fixture:", err)
		return 1
	}
	f.spec.MaxTasks = limit
	f.spec.Env = map[string]string{victimEnv: victimMode}
	f.spec.Stdout, f.spec.Stderr = out, out
	p, err := Start(context.Background(), f.spec, nil)
	switch {
	case err != nil:
		fmt.Printf("START-ERROR %v\n", err)
		return 0
	case mode == "refused":
		_ = p.Stop(time.Second)
		fmt.Println("Start = nil: the wall started with its task limit refused")
		return 1
	}
	_ = p.Wait()
	return 0
}

// superviseCmd is the command of a supervisor in mode (supervise), and the
// file its wall's output goes to. As root it runs without CAP_SYS_RESOURCE
// (setpriv drops it from the bounding set), as a supervisor under systemd
// or in a container does: the kernel would let it raise any limit.
func superviseCmd(t *testing.T, ctx context.Context, mode string) (*exec.Cmd, string) {
	t.Helper()
	entry, victimBin := binaries(t)
	out := filepath.Join(t.TempDir(), "out")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{self}
	if os.Geteuid() == 0 {
		argv = append([]string{"setpriv", "--bounding-set=-sys_resource", "--"}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), supervisorEnv+"="+mode, "WALL_SUP_ROOT="+t.TempDir(), "WALL_SUP_ENTRY="+entry, "WALL_SUP_BIN="+victimBin, "WALL_SUP_OUT="+out)
	return cmd, out
}

// TestSandboxEndsWhenSupervisorDiesAtTheBlock: bubblewrap goes on at its
// block's EOF as at a byte, and the sandbox's process asks for its parent's
// death only after the block. A supervisor that died before setting the
// task limit (crash, OOM killer, kill -9) closed the block's only write end:
// the vat ran, reparented to init, with the host's task limit. Then the
// sandbox held a writer of its own block and waited there, for good, until
// a next supervisor's EndLeftovers (5 of 7 kills of toybox serve during
// wall setup left one). Now it goes on at EOF to a seccomp program nobody
// wrote, which the kernel refuses: it ends on its own, and the vat never
// ran.
func TestSandboxEndsWhenSupervisorDiesAtTheBlock(t *testing.T) {
	testenvRequireBwrap(t)
	for try := 0; ; try++ {
		sup, outPath := superviseCmd(t, context.Background(), "block")
		if err := sup.Start(); err != nil {
			t.Fatal(err)
		}
		// Freeze the supervisor once bwrap runs: it cannot set the limit;
		// bwrap makes the sandbox, which comes to the block.
		bw := wallBwrap(t, sup.Process.Pid)
		_ = sup.Process.Signal(syscall.SIGSTOP)
		var sandbox int
		for deadline := time.Now().Add(10 * time.Second); sandbox == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if c := procChildren(bw); len(c) > 0 {
				sandbox = c[0]
			}
		}
		time.Sleep(500 * time.Millisecond) // its mounts made: at the block
		limited := strings.HasPrefix(tasksLimit(sandbox), "Max processes 100 ")
		// kill -9 of the frozen supervisor.
		_ = sup.Process.Kill()
		_ = sup.Wait()
		if sandbox == 0 {
			t.Fatal("bwrap made no sandbox")
		}
		t.Cleanup(func() { _ = syscall.Kill(sandbox, syscall.SIGKILL) })
		if limited {
			// The supervisor set the limit before it was frozen: again.
			if try < 5 {
				continue
			}
			t.Fatal("the supervisor always set the limit before it could be frozen: the case was not reached")
		}
		gone := false
		for deadline := time.Now().Add(5 * time.Second); !gone && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			st := procField(sandbox, "State:")
			gone = st == "" || strings.HasPrefix(st, "Z")
		}
		b, _ := os.ReadFile(outPath)
		if strings.Contains(string(b), "NPROC") {
			t.Fatalf("the vat ran with no task limit once its supervisor died at the block (%s): %q", tasksLimit(sandbox), b)
		}
		if !gone {
			t.Fatalf("the sandbox's process (%s) still waits 5 s after its supervisor died at the block; out %q", procField(sandbox, "Name:"), b)
		}
		return
	}
}

// TestStartCancelledAtTheBlock: a start whose context ended once bwrap had
// made the sandbox's process killed bwrap alone; that process, waiting at the
// block (or for bwrap's go-ahead), held bwrap's stderr, so Start waited for
// good (and with it the vat's stop, removal or the supervisor's shutdown).
// Now the process group goes: Start returns and nothing of the wall is left.
func TestStartCancelledAtTheBlock(t *testing.T) {
	cancelled := 0
	for round := 0; round < 8; round++ {
		f := newFixture(t, "cancel")
		f.caps(t)
		f.spec.Env = map[string]string{victimEnv: "nproc"}
		before := map[int]bool{}
		for _, c := range procChildren(os.Getpid()) {
			before[c] = true
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		sandbox := make(chan int, 1)
		go func() {
			// The wall's bwrap, then its child: end the start's context.
			bw := 0
			for {
				select {
				case <-done:
					return
				default:
				}
				if bw == 0 {
					for _, c := range procChildren(os.Getpid()) {
						cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
						if !before[c] && procField(c, "Name:") == "bwrap" && strings.Contains(string(cl), "--args") {
							bw = c
						}
					}
				} else if c := procChildren(bw); len(c) > 0 {
					// Said before the cancel: Start may return at once.
					sandbox <- c[0]
					cancel()
					return
				}
			}
		}()
		res := make(chan error, 1)
		go func() {
			p, err := Start(ctx, f.spec, nil)
			if err == nil {
				_ = p.Stop(0)
			}
			res <- err
		}()
		var pid int
		select {
		case err := <-res:
			close(done)
			select {
			case pid = <-sandbox:
			default:
			}
			if err != nil {
				if pid == 0 {
					t.Fatalf("round %d: Start: %v", round, err)
				}
				cancelled++
			}
		case <-time.After(15 * time.Second):
			close(done)
			select {
			case pid = <-sandbox:
			default:
			}
			if pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("round %d: Start did not return 15s after it began; its sandbox's process %d (%s) waits, reparented to %s", round, pid, procField(pid, "Name:"), procField(pid, "PPid:"))
		}
		cancel()
		time.Sleep(100 * time.Millisecond)
		if st := procField(pid, "State:"); pid > 0 && st != "" && !strings.HasPrefix(st, "Z") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("round %d: the sandbox's process %d (%s) outlived its start", round, pid, procField(pid, "Name:"))
		}
	}
	t.Logf("%d of 8 starts ended by their context", cancelled)
	if cancelled == 0 {
		// Every start got through first: the case was not reached, and a
		// pass would say nothing.
		t.Fatal("no start was ended by its context once bwrap had made the sandbox's process")
	}
}

// TestBlockOfAGoneSandbox: a sandbox that fails before its block (a bind
// bubblewrap cannot make) ends, and bubblewrap with it. If that happens
// between its limit and the block's byte, the byte finds no reader: Start
// took that EPIPE for a failure of its own ("releasing the wall's block: ...
// broken pipe") where a gone sandbox (ESRCH) lets the wall end with
// bubblewrap's reason and its hint (TestEntryUnreachable).
func TestBlockOfAGoneSandbox(t *testing.T) {
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	d, err := newBlock()
	if err != nil {
		t.Fatal(err)
	}
	defer d.w.Close()
	_ = d.r.Close() // the sandbox and bubblewrap: gone
	err = limit(sleep.Process.Pid, &Plan{MaxTasks: 4096, HostUID: -1, HostGID: -1}, nil, d.w)
	if err == nil || !sandboxGone(err) {
		t.Errorf("limit at a block with no reader = %v; want an error that says the sandbox is gone", err)
	}
}

// TestRefusedLimitIsNoStart: a task limit the kernel refuses (here: above
// the hard limit bubblewrap inherited, without CAP_SYS_RESOURCE) leaves the
// vat off with the reason; nothing of the vat's runs.
func TestRefusedLimitIsNoStart(t *testing.T) {
	testenvRequireBwrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sup, outPath := superviseCmd(t, ctx, "refused")
	b, err := sup.CombinedOutput()
	if err != nil {
		t.Fatalf("the supervisor: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "START-ERROR") || !strings.Contains(string(b), "setting the wall's task limit (200): prlimit: operation not permitted") {
		t.Errorf("Start's error does not name the task limit:\n%s", b)
	}
	if out, _ := os.ReadFile(outPath); len(out) != 0 {
		t.Errorf("the vat wrote %q: it ran", out)
	}
}

// TestLimitOfAGoneSandbox: a sandbox gone before its limits are set (a
// bind bubblewrap could not make) has no /proc folder any more: the
// oom_score_adj write's ENOENT is the sandbox being gone, as prlimit's
// ESRCH is, not a failure of the wall's own (TestUnreachableBindSource
// failed so under load, the wall ending with that error instead of
// bubblewrap's refusal and its hint).
func TestLimitOfAGoneSandbox(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	d, err := newBlock()
	if err != nil {
		t.Fatal(err)
	}
	defer d.w.Close()
	defer d.r.Close()
	err = limit(gone.Process.Pid, &Plan{MaxTasks: 4096, HostUID: -1, HostGID: -1}, nil, d.w)
	if err == nil || !sandboxGone(err) {
		t.Errorf("limit of a gone sandbox = %v; want an error that says the sandbox is gone", err)
	}
}
