// Command nested runs a command under another seccomp notifier's filter.
// The filter has a notification listener, as a container runtime that
// answers system calls in user space would install. Every process the
// command starts is under that filter, so the kernel refuses each of them a
// listener of its own (EBUSY: one listener per chain). The filter allows
// every call, so nothing else changes. It holds the listener until the
// command ends, passes SIGTERM and SIGINT on, and exits with the command's
// status.
//
//	nested COMMAND [ARGS...]
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nested COMMAND [ARGS...]")
		os.Exit(2)
	}
	prog := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	fp := unix.SockFprog{Len: 1, Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail(err)
	}
	// Every thread of this process (TSYNC), so whichever starts the
	// command passes the filter on.
	const flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH
	lfd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fp)))
	if e != 0 {
		fail(fmt.Errorf("seccomp: %w", e))
	}
	unix.CloseOnExec(int(lfd)) // held here, never by the command
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	_ = unix.Close(int(lfd))
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "nested:", err)
	os.Exit(1)
}
