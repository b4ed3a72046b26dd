package bench

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// TestProcReaders reads a real child's place in the tree, memory and CPU.
func TestProcReaders(t *testing.T) {
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	testenv.WaitFor(t, 5*time.Second, func() error {
		cpu, err := ProcCPU(cmd.Process.Pid)
		if err != nil {
			t.Fatalf("ProcCPU(child) = %v", err)
		}
		if cpu <= 10*time.Millisecond {
			return fmt.Errorf("ProcCPU(busy child) = %v; want more than 10ms", cpu)
		}
		return nil
	})
	m, err := ProcMem(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.PSS <= 0 || m.PSS > m.RSS {
		t.Errorf("ProcMem(child) = %+v; want 0 < PSS <= RSS", m)
	}
	kids, err := Descendants(selfPid())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, k := range kids {
		if k.Pid == cmd.Process.Pid && k.Comm == "sh" {
			found = true
		}
	}
	if !found {
		t.Errorf("Descendants(self) = %v; want the sh child %d in it", kids, cmd.Process.Pid)
	}
	if SelfCPU() <= 0 {
		t.Errorf("SelfCPU() = %v; want > 0", SelfCPU())
	}
}

func selfPid() int { return os.Getpid() }
