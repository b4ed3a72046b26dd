package wall

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// seccompGate is the seccomp program a wall's bubblewrap reads (--seccomp).
// bubblewrap reads it to EOF right after its block is released.
// The supervisor fills and closes the pipe only then (Start, after limit).
// A supervisor that dies before that leaves the program empty or cut short.
// The kernel refuses a program cut anywhere (guarded).
// bubblewrap then ends with "Unable to set up system call filtering" or
// "Invalid seccomp data" before it runs anything of the vat.
type seccompGate struct {
	w    *os.File
	prog []byte
}

// seccompGate makes the gate of prog and returns bwrap's option naming its
// read end. The table owns the gate from now on (fdTable.gate).
func (t *fdTable) seccompGate(prog []byte) ([]string, error) {
	if t.gate != nil {
		return nil, fmt.Errorf("%w: a second seccomp program", ErrSpec)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("the seccomp program's pipe: %w", err)
	}
	g := &seccompGate{w: w, prog: guarded(prog)}
	// Room for the whole program: the write once the block is released never
	// waits on bubblewrap.
	if len(g.prog) > 64<<10 {
		if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, len(g.prog)); err != nil {
			_ = r.Close()
			_ = w.Close()
			return nil, fmt.Errorf("sizing the seccomp program's pipe: %w", os.NewSyscallError("fcntl F_SETPIPE_SZ", err))
		}
	}
	t.gate = g
	return t.pass(r, "--seccomp"), nil
}

// open writes the program and closes the pipe: bubblewrap may go on.
func (g *seccompGate) open() error {
	if g == nil {
		return nil
	}
	_, err := g.w.Write(g.prog)
	if cerr := g.w.Close(); err == nil {
		err = cerr
	}
	g.w = nil
	if err != nil {
		return fmt.Errorf("handing the wall its seccomp program: %w", err)
	}
	return nil
}

// close gives up the gate unopened: bubblewrap reads an empty program.
func (g *seccompGate) close() {
	if g != nil && g.w != nil {
		_ = g.w.Close()
		g.w = nil
	}
}

// Classic BPF, as seccomp takes it (struct sock_filter: code, jt, jf, k).
const (
	bpfJEQK  = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfJA    = 0x05 // BPF_JMP | BPF_JA
	bpfRETK  = 0x06 // BPF_RET | BPF_K
	retAllow = 0x7fff0000
)

func insn(code uint16, jt, jf uint8, k uint32) []byte {
	b := make([]byte, 8)
	binary.NativeEndian.PutUint16(b[0:], code)
	b[2], b[3] = jt, jf
	binary.NativeEndian.PutUint32(b[4:], k)
	return b
}

// allowAll is the program of a wall without a filter: it allows every
// system call.
var allowAll = insn(bpfRETK, 0, 0, retAllow)

// guarded returns prog with two instructions first that make every
// prefix of the result a program the kernel refuses: a jump, never taken,
// to the last instruction (the kernel checks that every jump lands inside
// the program). A never equals 0xffffffff on entry (it starts at 0), so
// the first instruction skips the jump and prog runs as it is (its own
// jumps are relative).
func guarded(prog []byte) []byte {
	n := uint32(len(prog) / 8)
	out := append(insn(bpfJEQK, 0, 1, 0xffffffff), insn(bpfJA, 0, 0, n-1)...)
	return append(out, prog...)
}
