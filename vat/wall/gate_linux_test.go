package wall

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"toybox/vat/wall/seccomp"
)

// attach asks the kernel's classic BPF checker (the one seccomp's filters
// pass too) about prog, as a socket filter on a throwaway socket.
func attach(t *testing.T, prog []byte) error {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	fp := unix.SockFprog{Len: uint16(len(prog) / 8)}
	if len(prog) > 0 {
		fp.Filter = (*unix.SockFilter)(unsafe.Pointer(&prog[0]))
	}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fp)
}

// TestGuardedProgramCutAnywhereIsRefused: the seccomp program a wall reads
// once its block is released comes through a pipe; a supervisor that dies while
// writing it leaves it cut short. Every cut of a guarded program is one the
// kernel refuses (so bubblewrap ends), and the whole one loads.
func TestGuardedProgramCutAnywhereIsRefused(t *testing.T) {
	filter, err := seccomp.BPF(seccomp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		prog []byte
	}{{"the walls' filter", filter}, {"allow all", allowAll}} {
		t.Run(tt.name, func(t *testing.T) {
			g := guarded(tt.prog)
			if err := attach(t, g); err != nil {
				t.Fatalf("the whole guarded program: %v; want it loaded", err)
			}
			for n := 0; n < len(g); n += 8 {
				if err := attach(t, g[:n]); err == nil {
					t.Fatalf("the guarded program cut after %d of %d instructions loads; want it refused", n/8, len(g)/8)
				}
			}
		})
	}
}
