// Package seccomp builds the seccomp filter every wall runs under: allow by
// default, refuse (EPERM) the calls that reach the kernel's attack surface or
// another namespace (ptrace, mount, unshare, setns, keyctl, bpf, io_uring, ...),
// refuse inotify unless the wall's Options allow it, refuse socket families
// other than unix, inet and inet6, and kill a process that makes a system
// call for another architecture (i386, x32). The filter is compiled with
// libseccomp and exported as classic BPF for bubblewrap's --seccomp option.
package seccomp
