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
	"syscall"
	"time"

	"capnproto.org/go/capnp/v3"
	"golang.org/x/sys/unix"

	"toybox/schema"
	"toybox/schema/wire"
)

// Exit codes of the entry itself (the app's own code passes through).
const (
	ExitLost  = 124 // the capability connection ended while the app ran: the wall ends to start again
	ExitSetup = 125 // the entry could not set the wall's network up
	ExitExec  = 127 // the app could not be started
)

// Signals for the app, and SIGCHLD for reaping. They are caught once the
// app runs, not before: signal.Notify starts the runtime's signal loop (a
// thread of its own, about a millisecond), which no app should wait for.
// main catches them first thing (CatchSignals). Before that a stop request
// (SIGTERM) ends the entry by Go's default action (exit status 2 for a pid
// 1), and with it the wall, without the app hearing it. So the wall's Stop
// sends it only once Forwarding says the entry catches it.
var (
	sigs = make(chan os.Signal, 16)
	chld = make(chan os.Signal, 1)
)

// crashSignals are the signals the runtime would answer with a crash and a
// stack dump. The app shares the entry's uid, so it may send pid 1 one (a
// kill(2), not a fault of the entry's own). They are ignored: pid 1 of a
// pid namespace does not get a signal it ignores from inside.
var crashSignals = []os.Signal{unix.SIGABRT, unix.SIGTRAP, unix.SIGSYS, unix.SIGILL, unix.SIGSTKFLT, unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE}

func catchSignals() {
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	signal.Notify(chld, unix.SIGCHLD)
	// After the Notify calls: that these are ignored is the mark that
	// SIGTERM is caught (Forwarding).
	signal.Ignore(crashSignals...)
}

// Forwarding reports whether a toybox-entry whose /proc status has this
// SigIgn mask forwards a SIGTERM to its app. SigCgt cannot tell: the Go
// runtime installs its handler for SIGTERM before main runs, and that
// handler ends the entry until CatchSignals has run. SIGABRT is the one
// of crashSignals that signal.Ignore sets to SIG_IGN in the kernel (the
// runtime drops the others itself).
func Forwarding(sigIgn uint64) bool {
	return sigIgn&(1<<(unix.SIGABRT-1)) != 0
}

// CatchSignals catches the signals Run and RunMCP act on, as soon as
// main runs (the app already does): a stop request that comes while the
// entry sets itself up then waits for them. Until a signal is caught the
// runtime's default ends the entry, as pid 1 with exit status 2, and the
// app does not hear it.
func CatchSignals() { catchSignals() }

// bootstrapTimeout bounds the Vat bootstrap and egress() call.
const bootstrapTimeout = 15 * time.Second

