// Command toybox-entry is the first program inside a wall. bubblewrap runs it
// as the wall's pid 1; it runs the app with exactly fds 0, 1, 2 and 3 (fd 3
// from --app-cap-fd) in a process group of its own, forwards stop requests
// to that group, reaps every orphan, and serves the vat's CONNECT proxy and
// forwarded ports through the vat's Handle (from --cap-fd; absent for a vat
// with no way out):
//
//	toybox-entry --vat ID [--cap-fd N --proxy-port P [--forward PORT=HOST:PORT]...] [--listen-port N --listen-path PATH] [--task-fence-fd N] [--ran-fd N] --app-cap-fd N -- APP [ARGS...]
//
// With --task-fence-fd the supervisor sends, on that socket, the app's and
// the entry's cgroup.procs: the app starts in a group of its own whose
// pids.max leaves the entry its reserve of tasks (docs/walls.md).
//
// With --ran-fd it writes one byte to that descriptor and closes it before
// anything else: the supervisor then knows bubblewrap built the wall and
// ran the entry, whatever the app prints.
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
// environment. The launcher (launcher_linux.c) parses them once, before the
// Go runtime starts, and main takes its reading.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"time"

	"toybox/vat/mcp"
	"toybox/vat/mcp/bridge"
	"toybox/vat/wall/entry"
)

// maxProcs is how many threads run the entry's Go code at once: one. Its
// work comes in short steps (a decision, a Cap'n Proto call, a splice the
// kernel does), and with one P a goroutine that readies another hands it
// the thread instead of waking a second one, which costs more than the
// step on a machine where a thread switch is dear. No goroutine of the
// entry's waits in a blocking call (its listeners, the seccomp listener
// and the connector's socket wait in the runtime's poller), so none holds
// the P from the others.
const maxProcs = 1

// recordDelay is how long the entry's records (the proxy's and the
// bridge's decisions) may wait to be written together (entry.BatchWriter).
const recordDelay = 20 * time.Millisecond

// usage is the synopsis main prints when the launcher refused the flags.
const usage = "usage: toybox-entry --vat ID [--cap-fd N --proxy-port P [--forward PORT=HOST:PORT]... [--egress-mode transparent|proxy]] " +
	"[--listen-port N --listen-path PATH] [--task-fence-fd N] [--ran-fd N] [--mcp stdio --mcp-fd N [--mcp-mode M] [--mcp-era E] [--mcp-max-procs N] [--mcp-idle-seconds S]] " +
	"[--log-level L] --app-cap-fd N -- APP [ARGS...]"

func main() {
	// The app already runs, or was refused: the launcher (launcher_linux.c)
	// parsed the flags and acted on them before the Go runtime started.
	// Its reading is the one reading: main does not parse them again.
	l := launched()
	// A stop request from here on is forwarded to the app (Go's default
	// would end this pid 1 with exit 2, the app never hearing it).
	entry.CatchSignals()
	// The app starts 32 tasks below the wall's task limit (the launcher's
	// TE_TASK_RESERVE, in the wall's cgroup where it has one, else in
	// RLIMIT_NPROC): this runtime's threads must fit in them beside an
	// app at its own limit. At most maxProcs threads run Go
	// code, plus the runtime's few.
	if runtime.GOMAXPROCS(0) > maxProcs {
		runtime.GOMAXPROCS(maxProcs)
	}

	// One JSON record per decision, on the vat's log, written a few at a
	// time: one write a connect or a call would cost the entry a syscall
	// and the supervisor a wake-up on the connect's own path.
	records := entry.NewBatchWriter(os.Stderr, recordDelay)
	failed := func(code int, err error) {
		records.Flush()
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
	if code, err := l.check(); err != nil {
		if l.State == launchNotRun {
			fmt.Fprintln(os.Stderr, usage)
		}
		failed(code, err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.LogLevel)); err != nil {
		failed(entry.ExitSetup, fmt.Errorf("--log-level: %w", err))
	}
	cfg := entry.Config{
		ID:        l.ID,
		ProxyPort: l.ProxyPort,
		Forwards:  l.Forwards,
		App:       l.Pid,
		Listeners: l.listeners(),
		// JSON, and every egress decision (info) whatever the level.
		Logger: slog.New(slog.NewJSONHandler(records, &slog.HandlerOptions{Level: min(level, slog.LevelInfo)})),
	}
	if l.CapFD >= 3 {
		cfg.Cap = os.NewFile(uintptr(l.CapFD), "entry-cap")
	}
	if l.Listen != nil {
		cfg.Listen = &entry.Listen{Port: l.Listen.Port, Relay: os.NewFile(uintptr(l.Listen.RelayFD), "listen-relay"), RelayPid: l.Listen.RelayPid}
	}
	if l.MCP != nil {
		mode, err := bridge.ParseMode(l.MCP.Mode)
		if err != nil {
			failed(entry.ExitSetup, err)
		}
		cfg.MCP = &entry.MCP{
			Listener:   os.NewFile(uintptr(l.MCP.FD), "mcp-listen"),
			Spawner:    os.NewFile(uintptr(l.MCP.SpawnerFD), "mcp-spawner"),
			SpawnerPid: l.MCP.SpawnerPid,
			Mode:       mode,
			Era:        mcp.Era(l.MCP.Era),
			MaxProcs:   l.MCP.MaxProcs,
			Idle:       time.Duration(l.MCP.IdleSeconds) * time.Second,
			Logger:     slog.New(slog.NewJSONHandler(records, &slog.HandlerOptions{Level: slog.LevelInfo})),
		}
		code := entry.RunMCP(context.Background(), cfg)
		records.Flush()
		os.Exit(code)
	}
	code := entry.Run(context.Background(), cfg)
	records.Flush()
	os.Exit(code)
}
