// Command toybox-entry is the first program inside a wall. bubblewrap runs it
// as the wall's pid 1; it runs the app with exactly fds 0, 1, 2 and 3 (fd 3
// from --app-cap-fd) in a process group of its own, forwards stop requests
// to that group, reaps every orphan, and serves the vat's CONNECT proxy and
// forwarded ports through the vat's Handle (from --cap-fd; absent for a vat
// with no way out):
//
//	toybox-entry --vat ID [--cap-fd N --proxy-port P [--forward PORT=HOST:PORT]...] [--listen-port N --listen-path PATH] [--task-fence-fd N] --app-cap-fd N -- APP [ARGS...]
//
// With --task-fence-fd the supervisor sends, on that socket, the app's and
// the entry's cgroup.procs: the app starts in a group of its own whose
// pids.max leaves the entry its reserve of tasks (docs/walls.md).
//
// With --listen-port the app listens on a TCP port of the wall's loopback:
// once it accepts, the entry makes the unix socket --listen-path names
// ($TOYBOX_LISTEN) and relays each connection there to the port.
//
// With --mcp stdio it serves a stdio MCP vat instead: the bridge on the
// listening socket --mcp-fd names, which starts APP per session
// (--mcp-mode, --mcp-era, --mcp-max-procs, --mcp-idle-seconds; see
// docs/mcp.md), and no app runs until a client comes.
//
// Its configuration is flags only, so nothing of it reaches the app's
// environment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"toybox/vat/mcp"
	"toybox/vat/mcp/bridge"
	"toybox/vat/wall/entry"
)

// maxProcs bounds the threads that run the entry's Go code.
const maxProcs = 8

// mcpRecordDelay is how long the bridge's decision records may wait to be
// written together (entry.BatchWriter).
const mcpRecordDelay = 5 * time.Millisecond

type forwards []entry.Forward

func (f *forwards) String() string { return fmt.Sprint(*f) }

func (f *forwards) Set(s string) error {
	portText, hostPort, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want PORT=HOST:PORT, got %q", s)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return fmt.Errorf("bad port %q", portText)
	}
	host, tp, err := net.SplitHostPort(hostPort)
	if err != nil {
		return err
	}
	tport, err := strconv.ParseUint(tp, 10, 16)
	if err != nil || tport == 0 || host == "" {
		return fmt.Errorf("bad target %q", hostPort)
	}
	if !entry.ForwardHostOK(host) {
		return fmt.Errorf("bad host %q", host)
	}
	*f = append(*f, entry.Forward{Port: uint16(port), Host: host, TargetPort: uint16(tport)})
	return nil
}