// Run serves the wall's network for the app the launcher started (cfg.App)
// and returns the app's exit code (128+signal when a signal ended it), or
// ExitSetup when the entry could not do its part (a failed egress() kills
// the app first). It never returns before the app is gone.
//
// The Handle (a round trip through the supervisor) is fetched here, once
// the app runs; connections accepted meanwhile wait in the kernel's backlog
// of cfg.Listeners. If it cannot be had, the wall fails closed: the app is
// killed and the entry exits with ExitSetup.
func Run(ctx context.Context, cfg Config) int {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "toybox-entry: "+format+"\n", args...)
		return code
	}
	if cfg.App <= 0 {
		return fail(ExitExec, "no app")
	}
	signal.Ignore(crashSignals...)
	ls := cfg.Listeners
	if ls == nil {
		ls = &Listeners{}
	}
	if cfg.Cap == nil {
		ls.close()
		ls = nil
	} else if len(ls.Forwards) != len(cfg.Forwards) || (ls.Proxy != nil) != (cfg.ProxyPort != 0) || slices.Contains(ls.Forwards, nil) {
		ls.close()
		_ = cfg.Cap.Close()
		Kill(cfg.App)
		return fail(ExitSetup, "%d listening sockets for %d forwards and proxy port %d", len(ls.Forwards), len(cfg.Forwards), cfg.ProxyPort)
	}
	pid := cfg.App

	var listenDone chan error
	if cfg.Listen != nil {
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		listenDone = make(chan error, 1)
		go func() { listenDone <- serveListen(lctx, cfg.Listen, logger) }()
	}
	var netDone chan netResult
	var stopNet func()
	if ls != nil {
		nctx, cancel := context.WithCancel(ctx)
		netDone = make(chan netResult, 1)
		go func() {
			stop, lost, err := serveNet(nctx, cfg, ls, logger)
			netDone <- netResult{stop: stop, lost: lost, err: err}
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
	var lost <-chan struct{}
	for {
		select {
		case r := <-netDone:
			netDone = nil
			if r.err != nil {
				// Fail closed: no app runs on in a wall whose network
				// could not be set up.
				Kill(pid)
				return fail(ExitSetup, "%v", r.err)
			}
			stopNet, lost = r.stop, r.lost
			continue
		case err := <-listenDone:
			listenDone = nil
			if err != nil {
				if code, ok := reap(pid); ok {
					return code // the app ended first: its status says why
				}
				// Fail closed: the app would run on unreachable.
				Kill(pid)
				return fail(ExitSetup, "%v", err)
			}
			continue
		case <-lost:
			// Every connect of the vat's would fail from here on while
			// the wall looked healthy: the wall ends, and the
			// supervisor starts it again.
			if code, ok := reap(pid); ok {
				return code // the app had ended first, on its own
			}
			Kill(pid)
			return fail(ExitLost, "the capability connection to the supervisor ended while the app ran; the wall ends so that it starts again with its egress")
		case s := <-sigs:
			if sig, ok := s.(syscall.Signal); ok {
				forwardSignal(pid, sig)
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

// forwardSignal passes a signal the entry caught on to the app. A stop request
// (SIGTERM, SIGINT, SIGHUP, SIGQUIT) goes to the app's process group, as a
// terminal's does: the app and every process it started that stayed in
// its group (npm's node, a shell's pipeline) hear it. The launcher made
// the app the leader of a group of its own; if the app left it, the app
// alone hears it. SIGUSR1 and SIGUSR2 are the app's alone (to Node,
// SIGUSR1 starts the inspector).
func forwardSignal(app int, sig syscall.Signal) {
	switch sig {
	case unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT:
		if unix.Kill(-app, sig) == nil {
			return
		}
	}
	_ = unix.Kill(app, sig)
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
		if err == unix.ECHILD {
			// No child left to wait for: the app was reaped without us
			// (SIGCHLD ignored when the entry started). It is gone.
			return ExitExec, true
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

// Kill ends the app (SIGKILL) and waits until it is gone.
func Kill(pid int) {
	_ = unix.Kill(pid, unix.SIGKILL)
	waitFor(pid)
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

// netResult is serveNet's answer: the func that stops the network and the
// channel closed if the capability connection ends while it serves, or why
// it could not be set up.
type netResult struct {
	stop func()
	lost <-chan struct{}
	err  error
}

// netListener turns a listening socket into a net.Listener (which holds a
// duplicate) and closes f.
func netListener(f *os.File) (net.Listener, error) {
	defer f.Close()
	return net.FileListener(f)
}

// serveNet takes the Handle and serves the proxy and the forwards on ls. It
// owns cfg.Cap and ls: on error both are closed; on success the returned
// func stops them, and the channel is closed if the capability connection
// ends before that.
func serveNet(ctx context.Context, cfg Config, ls *Listeners, logger *slog.Logger) (func(), <-chan struct{}, error) {
	// Transparent egress first, before the supervisor's round trips: the
	// app (started already) waits for the entry on its first bind().
	tn, stopTransparent, err := startTransparent(ctx, cfg.ID, logger, ls)
	if err != nil {
		ls.close()
		_ = cfg.Cap.Close()
		return nil, nil, fmt.Errorf("transparent egress: %w", err)
	}
	attached := false
	defer func() {
		if !attached {
			stopTransparent()
		}
	}()
	conn, err := wire.FromFile(cfg.Cap, true)
	if err != nil {
		ls.close()
		return nil, nil, fmt.Errorf("using the capability socket: %w", err)
	}
	// Its peer is the supervisor: no backlog bound, which would stop
	// every stream of the vat while one slow app connection holds up
	// the supervisor's writes to it.
	rc := conn.RPCWith(capnp.Client{}, nil, wire.Limits{Backlog: math.MaxInt})
	bctx, cancel := context.WithTimeout(ctx, bootstrapTimeout)
	defer cancel()
	vat := schema.Vat(rc.Bootstrap(bctx))
	// The call says what the wall got for transparent egress: the
	// supervisor's status shows that, not what it planned.
	fut, rel := vat.Egress(bctx, func(p schema.Vat_egress_Params) error { return reportNotifier(p, ls) })
	res, err := fut.Struct()
	var handle schema.Handle
	if err == nil {
		handle = res.Handle().AddRef()
	}
	rel()
	if err != nil {
		vat.Release()
		ls.close()
		_ = rc.Close()
		return nil, nil, fmt.Errorf("asking the vat's capability for egress: %w", err)
	}
	// The proxy keeps vat for its direct switchboard connections
	// (SetDirect); released with the Handle on every failure below.
	var nls []net.Listener
	closeAll := func() {
		for _, l := range nls {
			_ = l.Close()
		}
	}
	for _, f := range append(slices.Clone(ls.Forwards), ls.Proxy) {
		if f == nil {
			continue
		}
		l, err := netListener(f)
		if err != nil {
			ls.close()
			closeAll()
			handle.Release()
			vat.Release()
			_ = rc.Close()
			return nil, nil, fmt.Errorf("serving %s: %w", f.Name(), err)
		}
		nls = append(nls, l)
	}
	proxy := NewProxy(cfg.ID, handle, conn, logger)
	if handle.IsValid() {
		proxy.SetDirect(vat)
	} else {
		vat.Release()
	}
	proxy.SetLimits(cfg.MaxConns, len(nls))
	tn.attach(ctx, proxy, nls)
	attached = true
	stopped := make(chan struct{})
	stop := func() {
		close(stopped)
		closeAll()
		stopTransparent()
		proxy.Close()
		_ = rc.Close()
	}
	lost := make(chan struct{})
	go func() {
		select {
		case <-rc.Done():
			close(lost)
		case <-stopped:
		}
	}()
	for i, f := range cfg.Forwards {
		go func() { _ = proxy.ServeForward(ctx, nls[i], f) }()
	}
	if ls.Proxy != nil {
		go func() { _ = proxy.ServeProxy(ctx, nls[len(nls)-1]) }()
	}
	return stop, lost, nil
}

// reportNotifier writes into p whether the wall asked for a connect()
// listener, whether the kernel gave it, and why not.
func reportNotifier(p schema.Vat_egress_Params, ls *Listeners) error {
	if ls.Notify == nil && ls.NotifyErr == nil {
		return nil // not asked
	}
	n, err := p.NewNotifier()
	if err != nil {
		return err
	}
	n.SetAsked(true)
	n.SetInstalled(ls.Notify != nil)
	if ls.Notify == nil {
		return n.SetWhy(ls.NotifyErr.Error())
	}
	return nil
}
