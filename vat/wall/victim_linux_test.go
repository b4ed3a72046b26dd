package wall

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// victim runs one attack from inside a wall. It prints HELD lines for each
// attempt the wall stopped and BREACH lines for each that got through; the
// tests read them. Exit code 0 unless the mode itself broke.
func victim(mode string) int {
	arg := os.Getenv("VICTIM_ARG")
	held := func(format string, a ...any) { fmt.Printf("HELD "+format+"\n", a...) }
	breach := func(format string, a ...any) { fmt.Printf("BREACH "+format+"\n", a...) }
	// expectFail records an attempt that must fail.
	expectFail := func(what string, err error) {
		if err != nil {
			held("%s: %v", what, err)
		} else {
			breach("%s succeeded", what)
		}
	}
	switch mode {
	case "hello":
		fmt.Println("hello from inside")
	case "env":
		env := os.Environ()
		sort.Strings(env)
		for _, kv := range env {
			fmt.Println("ENV " + kv)
		}
	case "ids":
		fmt.Printf("UID %d GID %d EUID %d\n", os.Getuid(), os.Getgid(), os.Geteuid())
		var st unix.Stat_t
		if err := unix.Stat(os.Getenv("TOYBOX_DATA"), &st); err == nil {
			fmt.Printf("DATAOWNER %d\n", st.Uid)
		}
		f, err := os.CreateTemp(os.Getenv("TOYBOX_DATA"), "w")
		if err != nil {
			breach("cannot write its own data folder: %v", err)
		} else {
			f.Close()
			fmt.Println("DATAWRITE ok")
		}
	case "fds":
		// Raw system calls only: the Go runtime's own descriptors (its
		// poller) must not be mistaken for inherited ones.
		fds, err := rawFDs()
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		fmt.Printf("FDS %v\n", fds)
		for _, fd := range fds {
			target, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
			fmt.Printf("FD %d %s\n", fd, target)
		}
		// fd 3 must be a unix socket (the capability).
		if sa, err := unix.Getsockname(3); err == nil {
			if _, ok := sa.(*unix.SockaddrUnix); ok {
				fmt.Println("FD3 unix")
			}
		}
	case "read":
		// arg: paths separated by ':'; every read must fail or be empty.
		for _, p := range strings.Split(arg, ":") {
			b, err := os.ReadFile(p)
			switch {
			case err != nil:
				held("read %s: %v", p, err)
			case len(b) == 0:
				held("read %s: empty (masked)", p)
			default:
				breach("read %s: %q", p, b)
			}
		}
	case "list":
		for _, p := range strings.Split(arg, ":") {
			ents, err := os.ReadDir(p)
			switch {
			case err != nil:
				held("list %s: %v", p, err)
			case len(ents) == 0:
				held("list %s: empty", p)
			default:
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				fmt.Printf("LIST %s %v\n", p, names)
			}
		}
	case "readok":
		b, err := os.ReadFile(arg)
		if err != nil {
			fmt.Printf("READ-ERROR %v\n", err)
		} else {
			fmt.Printf("READ %q\n", b)
		}
	case "write":
		for _, p := range strings.Split(arg, ":") {
			expectFail("write "+p, os.WriteFile(p, []byte("pwned"), 0o755))
		}
	case "fill":
		// Each DIR=MiB in arg: fill DIR with that many MiB (making it
		// writable first, as its owner may); every one must run out of
		// room first.
		for _, da := range strings.Split(arg, ":") {
			dir, mib, _ := strings.Cut(da, "=")
			n, _ := strconv.Atoi(mib)
			_ = os.Chmod(dir, 0o777)
			expectFail(fmt.Sprintf("write %d MiB in %s", n, dir), fill(dir, n))
		}
	case "forks":
		// arg: how many processes to try (a bound, so that a wall
		// without a task limit does not fork the host out of pids). Each
		// is a sleep that ends with the wall; the wall must refuse one
		// before the last.
		n, _ := strconv.Atoi(arg)
		started := 0
		var err error
		for ; started < n; started++ {
			var p *os.Process
			if p, err = os.StartProcess("/usr/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{}); err != nil {
				break
			}
			_ = p.Release()
		}
		if err != nil {
			fmt.Printf("FORKED %d\n", started)
			held("process %d: %v", started+1, err)
		} else {
			breach("started all %d processes", n)
		}
	case "forkproxy":
		// A fork bomb that holds every task the wall lets it have (its
		// children pause until the wall ends), then a CONNECT to the
		// entry's proxy: the entry must still answer. The ask uses
		// blocking system calls alone, so this process needs no thread
		// of its own for it.
		n, _ := strconv.Atoi(arg)
		started := 0
		var err error
		var last [2]int
		for ; started < n; started++ {
			pid, errno := forkPause()
			if errno != 0 {
				err = errno
				break
			}
			last[started%2] = pid
		}
		fmt.Printf("FORKED %d\n", started)
		if err == nil {
			breach("started all %d processes", n)
		}
		// Two of the app's tasks back, for this process's own runtime
		// (a thread it may start): the app's, never the entry's.
		for _, pid := range last {
			if pid > 0 {
				_, _, _ = syscall.RawSyscall(syscall.SYS_KILL, uintptr(pid), uintptr(syscall.SIGKILL), 0)
				_, _, _ = syscall.RawSyscall6(syscall.SYS_WAIT4, uintptr(pid), 0, 0, 0, 0, 0)
			}
		}
		fmt.Printf("PROXY %s\n", rawConnect(os.Getenv("HTTPS_PROXY")))
	case "environs":
		// The supervisor's environment must be nowhere in the wall. The
		// test passes the secret reversed, so this process's own env does
		// not hold it.
		r := []byte(arg)
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		secret := string(r)
		if strings.Contains(strings.Join(os.Environ(), "\n"), secret) {
			breach("own environment holds the secret")
		}
		ents, _ := os.ReadDir("/proc")
		n := 0
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			for _, f := range []string{"environ", "cmdline"} {
				b, err := os.ReadFile("/proc/" + e.Name() + "/" + f)
				if err == nil && strings.Contains(string(b), secret) {
					breach("/proc/%s/%s holds the secret", e.Name(), f)
				}
			}
			n++
		}
		held("looked at %d processes", n)
	case "unix":
		// arg: paths separated by ':': connect to each socket, write to
		// each FIFO (.fifo); every attempt must fail.
		for _, p := range strings.Split(arg, ":") {
			if strings.HasSuffix(p, ".fifo") {
				fifo, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0)
				if err == nil {
					_, err = fifo.WriteString("pwned\n")
					fifo.Close()
				}
				expectFail("write to FIFO "+p, err)
				continue
			}
			c, err := net.DialTimeout("unix", p, 2*time.Second)
			if c != nil {
				c.Close()
			}
			expectFail("connect to socket "+p, err)
		}
	case "dial":
		for _, a := range strings.Split(arg, ",") {
			c, err := net.DialTimeout("tcp", a, 2*time.Second)
			if c != nil {
				c.Close()
			}
			expectFail("dial "+a, err)
		}
	case "sockets":
		for _, s := range []struct {
			name        string
			family, typ int
			proto       int
		}{
			{"netlink", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE},
			{"packet", unix.AF_PACKET, unix.SOCK_RAW, 0},
			{"inet raw", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP},
			{"inet6 raw", unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6},
			{"vsock", unix.AF_VSOCK, unix.SOCK_STREAM, 0},
			{"bluetooth", unix.AF_BLUETOOTH, unix.SOCK_RAW, 0},
		} {
			fd, err := unix.Socket(s.family, s.typ, s.proto)
			if err == nil {
				unix.Close(fd)
			}
			expectFail("socket "+s.name, err)
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
		if err != nil {
			breach("cannot even open a TCP socket: %v", err)
		} else {
			unix.Close(fd)
			fmt.Println("TCP socket ok")
		}
	case "syscalls":
		errno := func(r1 uintptr, e syscall.Errno) error {
			if e != 0 {
				return e
			}
			return nil
		}
		call := func(name string, trap uintptr, a ...uintptr) {
			var args [6]uintptr
			copy(args[:], a)
			r1, _, e := unix.Syscall6(trap, args[0], args[1], args[2], args[3], args[4], args[5])
			err := errno(r1, e)
			if err == nil && trap == unix.SYS_IO_URING_SETUP {
				unix.Close(int(r1))
			}
			expectFail(name, err)
		}
		call("ptrace attach pid 1", unix.SYS_PTRACE, unix.PTRACE_ATTACH, 1)
		call("ptrace traceme", unix.SYS_PTRACE, unix.PTRACE_TRACEME)
		tmpfs := []byte("tmpfs\x00")
		tgt := []byte("/tmp\x00")
		call("mount", unix.SYS_MOUNT, uintptr(unsafe.Pointer(&tmpfs[0])), uintptr(unsafe.Pointer(&tgt[0])), uintptr(unsafe.Pointer(&tmpfs[0])), 0, 0)
		call("umount2", unix.SYS_UMOUNT2, uintptr(unsafe.Pointer(&tgt[0])), unix.MNT_DETACH)
		call("unshare user", unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
		call("unshare net", unix.SYS_UNSHARE, unix.CLONE_NEWNET)
		call("setns", unix.SYS_SETNS, 0, 0)
		desc := []byte("x\x00")
		ktype := []byte("user\x00")
		call("keyctl", unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(^uint32(2)), 0)
		call("add_key", unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&ktype[0])), uintptr(unsafe.Pointer(&desc[0])), uintptr(unsafe.Pointer(&desc[0])), 1, uintptr(^uint32(3)))
		call("request_key", unix.SYS_REQUEST_KEY, uintptr(unsafe.Pointer(&ktype[0])), uintptr(unsafe.Pointer(&desc[0])), 0, 0)
		var params [120]byte
		call("io_uring_setup", unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])))
		call("bpf", unix.SYS_BPF, 0, 0, 0)
		call("perf_event_open", unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0)
		call("userfaultfd", unix.SYS_USERFAULTFD, 0)
		call("personality addr_no_randomize", unix.SYS_PERSONALITY, 0x0040000)
		call("chroot", unix.SYS_CHROOT, uintptr(unsafe.Pointer(&tgt[0])))
		// Lowering pid 1's descriptor limit (toybox-entry, or bwrap's
		// init: either shares the app's uid).
		var lim [16]byte // struct rlimit64 {cur, max}: 0 and 0
		call("prlimit64 of pid 1", unix.SYS_PRLIMIT64, 1, unix.RLIMIT_NOFILE, uintptr(unsafe.Pointer(&lim[0])), 0)
		// clone with a namespace flag (no CLONE_VM: were it to succeed, the
		// child exits at once).
		r1, _, e := unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		if e == 0 && r1 == 0 {
			unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
		}
		expectFail("clone newuser", errno(r1, e))
		// An allowed call still works.
		if _, err := unix.Getrandom(make([]byte, 8), 0); err != nil {
			breach("getrandom failed: %v", err)
		} else {
			fmt.Println("getrandom ok")
		}
	case "x32":
		// A system call for the x32 ABI: the filter kills the process.
		fmt.Println("calling x32 getpid")
		os.Stdout.Sync()
		unix.RawSyscall(0x40000000|unix.SYS_GETPID, 0, 0, 0)
		breach("survived an x32 system call")
	case "procmem":
		// Another process of the wall (pid 1: toybox-entry; bwrap keeps
		// no init of its own) must not be open to this one: its memory is where
		// code runs outside the app's seccomp filter.
		for _, f := range []string{"/proc/1/mem", "/proc/1/environ"} {
			fd, err := unix.Open(f, unix.O_RDWR, 0)
			if err == nil {
				unix.Close(fd)
			}
			if f == "/proc/1/environ" {
				fd, err = unix.Open(f, unix.O_RDONLY, 0)
				if err == nil {
					unix.Close(fd)
				}
			}
			expectFail("open "+f, err)
		}
		// Nor its program: toybox-entry runs from a descriptor the wall
		// never mounts, and pid 1 is not dumpable, so its exe link is
		// closed too.
		for _, f := range []string{"/proc/1/exe", "/run/toybox-entry"} {
			fd, err := unix.Open(f, unix.O_RDONLY, 0)
			if err == nil {
				unix.Close(fd)
			}
			expectFail("open "+f, err)
		}
		if err := unix.Kill(1, 0); err == nil {
			fmt.Println("pid 1 signalable")
		}
		comm, _ := os.ReadFile("/proc/1/comm")
		fmt.Printf("PID1 COMM %s\n", strings.TrimSpace(string(comm)))
	case "procs":
		ents, _ := os.ReadDir("/proc")
		var pids []int
		for _, e := range ents {
			if n, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, n)
			}
		}
		sort.Ints(pids)
		fmt.Printf("PIDS %v SELF %d\n", pids, os.Getpid())
		var comms []string
		for _, pid := range pids {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			comms = append(comms, fmt.Sprintf("%d=%s", pid, strings.TrimSpace(string(comm))))
		}
		fmt.Printf("COMMS %s\n", strings.Join(comms, " "))
	case "devetc":
		// What a program needs of /dev and /etc works; what it must not
		// have is not there. OK lines for what works, HELD/BREACH as usual.
		ok := func(what string, err error) {
			if err != nil {
				fmt.Printf("FAIL %s: %v\n", what, err)
			} else {
				fmt.Printf("OK %s\n", what)
			}
		}
		ok("write /dev/null", os.WriteFile("/dev/null", []byte("x"), 0))
		for _, d := range []string{"/dev/zero", "/dev/urandom", "/dev/random"} {
			f, err := os.Open(d)
			if err == nil {
				_, err = f.Read(make([]byte, 8))
				f.Close()
			}
			ok("read "+d, err)
		}
		ok("write /dev/shm", os.WriteFile("/dev/shm/x", []byte("x"), 0o600))
		_, err := os.ReadDir("/dev/fd/")
		ok("list /dev/fd", err)
		pw, err := os.ReadFile("/etc/passwd")
		if err == nil && !strings.Contains(string(pw), "vat:x:1000:1000:") {
			err = fmt.Errorf("no vat user in %q", pw)
		}
		ok("passwd", err)
		hn, err := os.ReadFile("/etc/hostname")
		if err == nil && string(hn) != "toybox\n" {
			err = fmt.Errorf("hostname %q", hn)
		}
		ok("hostname", err)
		for _, p := range strings.Split(arg, ":") {
			if p != "" {
				_, err := os.ReadFile(p)
				ok("read "+p, err)
			}
		}
		expectFail("create /etc/evil", os.WriteFile("/etc/evil", []byte("x"), 0o644))
		expectFail("write /etc/hosts", os.WriteFile("/etc/hosts", []byte("6.6.6.6 example.org"), 0o644))
		_, err = os.Stat("/dev/tty")
		expectFail("stat /dev/tty", err)
		_, err = os.Stat("/etc/shadow")
		expectFail("stat /etc/shadow", err)
	case "graceful":
		// Takes its time to end after SIGTERM, and says how many it got.
		terms := make(chan os.Signal, 16)
		signal.Notify(terms, syscall.SIGTERM)
		fmt.Println("sleeping")
		os.Stdout.Sync()
		<-terms
		n := 1
		for end := time.After(1500 * time.Millisecond); ; {
			select {
			case <-terms:
				n++
				continue
			case <-end:
			}
			break
		}
		fmt.Printf("SIGTERMS %d\n", n)
	case "etcafter":
		// Reads its /etc only once told to end (the test rebuilt the
		// view in between).
		terms := make(chan os.Signal, 1)
		signal.Notify(terms, syscall.SIGTERM)
		fmt.Println("sleeping")
		os.Stdout.Sync()
		<-terms
		for _, p := range []string{"/etc/hostname", "/etc/group"} {
			b, err := os.ReadFile(p)
			fmt.Printf("ETC %s %q %v\n", p, b, err)
		}
	case "nproc":
		// Says it ran, and under which task limit, then waits.
		var rl unix.Rlimit
		_ = unix.Getrlimit(unix.RLIMIT_NPROC, &rl)
		fmt.Printf("NPROC %d %d\n", rl.Cur, rl.Max)
		os.Stdout.Sync()
		time.Sleep(time.Minute)
	case "inotify":
		// Watches VICTIM_ARG, a file of the host's system folders, and
		// says what it sees; or what the filter refused.
		say := func(what string, err error) {
			if err != nil {
				fmt.Printf("INOTIFY %s: %v\n", what, err)
			} else {
				fmt.Printf("INOTIFY %s: ok\n", what)
			}
		}
		_, err := unix.InotifyInit()
		say("inotify_init", err)
		// On a descriptor that is none: the filter answers EPERM before
		// the kernel would say EBADF.
		_, err = unix.InotifyAddWatch(-1, arg, unix.IN_OPEN)
		say("inotify_add_watch(-1)", err)
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		say("inotify_init1", err)
		if err != nil {
			break
		}
		if _, err := unix.InotifyAddWatch(fd, arg, unix.IN_OPEN|unix.IN_ACCESS); err != nil {
			say("inotify_add_watch", err)
			break
		}
		fmt.Println("sleeping")
		os.Stdout.Sync()
		buf := make([]byte, 4096)
		n, err := unix.Read(fd, buf)
		if err != nil || n < unix.SizeofInotifyEvent {
			say("read", err)
			break
		}
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		fmt.Printf("EVENT %s mask %#x\n", arg, ev.Mask)
	case "hostview":
		// What the wall's /proc shows of the host.
		for _, p := range []string{"/proc/cmdline", "/proc/locks", BootIDPath} {
			b, err := os.ReadFile(p)
			if err != nil {
				fmt.Printf("VIEW %s error: %v\n", p, err)
				continue
			}
			fmt.Printf("VIEW %s %q\n", p, b)
		}
	case "eat":
		// arg: MiB to allocate and touch, 16 at a time, each kept; a
		// wall with a memory limit is killed on the way.
		n, _ := strconv.Atoi(arg)
		var kept [][]byte
		for ate := 16; ate <= n; ate += 16 {
			b := make([]byte, 16<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			kept = append(kept, b)
			fmt.Printf("ATE %d\n", ate)
			os.Stdout.Sync()
		}
		breach("allocated all %d MiB (%d blocks)", n, len(kept))
	case "spin":
		// Spins on every CPU it sees (and then some) until it is ended.
		fmt.Println("sleeping")
		os.Stdout.Sync()
		for range 2 * runtime.NumCPU() {
			go func() {
				for x := uint64(1); ; x = x*6364136223846793005 + 1 {
					spun.Store(x)
				}
			}()
		}
		select {}
	case "oomscore":
		// Says its oom_score_adj, then tries to lower it to 0 (the
		// supervisor's).
		b, _ := os.ReadFile("/proc/self/oom_score_adj")
		fmt.Printf("OOMSCORE %s\n", strings.TrimSpace(string(b)))
		err := os.WriteFile("/proc/self/oom_score_adj", []byte("0"), 0)
		b, _ = os.ReadFile("/proc/self/oom_score_adj")
		fmt.Printf("LOWERED %v %s\n", err, strings.TrimSpace(string(b)))
	case "sleep":
		fmt.Println("sleeping")
		os.Stdout.Sync()
		time.Sleep(time.Hour)
	default:
		fmt.Println("unknown victim mode", mode)
		return 2
	}
	return 0
}

