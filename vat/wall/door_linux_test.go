package wall

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestStartCancelledAtTheDoor: a start whose context ended once bwrap had
// made the sandbox's process killed bwrap alone; that process, waiting at the
// door (or for bwrap's go-ahead), held bwrap's stderr, so Start waited for
// good (and with it the vat's stop, removal or the supervisor's shutdown).
// Now the process group goes: Start returns and nothing of the wall is left.
func TestStartCancelledAtTheDoor(t *testing.T) {
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
					cancel()
					sandbox <- c[0]
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
}
