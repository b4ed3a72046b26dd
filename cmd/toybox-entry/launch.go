package main

import (
	"fmt"
	"os"
	"slices"
	"syscall"

	"toybox/vat/wall/entry"
)

// launch is what the launcher (launcher_linux.c) did before main ran.
type launch struct {
	State launchState
	Why   string // launchNotRun: why the arguments were not a launch's
	// launchFailed: the step, the system call and its error (Port: the
	// port being bound).
	Stage launchStage
	Call  string
	Err   syscall.Errno
	Port  int
	// launchStarted: the app's pid and the listening sockets.
	Pid          int
	ArgvAt       int // index in os.Args of the app's argv[0]
	CapFD        int
	AppCapFD     int
	ProxyPort    int
	ProxyFD      int   // -1: none
	ForwardPorts []int // the --forward ports, in order
	ForwardFDs   []int // their listening sockets
	// Transparent egress (--egress-mode transparent): the app's
	// notification listener (-1: the kernel gave none, NotifyErr says
	// why), the DNS stub's socket and the connector's.
	Transparent                  bool
	NotifyFD, DNSFD, ConnectorFD int
	DNSTCPFD                     int // the DNS stub's TCP socket
	SchemeFD                     int // the listener for connects granted under another scheme
	NotifyErr                    syscall.Errno
	// FenceFD is --task-fence-fd as the launcher read it (-1: none); the
	// launcher closes it once it has read the fence.
	FenceFD int
	// MCP: a stdio MCP vat's launch (no app; the spawner instead).
	MCP *launchMCP
	// Listen: the app's own port and the relay the launcher started.
	Listen *launchListen
}

// launchListen is what the launcher read of --listen-port and
// --listen-path, and the relay it started (its socket and pid).
type launchListen struct {
	Port              int
	Path              string
	RelayFD, RelayPid int
}

// launchMCP is what the launcher read of the --mcp-* flags, and the
// spawner it started.
type launchMCP struct {
	FD                    int // the bridge's listening socket
	Mode, Era             string
	MaxProcs, IdleSeconds int
	SpawnerFD, SpawnerPid int
}

type launchState int

const (
	launchNotRun launchState = iota
	launchStarted
	launchFailed
)

type launchStage int

const (
	stageNone launchStage = iota
	stageDumpable
	stageCloexec
	stageForward
	stageProxy
	stageSpawn
	stageCaps
	stageClose
	stageLock
	stageSpawner
	stageMCPFD
	stageListen
	stageNotify
	stageFence
)

// flags is main's own reading of the arguments the launcher read.
type flags struct {
	capFD, appCapFD, proxyPort int
	fenceFD                    int
	transparent                bool
	forwards                   []entry.Forward
	argv                       []string
	mcp                        *launchMCP // FD, Mode, Era, MaxProcs, IdleSeconds as main read them
	listenPort                 int
	listenPath                 string
}

