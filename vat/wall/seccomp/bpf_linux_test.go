//go:build linux && cgo && amd64

package seccomp

import (
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

const (
	auditArchX8664 = 0xc000003e
	auditArchI386  = 0x40000003
	x32Bit         = 0x40000000

	retKillProcess = 0x80000000
	retAllow       = 0x7fff0000
	retErrno       = 0x00050000
)

// vm loads the exported filter for o into x/net/bpf's interpreter.
func vm(t *testing.T, o Options) *bpf.VM {
	t.Helper()
	prog, err := BPF(o)
	if err != nil {
		t.Fatalf("BPF() = %v", err)
	}
	raw := make([]bpf.RawInstruction, len(prog)/8)
	for i := range raw {
		b := prog[i*8:]
		raw[i] = bpf.RawInstruction{
			Op: binary.NativeEndian.Uint16(b[0:]),
			Jt: b[2],
			Jf: b[3],
			K:  binary.NativeEndian.Uint32(b[4:]),
		}
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("the filter has instructions x/net/bpf cannot decode")
	}
	m, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatalf("bpf.NewVM: %v", err)
	}
	return m
}

// seccompData encodes struct seccomp_data for the interpreter. The kernel
// loads 32-bit words in host (little-endian) order; x/net/bpf loads them
// big-endian, so each 32-bit word is written big-endian at its offset, and a
// 64-bit argument's low word sits at the lower offset as it does in memory.
func seccompData(nr int32, arch uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], uint32(nr))
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		off := 16 + 8*i
		binary.BigEndian.PutUint32(b[off:], uint32(a))
		binary.BigEndian.PutUint32(b[off+4:], uint32(a>>32))
	}
	return b
}

type filterCase struct {
	name string
	nr   int32
	arch uint32
	args []uint64
	want uint32
}

var (
	eperm  = uint32(retErrno | uint32(unix.EPERM))
	enosys = uint32(retErrno | uint32(unix.ENOSYS))
)

func runFilterTable(t *testing.T, m *bpf.VM, tests []filterCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := m.Run(seccompData(tt.nr, tt.arch, tt.args...))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if uint32(got) != tt.want {
				t.Errorf("filter(nr=%d arch=%#x args=%#x) = %s; want %s", tt.nr, tt.arch, tt.args, action(uint32(got)), action(tt.want))
			}
		})
	}
}

// TestFilterInotify: inotify is refused unless the wall's Options allow
// it; the rest of the filter is the same either way.
func TestFilterInotify(t *testing.T) {
	for _, o := range []Options{{}, {Inotify: true}} {
		want := eperm
		if o.Inotify {
			want = retAllow
		}
		t.Run(fmt.Sprintf("inotify=%v", o.Inotify), func(t *testing.T) {
			runFilterTable(t, vm(t, o), []filterCase{
				{"inotify_init", unix.SYS_INOTIFY_INIT, auditArchX8664, nil, want},
				{"inotify_init1", unix.SYS_INOTIFY_INIT1, auditArchX8664, []uint64{unix.IN_CLOEXEC}, want},
				{"inotify_add_watch", unix.SYS_INOTIFY_ADD_WATCH, auditArchX8664, []uint64{3, 0, unix.IN_OPEN}, want},
				{"inotify_rm_watch", unix.SYS_INOTIFY_RM_WATCH, auditArchX8664, nil, retAllow},
				{"fanotify_init", unix.SYS_FANOTIFY_INIT, auditArchX8664, nil, eperm},
				{"ptrace", unix.SYS_PTRACE, auditArchX8664, nil, eperm},
				{"read", unix.SYS_READ, auditArchX8664, nil, retAllow},
				{"x32 inotify_init1", x32Bit | 294, auditArchX8664, nil, retKillProcess},
			})
		})
	}
}

