//go:build !linux

package bench

import (
	"runtime"
	"syscall"
	"time"
)

// ReadMachine describes this machine.
func ReadMachine() Machine {
	return Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Kernel: runtime.GOOS}
}

// SelfCPU is unsupported off Linux.
func SelfCPU() time.Duration { return 0 }

// ProcCPU is unsupported off Linux.
func ProcCPU(int) (time.Duration, error) { return 0, ErrUnsupported }

// Mem is a process's memory, in bytes.
type Mem struct {
	RSS int64
	HWM int64
	PSS int64
}

// ProcMem is unsupported off Linux.
func ProcMem(int) (Mem, error) { return Mem{}, ErrUnsupported }

// Proc is one process in the tree.
type Proc struct {
	Pid, PPid int
	Comm      string
}

// Descendants is unsupported off Linux.
func Descendants(int) ([]Proc, error) { return nil, ErrUnsupported }

// RaiseNoFile is unsupported off Linux.
func RaiseNoFile(uint64) (uint64, error) { return 0, ErrUnsupported }

// killedWithParent returns empty attributes: only Linux has a
// parent-death signal.
func killedWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