// spun is what the "spin" victim's loops compute, so that they do work.
var spun atomic.Uint64

// rawFDs lists /proc/self/fd with getdents, skipping its own descriptor.
func rawFDs() ([]int, error) {
	dfd, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	buf := make([]byte, 8192)
	var names []string
	for {
		n, err := unix.ReadDirent(dfd, buf)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	var fds []int
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err == nil && fd != dfd {
			fds = append(fds, fd)
		}
	}
	sort.Ints(fds)
	return fds, nil
}

// fill writes mib MiB of zeros to a new file in dir.
func fill(dir string, mib int) error {
	f, err := os.CreateTemp(dir, "fill")
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for range mib {
		if _, err := f.Write(chunk); err != nil {
			return err
		}
	}
	return f.Close()
}

// rawConnect asks the CONNECT proxy at proxy (http://127.0.0.1:PORT) for a
// tunnel to 127.0.0.1:1 with blocking system calls alone (no netpoller, no
// thread), and returns its status line or what failed.
func rawConnect(proxy string) string {
	port, err := strconv.Atoi(proxy[strings.LastIndexByte(proxy, ':')+1:])
	if err != nil {
		return "no proxy in " + strconv.Quote(proxy)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "socket: " + err.Error()
	}
	defer unix.Close(fd)
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 20})
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return "connect: " + err.Error()
	}
	if _, err := unix.Write(fd, []byte("CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")); err != nil {
		return "write: " + err.Error()
	}
	buf := make([]byte, 512)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return "read: " + err.Error()
	}
	if n == 0 {
		return "read: the proxy closed the connection unanswered"
	}
	line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
	return line
}

// forkPause forks a child that does nothing but pause until the wall ends
// (no exec: a fork bomb at the kernel's speed). It returns the child's
// pid or the fork's error. The child runs nothing of the Go runtime: it calls pause(2) alone,
// as the runtime's own child does between fork and exec.
//
//go:norace
//go:nosplit
func forkPause() (int, syscall.Errno) {
	r, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	if r == 0 {
		for {
			syscall.RawSyscall(syscall.SYS_PAUSE, 0, 0, 0)
		}
	}
	return int(r), 0
}
