// Package seccomp builds the seccomp filter every wall runs under.
//
// The filter allows by default. It refuses (EPERM) the calls that reach
// the kernel's attack surface or another namespace (ptrace, mount,
// unshare, setns, keyctl, bpf, io_uring, ...). It refuses inotify unless
// the wall's Options allow it, and socket families other than unix, inet
// and inet6. It kills a process that makes a system call for another
// architecture (i386, x32). The filter is compiled with libseccomp and
// exported as classic BPF for bubblewrap's --seccomp option.
package seccomp