func main() {
	// The app already runs, or was refused: the launcher (launcher_linux.c)
	// ran before the Go runtime. What it did is checked against this
	// parse of the same flags.
	l := launched()
	// A stop request from here on is forwarded to the app (Go's default
	// would end this pid 1 with exit 2, the app never hearing it).
	entry.CatchSignals()
	// The app starts 32 tasks below the wall's task limit (the launcher's
	// TE_TASK_RESERVE, in the wall's cgroup where it has one, else in
	// RLIMIT_NPROC): this runtime's threads must fit in them beside an
	// app at its own limit. At most maxProcs threads run Go
	// code (the relays splice in the kernel), plus the runtime's few.
	if runtime.GOMAXPROCS(0) > maxProcs {
		runtime.GOMAXPROCS(maxProcs)
	}
	fs := flag.NewFlagSet("toybox-entry", flag.ContinueOnError)
	id := fs.String("vat", "", "the vat's id")
	capFD := fs.Int("cap-fd", -1, "the entry's capability socket (absent: no way out)")
	appCapFD := fs.Int("app-cap-fd", -1, "the socket that becomes the app's fd 3")
	fenceFD := fs.Int("task-fence-fd", -1, "the socket the supervisor sends the app's and the entry's cgroup.procs on (absent: the wall's cgroup keeps no reserve)")
	proxyPort := fs.Int("proxy-port", 0, "the CONNECT proxy's port on 127.0.0.1 (0: none)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	egressMode := fs.String("egress-mode", "proxy", "transparent: the app's connect() calls are answered through the Handle too; proxy: the proxy alone")
	var fwd forwards
	fs.Var(&fwd, "forward", "PORT=HOST:PORT: serve 127.0.0.1:PORT, connect through the Handle (repeatable)")
	mcpTransport := fs.String("mcp", "", "stdio: serve the command as a stdio MCP server through the bridge")
	mcpFD := fs.Int("mcp-fd", -1, "the bridge's listening socket (with --mcp)")
	mcpMode := fs.String("mcp-mode", "", "session, shared or single (with --mcp; empty: session)")
	mcpEra := fs.String("mcp-era", "", "legacy, modern or dual: the vat's era from its install probe (with --mcp)")
	mcpMaxProcs := fs.Int("mcp-max-procs", 0, "the most processes of the command at once (with --mcp; 0: 8)")
	mcpIdle := fs.Int("mcp-idle-seconds", 0, "end a session idle this long (with --mcp; 0: 600)")
	listenPort := fs.Int("listen-port", 0, "the app's own TCP port on loopback, which $TOYBOX_LISTEN is relayed to (0: none)")
	listenPath := fs.String("listen-path", "", "$TOYBOX_LISTEN, made once the app's port accepts (with --listen-port)")
	failed := func(code int, err error) {
		if err != nil {
			fmt.Fprintln(os.Stderr, "toybox-entry:", err)
		}
		if l.Pid > 0 {
			// Fail closed: no app runs on in a wall the entry cannot serve.
			entry.Kill(l.Pid)
		}
		if l.MCP != nil && l.MCP.SpawnerPid > 0 {
			entry.Kill(l.MCP.SpawnerPid)
		}
		if l.Listen != nil && l.Listen.RelayPid > 0 {
			entry.Kill(l.Listen.RelayPid)
		}
		os.Exit(code)
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		failed(entry.ExitSetup, nil) // the flag package said why
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		failed(entry.ExitSetup, fmt.Errorf("--log-level: %w", err))
	}
	if *appCapFD < 3 {
		failed(entry.ExitSetup, errors.New("--app-cap-fd is required"))
	}
	if len(fs.Args()) == 0 {
		failed(entry.ExitExec, errors.New("no command"))
	}
	if *egressMode != "transparent" && *egressMode != "proxy" {
		failed(entry.ExitSetup, fmt.Errorf("--egress-mode %q is not transparent or proxy", *egressMode))
	}
	f := flags{capFD: *capFD, appCapFD: *appCapFD, fenceFD: *fenceFD, proxyPort: *proxyPort, transparent: *egressMode == "transparent", forwards: fwd, argv: fs.Args(), listenPort: *listenPort, listenPath: *listenPath}
	if *mcpTransport != "" {
		f.mcp = &launchMCP{FD: *mcpFD, Mode: *mcpMode, Era: *mcpEra, MaxProcs: *mcpMaxProcs, IdleSeconds: *mcpIdle}
	}
	if code, err := l.check(f); err != nil {
		failed(code, err)
	}
	cfg := entry.Config{
		ID:        *id,
		ProxyPort: *proxyPort,
		Forwards:  fwd,
		App:       l.Pid,
		Listeners: l.listeners(),
		// JSON, and every egress decision (info) whatever the level:
		// one record each, on the vat's log.
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: min(level, slog.LevelInfo)})),
	}
	if *capFD >= 3 {
		cfg.Cap = os.NewFile(uintptr(*capFD), "entry-cap")
	}
	if l.Listen != nil {
		cfg.Listen = &entry.Listen{Port: l.Listen.Port, Relay: os.NewFile(uintptr(l.Listen.RelayFD), "listen-relay"), RelayPid: l.Listen.RelayPid}
	}
	if l.MCP != nil {
		mode, err := bridge.ParseMode(*mcpMode)
		if err != nil {
			failed(entry.ExitSetup, err)
		}
		records := entry.NewBatchWriter(os.Stderr, mcpRecordDelay)
		cfg.MCP = &entry.MCP{
			Listener:   os.NewFile(uintptr(l.MCP.FD), "mcp-listen"),
			Spawner:    os.NewFile(uintptr(l.MCP.SpawnerFD), "mcp-spawner"),
			SpawnerPid: l.MCP.SpawnerPid,
			Mode:       mode,
			Era:        mcp.Era(*mcpEra),
			MaxProcs:   *mcpMaxProcs,
			Idle:       time.Duration(*mcpIdle) * time.Second,
			// One JSON record per decision, on the vat's log, written
			// a few at a time (one a call would cost more than the call).
			Logger: slog.New(slog.NewJSONHandler(records, &slog.HandlerOptions{Level: slog.LevelInfo})),
		}
		code := entry.RunMCP(context.Background(), cfg)
		records.Flush()
		os.Exit(code)
	}
	os.Exit(entry.Run(context.Background(), cfg))
}
