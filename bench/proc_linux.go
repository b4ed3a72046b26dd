package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"toybox/vat/procstatus"
)

// ReadMachine describes this machine.
func ReadMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	return m
}

// SelfCPU returns the CPU time (user + system) this process has used.
func SelfCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcCPU returns the CPU time process pid's live threads have used, from
// /proc/<pid>/task/*/schedstat (nanoseconds on CPU), falling back to the
// clock ticks of /proc/<pid>/stat.
func ProcCPU(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err == nil && len(tasks) > 0 {
		var total int64
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue // the thread ended
			}
			f := strings.Fields(string(b))
			if len(f) < 1 {
				continue
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing %s: %w", t, err)
			}
			total += n
		}
		return time.Duration(total), nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command (which may hold spaces) start after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parsing /proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100), nil
}

// Mem is a process's memory, in bytes.
type Mem struct {
	RSS int64 // VmRSS
	HWM int64 // VmHWM: the most RSS has been
	PSS int64 // Pss from smaps_rollup (shared pages divided among sharers)
}

// ProcMem reads process pid's RSS and PSS.
func ProcMem(pid int) (Mem, error) {
	var m Mem
	st, err := procstatus.Read(pid)
	if err != nil {
		return m, err
	}
	m.RSS, m.HWM = kib(st["VmRSS"]), kib(st["VmHWM"])
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				m.PSS = kib(v)
			}
		}
	}
	return m, nil
}

func kib(v string) int64 {
	f := strings.Fields(v)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(f[0], 10, 64)
	return n << 10
}

// Proc is one process in the tree.
type Proc struct {
	Pid, PPid int
	Comm      string
}

// Descendants lists every process below pid (not pid itself).
func Descendants(pid int) ([]Proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]Proc{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if i < 0 || j < i {
			continue
		}
		f := strings.Fields(string(b[j+1:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], Proc{Pid: p, PPid: pp, Comm: string(b[i+1 : j])})
	}
	var out []Proc
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.Pid)
		}
	}
	return out, nil
}

// RaiseNoFile raises this process's RLIMIT_NOFILE (soft and hard) to at
// least want, or as high as it may; children inherit it. It returns the
// soft limit now in force. It uses syscall.Setrlimit, not x/sys/unix: only
// that one tells the Go runtime not to restore the original soft limit in
// the children it starts.
func RaiseNoFile(want uint64) (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, os.NewSyscallError("getrlimit", err)
	}
	if r.Max < want {
		nr := syscall.Rlimit{Cur: want, Max: want}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nr); err == nil {
			return want, nil
		}
	}
	r.Cur = max(r.Cur, min(want, r.Max))
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, os.NewSyscallError("setrlimit", err)
	}
	return r.Cur, nil
}

// killedWithParent returns process attributes that kill the child when
// the benchmark dies.
func killedWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
