package entry

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"capnproto.org/go/capnp/v3"
	"golang.org/x/sys/unix"

	"toybox/schema"
	"toybox/schema/wire"
)

// Exit codes of the entry itself (the app's own code passes through).
const (
	ExitSetup = 125 // the entry could not set the wall's network up
	ExitExec  = 127 // the app could not be started
)

// Signals for the app, and SIGCHLD for reaping. They are caught once the
// app runs, not before: signal.Notify starts the runtime's signal loop (a
// thread of its own, about a millisecond), which no app should wait for.
// Until then a stop request (SIGTERM) ends the entry by Go's default
// action, and with it the wall: what was asked for.
var (
	sigs = make(chan os.Signal, 16)
	chld = make(chan os.Signal, 1)
)

func catchSignals() {
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	signal.Notify(chld, unix.SIGCHLD)
}

// bootstrapTimeout bounds the Vat bootstrap and egress() call.
const bootstrapTimeout = 15 * time.Second

// CloexecAll marks every descriptor from 3 up close-on-exec, so nothing the
// wall handed the entry reaches the app by accident. Call it first.
func CloexecAll() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	ents, rerr := os.ReadDir("/proc/self/fd")
	if rerr != nil {
		return fmt.Errorf("marking descriptors close-on-exec: %w (and reading /proc/self/fd: %w)", os.NewSyscallError("close_range", err), rerr)
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// CloseInherited closes every descriptor from 3 up except keep: whatever
// bubblewrap (or the supervisor, by accident) left open is not the entry's
// to hold. Call it first, before the runtime opens descriptors of its own.
func CloseInherited(keep ...int) error {
	dfd, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("listing inherited descriptors: %w", os.NewSyscallError("open /proc/self/fd", err))
	}
	var names []string
	buf := make([]byte, 4096)
	for {
		n, err := unix.ReadDirent(dfd, buf)
		if err != nil {
			_ = unix.Close(dfd)
			return fmt.Errorf("listing inherited descriptors: %w", os.NewSyscallError("getdents", err))
		}
		if n == 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	_ = unix.Close(dfd)
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd < 3 || fd == dfd || slices.Contains(keep, fd) {
			continue
		}
		_ = unix.Close(fd)
	}
	return nil
}

// Run serves the wall's network and runs the app; it returns the app's exit
// code (128+signal when a signal ended it), or ExitSetup / ExitExec when the
// entry could not do its part (a failed egress() kills the app first). It
// never returns before the app is gone.
func Run(ctx context.Context, cfg Config) int {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "toybox-entry: "+format+"\n", args...)
		return code
	}
	if len(cfg.Argv) == 0 {
		return fail(ExitExec, "no command")
	}
	if cfg.AppCap == nil {
		return fail(ExitExec, "no app capability")
	}
	defer cfg.AppCap.Close()
	// Nobody in the wall (the app shares the uid) may read or write this
	// process's memory or descriptors through /proc.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(ExitSetup, "prctl(PR_SET_DUMPABLE): %v", err)
	}

	// The network's listeners are bound before the app starts, so its
	// first connect never finds the port closed; the Handle (a round trip
	// through the supervisor) is fetched once the app is started, so that
	// nothing of the entry's but the fork runs before the app's exec.
	// Connections accepted meanwhile wait in the kernel's backlog until it
	// is there. If it cannot be had, the wall fails closed: the app is
	// killed and the entry exits with ExitSetup.
	var ls *listeners
	if cfg.Cap != nil {
		var err error
		if ls, err = listen(ctx, cfg); err != nil {
			_ = cfg.Cap.Close()
			return fail(ExitSetup, "%v", err)
		}
	}

	// syscall.ForkExec, not os.StartProcess: the latter first forks a
	// throwaway child to learn whether pidfds work, which the app would
	// wait for.
	pid, err := syscall.ForkExec(cfg.Argv[0], cfg.Argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2, cfg.AppCap.Fd()},
	})
	if err != nil {
		if ls != nil {
			ls.close()
			_ = cfg.Cap.Close()
		}
		return fail(ExitExec, "starting %s: %v", cfg.Argv[0], err)
	}
	_ = cfg.AppCap.Close()

	var netDone chan netResult
	var stopNet func()
	if ls != nil {
		nctx, cancel := context.WithCancel(ctx)
		netDone = make(chan netResult, 1)
		go func() {
			stop, err := serveNet(nctx, cfg, ls, logger)
			netDone <- netResult{stop: stop, err: err}
		}()
		// When the app is gone the wall ends with this process: release
		// the network without waiting on it (a Cap'n Proto close can wait
		// on the peer). A setup still under way is cancelled and releases
		// what it took itself.
		defer func() {
			cancel()
			if stopNet != nil {
				go stopNet()
				return
			}
			if netDone != nil {
				go func() {
					if r := <-netDone; r.stop != nil {
						r.stop()
					}
				}()
			}
		}()
	}
	catchSignals()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// A SIGCHLD may have come before catchSignals: reap once now.
	if code, ok := reap(pid); ok {
		return code
	}
	for {
		select {
		case r := <-netDone:
			netDone = nil
			if r.err != nil {
				// Fail closed: no app runs on in a wall whose network
				// could not be set up.
				_ = unix.Kill(pid, unix.SIGKILL)
				waitFor(pid)
				return fail(ExitSetup, "%v", r.err)
			}
			stopNet = r.stop
			continue
		case s := <-sigs:
			if sig, ok := s.(syscall.Signal); ok {
				_ = unix.Kill(pid, sig)
			}
			continue
		case <-chld:
		case <-tick.C:
		}
		if code, ok := reap(pid); ok {
			return code
		}
	}
}

