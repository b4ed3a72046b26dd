package testenv

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// DeepChain makes a chain of depth folders named d below dir, holding one
// descriptor at a time, as code in a wall can in any folder it may write
// (the wall puts no bound on depth).
func DeepChain(t testing.TB, dir string, depth int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		if err := unix.Mkdirat(fd, "d", 0o700); err != nil {
			_ = unix.Close(fd)
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		_ = unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	_ = unix.Close(fd)
}

// LowNoFile lowers this process's soft descriptor limit to n for the
// test (a tree deeper than it then shows code that holds a descriptor a
// level).
func LowNoFile(t testing.TB, n uint64) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}