func TestFilterTable(t *testing.T) {
	tests := []filterCase{
		{"read allowed", unix.SYS_READ, auditArchX8664, nil, retAllow},
		{"write allowed", unix.SYS_WRITE, auditArchX8664, nil, retAllow},
		{"openat allowed", unix.SYS_OPENAT, auditArchX8664, nil, retAllow},
		{"execve allowed", unix.SYS_EXECVE, auditArchX8664, nil, retAllow},
		{"splice allowed", unix.SYS_SPLICE, auditArchX8664, nil, retAllow},
		{"ptrace refused", unix.SYS_PTRACE, auditArchX8664, nil, eperm},
		{"modify_ldt refused", unix.SYS_MODIFY_LDT, auditArchX8664, []uint64{1, 0, 16}, eperm},
		{"prlimit64 of itself allowed", unix.SYS_PRLIMIT64, auditArchX8664, []uint64{0, 7}, retAllow},
		{"prlimit64 of pid 1 refused", unix.SYS_PRLIMIT64, auditArchX8664, []uint64{1, 7}, eperm},
		{"process_vm_readv refused", unix.SYS_PROCESS_VM_READV, auditArchX8664, nil, eperm},
		{"mount refused", unix.SYS_MOUNT, auditArchX8664, nil, eperm},
		{"umount2 refused", unix.SYS_UMOUNT2, auditArchX8664, nil, eperm},
		{"pivot_root refused", unix.SYS_PIVOT_ROOT, auditArchX8664, nil, eperm},
		{"fsopen refused", unix.SYS_FSOPEN, auditArchX8664, nil, eperm},
		{"open_tree refused", unix.SYS_OPEN_TREE, auditArchX8664, nil, eperm},
		{"unshare refused", unix.SYS_UNSHARE, auditArchX8664, []uint64{unix.CLONE_NEWUSER}, eperm},
		{"setns refused", unix.SYS_SETNS, auditArchX8664, nil, eperm},
		{"keyctl refused", unix.SYS_KEYCTL, auditArchX8664, nil, eperm},
		{"add_key refused", unix.SYS_ADD_KEY, auditArchX8664, nil, eperm},
		{"request_key refused", unix.SYS_REQUEST_KEY, auditArchX8664, nil, eperm},
		{"bpf refused", unix.SYS_BPF, auditArchX8664, nil, eperm},
		{"perf_event_open refused", unix.SYS_PERF_EVENT_OPEN, auditArchX8664, nil, eperm},
		{"userfaultfd refused", unix.SYS_USERFAULTFD, auditArchX8664, nil, eperm},
		{"io_uring_setup refused", unix.SYS_IO_URING_SETUP, auditArchX8664, nil, eperm},
		{"io_uring_enter refused", unix.SYS_IO_URING_ENTER, auditArchX8664, nil, eperm},
		{"io_uring_register refused", unix.SYS_IO_URING_REGISTER, auditArchX8664, nil, eperm},
		{"kexec_load refused", unix.SYS_KEXEC_LOAD, auditArchX8664, nil, eperm},
		{"kexec_file_load refused", unix.SYS_KEXEC_FILE_LOAD, auditArchX8664, nil, eperm},
		{"init_module refused", unix.SYS_INIT_MODULE, auditArchX8664, nil, eperm},
		{"finit_module refused", unix.SYS_FINIT_MODULE, auditArchX8664, nil, eperm},
		{"open_by_handle_at refused", unix.SYS_OPEN_BY_HANDLE_AT, auditArchX8664, nil, eperm},
		{"personality query allowed", unix.SYS_PERSONALITY, auditArchX8664, []uint64{0xffffffff}, retAllow},
		{"personality linux allowed", unix.SYS_PERSONALITY, auditArchX8664, []uint64{0}, retAllow},
		{"personality addr_no_randomize refused", unix.SYS_PERSONALITY, auditArchX8664, []uint64{0x0040000}, eperm},
		{"personality bit 31 with a flag refused", unix.SYS_PERSONALITY, auditArchX8664, []uint64{0x80040000}, eperm},
		{"personality high word ignored refused", unix.SYS_PERSONALITY, auditArchX8664, []uint64{1<<32 | 0x0040000}, eperm},
		{"personality query with high word allowed", unix.SYS_PERSONALITY, auditArchX8664, []uint64{1<<32 | 0xffffffff}, retAllow},
		{"socket unix allowed", unix.SYS_SOCKET, auditArchX8664, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, retAllow},
		{"socket inet allowed", unix.SYS_SOCKET, auditArchX8664, []uint64{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, retAllow},
		{"socket inet6 dgram allowed", unix.SYS_SOCKET, auditArchX8664, []uint64{unix.AF_INET6, unix.SOCK_DGRAM}, retAllow},
		{"socket netlink refused", unix.SYS_SOCKET, auditArchX8664, []uint64{unix.AF_NETLINK, unix.SOCK_RAW}, eperm},
		{"socket packet refused", unix.SYS_SOCKET, auditArchX8664, []uint64{unix.AF_PACKET, unix.SOCK_RAW}, eperm},
		{"socket inet raw refused", unix.SYS_SOCKET, auditArchX8664, []uint64{unix.AF_INET, unix.SOCK_RAW | unix.SOCK_CLOEXEC}, eperm},
		{"socket vsock refused", unix.SYS_SOCKET, auditArchX8664, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, eperm},
		{"socket family high bits refused", unix.SYS_SOCKET, auditArchX8664, []uint64{1<<32 | unix.AF_NETLINK}, eperm},
		{"socketpair inet refused", unix.SYS_SOCKETPAIR, auditArchX8664, []uint64{unix.AF_INET}, eperm},
		{"clone thread allowed", unix.SYS_CLONE, auditArchX8664, []uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD}, retAllow},
		{"clone fork allowed", unix.SYS_CLONE, auditArchX8664, []uint64{uint64(unix.SIGCHLD)}, retAllow},
		{"clone newuser refused", unix.SYS_CLONE, auditArchX8664, []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, eperm},
		{"clone newns refused", unix.SYS_CLONE, auditArchX8664, []uint64{unix.CLONE_NEWNS}, eperm},
		{"clone newnet refused", unix.SYS_CLONE, auditArchX8664, []uint64{unix.CLONE_NEWNET}, eperm},
		{"clone newpid refused", unix.SYS_CLONE, auditArchX8664, []uint64{unix.CLONE_NEWPID}, eperm},
		{"clone3 falls back", unix.SYS_CLONE3, auditArchX8664, nil, enosys},
		{"ioctl TIOCSTI refused", unix.SYS_IOCTL, auditArchX8664, []uint64{0, unix.TIOCSTI}, eperm},
		{"ioctl TCGETS allowed", unix.SYS_IOCTL, auditArchX8664, []uint64{0, unix.TCGETS}, retAllow},
		{"ioctl FIONREAD allowed", unix.SYS_IOCTL, auditArchX8664, []uint64{3, 0x541b /* FIONREAD */}, retAllow},
		{"ioctl SIOCATMARK allowed", unix.SYS_IOCTL, auditArchX8664, []uint64{3, unix.SIOCATMARK}, retAllow},
		{"ioctl SIOCGSTAMPNS allowed", unix.SYS_IOCTL, auditArchX8664, []uint64{3, unix.SIOCGSTAMPNS}, retAllow},
		{"ioctl SIOCSPGRP allowed", unix.SYS_IOCTL, auditArchX8664, []uint64{3, unix.SIOCSPGRP}, retAllow},
		{"ioctl SIOCADDRT refused", unix.SYS_IOCTL, auditArchX8664, []uint64{3, unix.SIOCADDRT}, eperm},
		{"ioctl SIOCGIFNAME refused", unix.SYS_IOCTL, auditArchX8664, []uint64{3, unix.SIOCGIFNAME}, eperm},
		{"ioctl SIOCGIFCONF refused", unix.SYS_IOCTL, auditArchX8664, []uint64{3, unix.SIOCGIFCONF}, eperm},
		{"ioctl SIOCGIFCONF high word refused", unix.SYS_IOCTL, auditArchX8664, []uint64{3, 1<<32 | unix.SIOCGIFCONF}, eperm},
		{"ioctl SIOCGIFHWADDR refused", unix.SYS_IOCTL, auditArchX8664, []uint64{3, unix.SIOCGIFHWADDR}, eperm},
		{"ioctl SIOCGARP refused", unix.SYS_IOCTL, auditArchX8664, []uint64{3, unix.SIOCGARP}, eperm},
		{"ioctl SIOCETHTOOL refused", unix.SYS_IOCTL, auditArchX8664, []uint64{3, unix.SIOCETHTOOL}, eperm},
		{"ioctl SIOCGSKNS refused", unix.SYS_IOCTL, auditArchX8664, []uint64{3, 0x894c}, eperm},
		{"ioctl SIOCDEVPRIVATE+15 refused", unix.SYS_IOCTL, auditArchX8664, []uint64{3, 0x89ff}, eperm},
		{"ioctl SIOCGIWNAME refused", unix.SYS_IOCTL, auditArchX8664, []uint64{3, 0x8b01}, eperm},
		{"setsockopt SO_BINDTODEVICE refused", unix.SYS_SETSOCKOPT, auditArchX8664, []uint64{3, unix.SOL_SOCKET, unix.SO_BINDTODEVICE}, eperm},
		{"setsockopt SO_BINDTOIFINDEX refused", unix.SYS_SETSOCKOPT, auditArchX8664, []uint64{3, unix.SOL_SOCKET, unix.SO_BINDTOIFINDEX}, eperm},
		{"setsockopt SO_BINDTODEVICE high words refused", unix.SYS_SETSOCKOPT, auditArchX8664, []uint64{3, 1<<32 | unix.SOL_SOCKET, 1<<32 | unix.SO_BINDTODEVICE}, eperm},
		{"setsockopt SO_REUSEADDR allowed", unix.SYS_SETSOCKOPT, auditArchX8664, []uint64{3, unix.SOL_SOCKET, unix.SO_REUSEADDR}, retAllow},
		{"setsockopt TCP_NODELAY allowed", unix.SYS_SETSOCKOPT, auditArchX8664, []uint64{3, unix.IPPROTO_TCP, unix.TCP_NODELAY}, retAllow},
		{"setsockopt option 25 of IPPROTO_TCP allowed", unix.SYS_SETSOCKOPT, auditArchX8664, []uint64{3, unix.IPPROTO_TCP, 25}, retAllow},
		{"ioctl TUNSETIFF allowed", unix.SYS_IOCTL, auditArchX8664, []uint64{3, unix.TUNSETIFF}, retAllow},
		{"i386 getpid kills", 20, auditArchI386, nil, retKillProcess},
		{"i386 ptrace kills", 26, auditArchI386, nil, retKillProcess},
		{"x32 read kills", x32Bit, auditArchX8664, nil, retKillProcess},
		{"x32 ptrace kills", x32Bit | 521, auditArchX8664, nil, retKillProcess},
		{"aarch64 arch kills", unix.SYS_READ, 0xc00000b7, nil, retKillProcess},
	}
	runFilterTable(t, vm(t, Options{}), tests)
}

func action(r uint32) string {
	switch {
	case r == retAllow:
		return "allow"
	case r == retKillProcess:
		return "kill-process"
	case r&0xffff0000 == retErrno:
		return fmt.Sprintf("errno %d", r&0xffff)
	}
	return fmt.Sprintf("%#x", r)
}
