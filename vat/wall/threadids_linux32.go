//go:build linux && (386 || arm)

package wall

import "golang.org/x/sys/unix"

// The system calls that set one thread's ids with 32-bit ids (the plain
// ones take 16-bit ids on these architectures).
const (
	sysSetresuid = unix.SYS_SETRESUID32
	sysSetresgid = unix.SYS_SETRESGID32
)
