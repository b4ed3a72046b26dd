//go:build linux && !386 && !arm

package wall

import "golang.org/x/sys/unix"

// The system calls that set one thread's ids (Go's syscall.Setresuid sets
// every thread's): 32-bit ids here.
const (
	sysSetresuid = unix.SYS_SETRESUID
	sysSetresgid = unix.SYS_SETRESGID
)
