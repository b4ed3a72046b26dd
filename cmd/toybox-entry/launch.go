package main

import (
	"fmt"
	"os"
	"syscall"

	"toybox/vat/wall/entry"
)

// launch is the launcher's one reading of the flags and what it did with
// them. The launcher (launcher_linux.c) parses the flags before the Go
// runtime starts. main does not parse them again: it reads them here.
type launch struct {
	State launchState
	// launchNotRun: why the arguments were not a launch's, and the
	// argument that is about (BadAt: its index in the argv; 0: none).
	Why    string
	BadAt  int
	BadArg string
	// launchFailed: the step, the system call and its error (Port: the
	// port being bound).
	Stage launchStage
	Call  string
	Err   syscall.Errno
	Port  int
	// The flags, as the launcher read them.
	ID          string // --vat
	LogLevel    string // --log-level: debug, info, warn or error
	CapFD       int    // --cap-fd (-1: none)
	AppCapFD    int    // --app-cap-fd
	ProxyPort   int    // --proxy-port (0: none)
	Forwards    []entry.Forward
	Transparent bool // --egress-mode transparent
	// FenceFD is --task-fence-fd (-1: none). The launcher closes it once
	// it has read the fence.
	FenceFD int
	// RanFD is --ran-fd (-1: none). The launcher writes one byte to it
	// and closes it before anything else.
	RanFD  int
	ArgvAt int      // index in the argv of the app's argv[0]
	Argv   []string // the app's command
	// launchStarted: the app's pid and the listening sockets.
	Pid        int
	ProxyFD    int   // -1: none
	ForwardFDs []int // the --forward listeners, in the order of Forwards
	// Transparent egress: the app's notification listener (-1: the
	// kernel gave none, NotifyErr says why), the DNS stub's socket and
	// the connector's.
	NotifyFD, DNSFD, ConnectorFD int
	DNSTCPFD                     int // the DNS stub's TCP socket
	SchemeFD                     int // the listener for connects granted under another scheme
	NotifyErr                    syscall.Errno
	// A notification the launcher left to the Go half (nil: none), and
	// what it answered before the Go half ran: the binds and listens it
	// refused, the TCP ports the app listened on (all unless EarlyAll).
	Pending      []byte
	EarlyRefused int
	EarlyPorts   []uint16
	EarlyAll     bool
	// MCP: a stdio MCP vat's launch (no app; the spawner instead).
	MCP *launchMCP
	// Listen: the app's own port and the relay the launcher started.
	Listen *launchListen
}

// launchListen is --listen-port and --listen-path, and the relay the
// launcher started (its socket and pid).
type launchListen struct {
	Port              int
	Path              string
	RelayFD, RelayPid int
}

// launchMCP is the --mcp-* flags, and the spawner the launcher started.
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

// check returns why the launcher did not start the app, and the exit code
// for it; nil when it did.
func (l launch) check() (int, error) {
	switch l.State {
	case launchNotRun:
		why := l.Why
		if why == "" {
			why = "it did not run"
		}
		if l.BadAt > 0 {
			why = fmt.Sprintf("%s (argument %d, %q)", why, l.BadAt, l.BadArg)
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
			if len(l.Argv) > 0 {
				return entry.ExitExec, fmt.Errorf("starting %s: %w", l.Argv[0], l.Err)
			}
			return entry.ExitExec, fmt.Errorf("starting the app: %w", l.Err)
		}
		return entry.ExitSetup, fmt.Errorf("the launcher failed at step %d: %w", l.Stage, err)
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
		ls.Forwards = append(ls.Forwards, os.NewFile(uintptr(fd), fmt.Sprintf("listen:%d", l.Forwards[i].Port)))
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
		ls.Pending, ls.EarlyRefused = l.Pending, l.EarlyRefused
		ls.EarlyListened, ls.EarlyListenedAll = l.EarlyPorts, l.EarlyAll
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