// check returns why the launch did not start the app as f says it should,
// and the exit code for it; nil when it did.
func (l launch) check(f flags) (int, error) {
	switch l.State {
	case launchNotRun:
		why := l.Why
		if why == "" {
			why = "it did not run"
		}
		return entry.ExitSetup, fmt.Errorf("the launcher did not start the app: %s", why)
	case launchFailed:
		err := os.NewSyscallError(l.Call, l.Err)
		switch l.Stage {
		case stageDumpable:
			return entry.ExitSetup, fmt.Errorf("making the entry undumpable: %w", err)
		case stageCaps:
			return entry.ExitSetup, fmt.Errorf("the capability descriptors (--cap-fd %d, --app-cap-fd %d): %w", l.CapFD, l.AppCapFD, err)
		case stageClose:
			return entry.ExitSetup, fmt.Errorf("closing the descriptors the entry does not hold: %w", err)
		case stageLock:
			return entry.ExitSetup, fmt.Errorf("installing the entry's own seccomp filter: %w", err)
		case stageSpawner:
			return entry.ExitSetup, fmt.Errorf("starting the MCP spawner: %w", err)
		case stageMCPFD:
			return entry.ExitSetup, fmt.Errorf("the MCP listener (--mcp-fd): %w", err)
		case stageListen:
			return entry.ExitSetup, fmt.Errorf("starting the relay to the app's port %d: %w", l.Port, err)
		case stageNotify:
			return entry.ExitSetup, fmt.Errorf("setting up transparent egress: %w", err)
		case stageFence:
			return entry.ExitSetup, fmt.Errorf("fencing the app's tasks off the entry's reserve: %w", err)
		case stageCloexec:
			return entry.ExitSetup, fmt.Errorf("marking descriptors close-on-exec: %w", err)
		case stageForward:
			return entry.ExitSetup, fmt.Errorf("forwarding port %d: %s 127.0.0.1:%d: %w", l.Port, l.Call, l.Port, l.Err)
		case stageProxy:
			return entry.ExitSetup, fmt.Errorf("serving the proxy on port %d: %s 127.0.0.1:%d: %w", l.Port, l.Call, l.Port, l.Err)
		case stageSpawn:
			if len(f.argv) > 0 {
				return entry.ExitExec, fmt.Errorf("starting %s: %w", f.argv[0], l.Err)
			}
			return entry.ExitExec, fmt.Errorf("starting the app: %w", l.Err)
		}
		return entry.ExitSetup, fmt.Errorf("the launcher failed at step %d: %w", l.Stage, err)
	}
	ports := make([]int, len(f.forwards))
	for i, fw := range f.forwards {
		ports[i] = int(fw.Port)
	}
	if (l.MCP == nil) != (f.mcp == nil) || (l.MCP != nil && (l.MCP.FD != f.mcp.FD || l.MCP.Mode != f.mcp.Mode || l.MCP.Era != f.mcp.Era ||
		l.MCP.MaxProcs != f.mcp.MaxProcs || l.MCP.IdleSeconds != f.mcp.IdleSeconds || l.MCP.SpawnerFD < 3 || l.MCP.SpawnerPid <= 0)) {
		return entry.ExitSetup, fmt.Errorf("the launcher read the MCP flags differently (%+v, %+v)", l.MCP, f.mcp)
	}
	if (l.Listen == nil) != (f.listenPort == 0) || (l.Listen != nil && (l.Listen.Port != f.listenPort || l.Listen.Path != f.listenPath || l.Listen.RelayFD < 3 || l.Listen.RelayPid <= 0)) {
		return entry.ExitSetup, fmt.Errorf("the launcher read the listen flags differently (%+v; port %d, path %q)", l.Listen, f.listenPort, f.listenPath)
	}
	if l.FenceFD != f.fenceFD {
		return entry.ExitSetup, fmt.Errorf("the launcher read --task-fence-fd differently (%d/%d)", l.FenceFD, f.fenceFD)
	}
	if l.CapFD != f.capFD || l.AppCapFD != f.appCapFD || l.ProxyPort != f.proxyPort || l.Transparent != f.transparent ||
		!slices.Equal(l.ForwardPorts, ports) || l.ArgvAt != len(os.Args)-len(f.argv) {
		return entry.ExitSetup, fmt.Errorf("the launcher read the arguments differently (cap %d/%d, app cap %d/%d, proxy port %d/%d, forwards %v/%v, command at %d/%d)",
			l.CapFD, f.capFD, l.AppCapFD, f.appCapFD, l.ProxyPort, f.proxyPort, l.ForwardPorts, ports, l.ArgvAt, len(os.Args)-len(f.argv))
	}
	return 0, nil
}

// listeners are the sockets the launcher bound, for entry.Run (nil when the
// vat has no network).
func (l launch) listeners() *entry.Listeners {
	if l.CapFD < 3 {
		return nil
	}
	ls := &entry.Listeners{}
	for i, fd := range l.ForwardFDs {
		ls.Forwards = append(ls.Forwards, os.NewFile(uintptr(fd), fmt.Sprintf("listen:%d", l.ForwardPorts[i])))
	}
	if l.ProxyFD >= 0 {
		ls.Proxy = os.NewFile(uintptr(l.ProxyFD), fmt.Sprintf("listen:%d", l.ProxyPort))
	}
	if l.DNSFD >= 0 {
		ls.DNS = os.NewFile(uintptr(l.DNSFD), "dns")
	}
	if l.DNSTCPFD >= 0 {
		ls.DNSTCP = os.NewFile(uintptr(l.DNSTCPFD), "dns-tcp")
	}
	if l.SchemeFD >= 0 {
		ls.Scheme = os.NewFile(uintptr(l.SchemeFD), "scheme")
	}
	if l.ConnectorFD >= 0 {
		ls.Connector = os.NewFile(uintptr(l.ConnectorFD), "connector")
	}
	if l.NotifyFD >= 0 {
		ls.Notify = os.NewFile(uintptr(l.NotifyFD), "seccomp-notify")
	} else if l.Transparent {
		ls.NotifyErr = notifyErr(l.NotifyErr)
	}
	return ls
}

// notifyErr says why the kernel gave the app's filter no listener.
func notifyErr(e syscall.Errno) error {
	if e == syscall.EBUSY {
		// Only one filter of a process's chain may have a listener.
		return fmt.Errorf("the kernel refused a seccomp listener for connect() (%w): toybox runs under another seccomp notifier", e)
	}
	return fmt.Errorf("the kernel refused a seccomp listener for connect(): %w", e)
}
