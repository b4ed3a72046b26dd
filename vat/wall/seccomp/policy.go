package seccomp

import "runtime"

// ArchHasTable reports whether this architecture has a filter table
// (amd64, arm64). A build for one of them without cgo has no filter all the
// same (Supported fails): that is a build to fix, not an architecture to run
// walled-noseccomp on.
func ArchHasTable() bool {
	switch runtime.GOARCH {
	case "amd64", "arm64":
		return true
	}
	return false
}

// Refused lists the system calls a walled process may never make; each fails
// with EPERM. Names unknown on an architecture are skipped there.
var Refused = []string{
	// Debugging and reading other processes.
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	// The mount family.
	"mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
	"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "open_tree_attr",
	// Namespaces.
	"unshare", "setns",
	// Keyrings.
	"keyctl", "add_key", "request_key",
	// Kernel attack surface.
	"bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
	"io_uring_register", "open_by_handle_at", "name_to_handle_at", "lookup_dcookie",
	"fanotify_init", "quotactl", "quotactl_fd", "vhangup", "nfsservctl",
	// Kernels and modules.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"create_module", "query_module", "get_kernel_syms",
	// The host itself.
	"reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime",
	"clock_adjtime", "adjtime", "adjtimex", "stime", "syslog", "sethostname", "setdomainname",
	"iopl", "ioperm", "uselib", "ustat", "sysfs", "_sysctl",
	// Old x86 surface no program needs (Docker's default profile refuses
	// them too): local descriptor tables and virtual 8086 mode.
	"modify_ldt", "vm86", "vm86old",
}

// Options vary the filter from one wall to another.
type Options struct {
	// Inotify lets the wall watch files (manifest sandbox.inotify). If
	// false, the Inotify calls fail with EPERM: the host's system
	// folders are the same inodes in every wall, so a watch on one
	// (/usr/bin/node, the dynamic loader) reports every process on the
	// host that opens it, another vat's start among them; and when the
	// supervisor is not root, every wall's inotify instances count
	// against one uid's limit (fs.inotify.max_user_instances, 128 by
	// default), which one vat could take.
	Inotify bool
	// Notifier lets the wall's processes read another's memory and take
	// its descriptors (NotifierCalls): toybox-entry does, for the app's
	// connect() calls (transparent egress). The app itself runs under a
	// filter of its own then, which refuses them again (toybox-entry's
	// launcher installs it).
	Notifier bool
}

// NotifierCalls are the calls of Refused that Options.Notifier lets
// through the wall's filter.
var NotifierCalls = []string{"process_vm_readv", "pidfd_getfd"}

// Inotify lists the calls refused unless Options.Inotify. Without an
// instance no watch can be added; inotify_add_watch is refused too, so
// no descriptor that reached the wall some other way can watch.
var Inotify = []string{"inotify_init", "inotify_init1", "inotify_add_watch"}

// Allowed socket families; socket() with any other family fails with EPERM.
const (
	afUnix  = 1
	afInet  = 2
	afInet6 = 10
)

// refusedFamiliesBelowInet6 are the families under AF_INET6 that are not
// AF_UNIX or AF_INET.
var refusedFamiliesBelowInet6 = []uint64{0, 3, 4, 5, 6, 7, 8, 9}

// The interface ioctls of a socket (SIOCGIFCONF, SIOCGIFADDR,
// SIOCGIFHWADDR, SIOCGARP, SIOCETHTOOL, the wireless extensions' SIOCGIW…)
// answer about the network namespace the socket belongs to, and the app
// holds sockets of the host's: its fd 3, and those transparent egress puts
// in place. So every ioctl numbered 0x8908 to 0x89ff (the socket ioctls
// but the first eight, which answer about the socket itself: its owner,
// SIOCATMARK, SIOCGSTAMP) and 0x8b00 to 0x8bff (the wireless extensions)
// fails with EPERM, on any descriptor: a filter cannot tell whose socket
// it is. The wall's own network is loopback alone, and netlink, the other
// way to read it, is refused with every family but unix, inet and inet6.
// Each range is a list of masks and values over the request's low word
// (the kernel reads it as an unsigned int).
var RefusedIoctls = refusedIoctls()

func refusedIoctls() [][2]uint64 {
	r := [][2]uint64{{0xfffffff8, 0x8908}} // 0x8908-0x890f
	for v := uint64(0x8910); v <= 0x89f0; v += 0x10 {
		r = append(r, [2]uint64{0xfffffff0, v}) // 0x8910-0x89ff
	}
	return append(r, [2]uint64{0xffffff00, 0x8b00}) // 0x8b00-0x8bff
}

// solSocket is setsockopt's SOL_SOCKET level.
const solSocket = 1

// RefusedSockopts are the SOL_SOCKET options that fail with EPERM.
// Binding a socket to a device (SO_BINDTODEVICE by name, SO_BINDTOIFINDEX
// by index) looks the device up in the socket's network namespace: on a
// socket of the host's, an oracle of the host's interface names, and a way
// to send a connection put in place out through another of the host's
// interfaces. The wall's own network has loopback alone, so nothing in it
// needs either.
var RefusedSockopts = []uint64{25 /* SO_BINDTODEVICE */, 62 /* SO_BINDTOIFINDEX */}

// Socket types refused even in an allowed family.
const (
	sockRaw    = 3
	sockPacket = 10
	sockType   = 0xf // mask for the type without SOCK_NONBLOCK/SOCK_CLOEXEC
)

// Namespace flags refused in clone(2)'s flags argument.
const (
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
)

// CloneNamespaceFlags are the clone(2) flags that create a namespace.
var CloneNamespaceFlags = []uint64{cloneNewNS, cloneNewCgroup, cloneNewUTS, cloneNewIPC, cloneNewUser, cloneNewPID, cloneNewNet}

// ioctl requests refused: pushing bytes into a terminal's input.
const (
	tiocsti   = 0x5412
	tioclinux = 0x541C
)

// personality(2): bit 31 of the query value 0xffffffff.
const perBit31 = 0x80000000