// reap reaps every child that has ended (this is pid 1); when one of them
// is the app, it returns the app's exit code and true.
func reap(app int) (int, bool) {
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || wpid <= 0 {
			return 0, false
		}
		if wpid != app {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus(), true
		case ws.Signaled():
			return 128 + int(ws.Signal()), true
		}
	}
}

// waitFor waits until pid has ended.
func waitFor(pid int) {
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
			return
		}
	}
}

// netResult is serveNet's answer: the func that stops the network, or why
// it could not be set up.
type netResult struct {
	stop func()
	err  error
}

// listeners are the wall's loopback ports, bound before the app starts:
// raw sockets, so that binding them costs four system calls and does not
// wait for Go's network poller, which serveNet brings in once the app runs
// (the sockets are made blocking so that os.NewFile leaves them out of the
// poller; net.FileListener makes its own copy non-blocking).
type listeners struct {
	forwards []*os.File // one per cfg.Forwards, in order
	proxy    *os.File   // nil when cfg.ProxyPort is 0
}

func (ls *listeners) close() {
	for _, f := range ls.forwards {
		_ = f.Close()
	}
	if ls.proxy != nil {
		_ = ls.proxy.Close()
	}
}

// listen binds the forwarded ports and the proxy's port on 127.0.0.1.
func listen(_ context.Context, cfg Config) (*listeners, error) {
	ls := &listeners{}
	for _, f := range cfg.Forwards {
		l, err := listenLoopback(int(f.Port))
		if err != nil {
			ls.close()
			return nil, fmt.Errorf("forwarding port %d: %w", f.Port, err)
		}
		ls.forwards = append(ls.forwards, l)
	}
	if cfg.ProxyPort != 0 {
		l, err := listenLoopback(cfg.ProxyPort)
		if err != nil {
			ls.close()
			return nil, fmt.Errorf("serving the proxy on port %d: %w", cfg.ProxyPort, err)
		}
		ls.proxy = l
	}
	return ls, nil
}

// listenLoopback returns a TCP socket listening on 127.0.0.1:port
// (close-on-exec: the app never holds it).
func listenLoopback(port int) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		_ = unix.Close(fd)
		return nil, os.NewSyscallError("setsockopt", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = unix.Close(fd)
		return nil, os.NewSyscallError("bind 127.0.0.1:"+strconv.Itoa(port), err)
	}
	if err := unix.Listen(fd, 4096); err != nil {
		_ = unix.Close(fd)
		return nil, os.NewSyscallError("listen", err)
	}
	return os.NewFile(uintptr(fd), "listen:"+strconv.Itoa(port)), nil
}

// netListener turns a listening socket into a net.Listener (which holds a
// duplicate) and closes f.
func netListener(f *os.File) (net.Listener, error) {
	defer f.Close()
	return net.FileListener(f)
}

// serveNet takes the Handle and serves the proxy and the forwards on ls. It
// owns cfg.Cap and ls: on error both are closed; on success the returned
// func stops them.
func serveNet(ctx context.Context, cfg Config, ls *listeners, logger *slog.Logger) (func(), error) {
	conn, err := wire.FromFile(cfg.Cap, true)
	if err != nil {
		ls.close()
		return nil, fmt.Errorf("using the capability socket: %w", err)
	}
	rc := conn.RPC(capnp.Client{}, nil)
	bctx, cancel := context.WithTimeout(ctx, bootstrapTimeout)
	defer cancel()
	vat := schema.Vat(rc.Bootstrap(bctx))
	fut, rel := vat.Egress(bctx, nil)
	res, err := fut.Struct()
	var handle schema.Handle
	if err == nil {
		handle = res.Handle().AddRef()
	}
	rel()
	vat.Release()
	if err != nil {
		ls.close()
		_ = rc.Close()
		return nil, fmt.Errorf("asking the vat's capability for egress: %w", err)
	}
	var nls []net.Listener
	closeAll := func() {
		for _, l := range nls {
			_ = l.Close()
		}
	}
	for _, f := range append(slices.Clone(ls.forwards), ls.proxy) {
		if f == nil {
			continue
		}
		l, err := netListener(f)
		if err != nil {
			ls.close()
			closeAll()
			handle.Release()
			_ = rc.Close()
			return nil, fmt.Errorf("serving %s: %w", f.Name(), err)
		}
		nls = append(nls, l)
	}
	proxy := NewProxy(cfg.ID, handle, conn, logger)
	stop := func() {
		closeAll()
		proxy.Close()
		_ = rc.Close()
	}
	for i, f := range cfg.Forwards {
		go func() { _ = proxy.ServeForward(ctx, nls[i], f) }()
	}
	if ls.proxy != nil {
		go func() { _ = proxy.ServeProxy(ctx, nls[len(nls)-1]) }()
	}
	return stop, nil
}
