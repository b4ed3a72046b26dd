package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/netutil"
	"golang.org/x/sys/unix"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"

	"toybox/cmd/internal/unixsock"
	"toybox/vat/doors"
	"toybox/vat/edge"
	"toybox/vat/grant"
	"toybox/vat/mcp/front"
	"toybox/vat/notices"
	"toybox/vat/store"
	"toybox/vat/supervisor"
	"toybox/vat/switches"
	"toybox/vat/ui"
	"toybox/vat/wall"
	"toybox/vat/wall/entry"
)

func init() { commands["serve"] = serveMain }

const serveUsage = `usage: toybox serve --state DIR --switchboard PATH [--http ADDR|unix:PATH] [--public-host NAME[,NAME]]... [--admin PATH] [--entry PATH] [--bwrap PATH] [--walls-table FILE] [--docker-socket PATH] [--doors FILE] [--wall-tmp-mib N] [--wall-max-tasks N] [--wall-memory-mib N] [--wall-cpus X] [--wall-disk-mib N] [--uid-base N] [--mcp-origin ORIGIN]... [--status 127.0.0.1:PORT] [--notice-command CMD | --notice-webhook URL] [--public-url URL]

Runs the supervisor: every installed vat starts, the admin API is served on
the admin socket (mode 0600) and each vat's app on the http socket, on its
own origin http://<vat>.<public host>/ and as /<vat>/... on the public
host itself. The public hosts are localhost (so http://<vat>.localhost:PORT/),
the loopback addresses and each --public-host; a request for any other
Host is refused (403). Under systemd socket activation the sockets named "http" and
"admin" are used instead of --http and --admin; "admin" must be a unix
socket (a TCP one is refused: every local user could reach it). One
supervisor per state dir: it holds <state>/serve.lock, and a second one
on the same dir is refused.

Limits: every wall has a cgroup of its own holding it to --wall-memory-mib
(no swap beyond it), --wall-cpus and --wall-max-tasks, and its data folder
a file system of --wall-disk-mib (root only). These are each vat's limits
and the most its owner may set (PUT /<vat>?memory_mib=N&cpus=X&disk_mib=N).
0 sets no limit of that kind. A limit this host cannot enforce is logged
once, and each vat's status says it runs without it (toybox doctor).

The admin socket also serves the status page (GET /ui/, ?lang=es in
Spanish) and the metrics (GET /metrics). --status serves both read-only on
a loopback address too; its credential is the token toybox keeps in
<state>/status.token (docs/operator.md).

Environment: TOYBOX_WALLS=off (kill switch: no walls at all),
TOYBOX_WALLS_DEFAULT=off (this computer runs vats unwalled), TOYBOX_LOG=debug.
`

func serveMain(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, serveUsage); fs.PrintDefaults() }
	stateDir := fs.String("state", "", "state directory (code, data, records)")
	sbPath := fs.String("switchboard", "", "the switchboard socket this supervisor holds (the most any vat can reach)")
	httpAddr := fs.String("http", "", "public HTTP listener: host:port or unix:PATH")
	var publicHosts []string
	fs.Func("public-host", "a name (or address) the public listener answers to, its vats at <vat>.NAME; repeat it or give a comma list (localhost and loopback addresses are always served)", func(v string) error {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n == "" {
				return errors.New("an empty name")
			}
			publicHosts = append(publicHosts, n)
		}
		return nil
	})
	adminPath := fs.String("admin", "", "admin unix socket path (created 0600)")
	entryPath := fs.String("entry", "", "toybox-entry binary (default: next to this binary)")
	bwrapPath := fs.String("bwrap", "", "the bubblewrap binary walls run (default: bwrap on PATH); toybox's own copy where AppArmor restricts user namespaces (toybox doctor)")
	tablePath := fs.String("walls-table", "", "the operator's table: approved commands, shared host resources, state folders (default: "+switches.TablePath+", where a missing file means none); root's alone, writable by no one else")
	dockerSock := fs.String("docker-socket", "", "a Docker socket whose reach an unwalled vat's status names, besides /run/docker.sock and /var/run/docker.sock")
	doorsPath := fs.String("doors", "", "the operator's door table (default: <state>/doors.json, where a missing file means no doors)")
	readyTimeout := fs.Duration("ready-timeout", 10*time.Second, "how long an app has to listen on $TOYBOX_LISTEN")
	stopGrace := fs.Duration("stop-grace", 5*time.Second, "time between SIGTERM and SIGKILL when stopping a vat")
	maxBody := fs.Int64("max-body", store.DefaultMaxBody, "largest code upload in bytes")
	wallTmp := fs.Int64("wall-tmp-mib", wall.TmpBytes>>20, "size of each wall's /tmp in MiB (it is memory: a tmpfs)")
	uidBase := fs.Int("uid-base", supervisor.DefaultUIDBase, "under root, the first host uid and gid of the vats: each vat gets one of its own from here up ("+fmt.Sprint(supervisor.VatIDSpan)+" of them)")
	wallTasks := fs.Int("wall-max-tasks", wall.MaxTasks, "most processes and threads in each wall (an app under toybox-entry, a vat with a way out, may use all but 32)")
	wallMemory := fs.Int64("wall-memory-mib", DefaultWallMemoryMiB, "each wall's memory in MiB, swap none beyond it (0: no limit); an owner may set less")
	wallCPUs := fs.Float64("wall-cpus", DefaultWallCPUs, "each wall's CPU time, in CPUs (0: no limit); an owner may set less")
	wallDisk := fs.Int64("wall-disk-mib", DefaultWallDiskMiB, "each vat's data folder in MiB, a file system of its own; needs root (0: no limit); an owner may set less")
	var mcpOrigins multiFlag
	fs.Var(&mcpOrigins, "mcp-origin", "a browser origin (scheme://host[:port]) other than an endpoint's own that may call the vats' MCP endpoints, such as a web MCP client's; repeatable")
	statusAddr := fs.String("status", "", "also serve the status page and /metrics on this loopback address (127.0.0.1:PORT), with the token in <state>/status.token as the credential")
	noticeCommand := fs.String("notice-command", "", "run this program (and its arguments, split at spaces) for each notice, the notice as JSON on its standard input")
	noticeWebhook := fs.String("notice-webhook", "", "POST each notice as JSON to this http URL on loopback")
	pkgFlags := packageFlags(fs)
	publicURL := fs.String("public-url", "", "where clients reach the public listener (scheme://host[:port], no path), behind any proxy; an MCP server with mcp.auth \"vat\" is told <URL>/<vat>/mcp as $MCP_PUBLIC_URL (default: http://localhost:PORT for a loopback --http, else none)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	sink, err := noticeSink(*noticeCommand, *noticeWebhook)
	if err != nil {
		fmt.Fprintf(os.Stderr, "toybox serve: %v\n", err)
		return 2
	}
	if *statusAddr != "" {
		if err := ui.CheckStatusAddr(*statusAddr); err != nil {
			fmt.Fprintf(os.Stderr, "toybox serve: %v\n", err)
			return 2
		}
		if *statusAddr == *httpAddr {
			fmt.Fprintf(os.Stderr, "toybox serve: --status %s is the public listener's address; the status page is never served there\n", *statusAddr)
			return 2
		}
	}
	pkgs, err := pkgFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "toybox serve:", err)
		return 2
	}
	if err := checkPublicURL(*publicURL); err != nil {
		fmt.Fprintf(os.Stderr, "toybox serve: --public-url: %v\n", err)
		return 2
	}
	hosts, err := edge.ParseHosts(publicHosts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "toybox serve: --public-host: %v\n", err)
		return 2
	}
	level := slog.LevelInfo
	if os.Getenv("TOYBOX_LOG") == "debug" {
		level = slog.LevelDebug
	}
	// The journal gets each record with the characters a terminal would
	// act on escaped (terminalJSON): records quote what vats wrote.
	journal := terminalJSON{os.Stderr}
	log := slog.New(slog.NewJSONHandler(journal, &slog.HandlerOptions{Level: level}))
	// The MCP edge's decision records, one a call, go out a few at a
	// time: written alone, each cost a write, more than a tenth of the
	// edge's share of a call. A crash loses at most edgeRecordDelay's.
	edgeRecords := entry.NewBatchWriter(journal, edgeRecordDelay)
	defer edgeRecords.Flush()
	edgeLog := slog.New(slog.NewJSONHandler(edgeRecords, &slog.HandlerOptions{Level: level}))
	if *stateDir == "" {
		fmt.Fprintln(os.Stderr, "toybox serve: --state is required")
		fs.Usage()
		return 2
	}
	if *wallTmp < 1 || *wallTmp > 1<<20 {
		fmt.Fprintf(os.Stderr, "toybox serve: --wall-tmp-mib %d: want 1 to %d\n", *wallTmp, 1<<20)
		return 2
	}
	if *uidBase < 65536 || *uidBase > 1<<31-1-supervisor.VatIDSpan {
		fmt.Fprintf(os.Stderr, "toybox serve: --uid-base %d: want 65536 to %d (above every system and login uid)\n", *uidBase, 1<<31-1-supervisor.VatIDSpan)
		return 2
	}
	if *wallTasks < 64 || *wallTasks > 1<<22 {
		fmt.Fprintf(os.Stderr, "toybox serve: --wall-max-tasks %d: want 64 to %d\n", *wallTasks, 1<<22)
		return 2
	}
	// Past maxLimitMiB a limit's bytes would overflow (<< 20) into
	// another limit; an infinite CPU count has no quota, and no JSON.
	if *wallMemory < 0 || *wallMemory > 0 && *wallMemory < 16 || *wallMemory > maxLimitMiB {
		fmt.Fprintf(os.Stderr, "toybox serve: --wall-memory-mib %d: want 0 (no limit) or 16 to %d\n", *wallMemory, maxLimitMiB)
		return 2
	}
	if *wallCPUs < 0 || *wallCPUs > 0 && *wallCPUs < 0.01 || math.IsNaN(*wallCPUs) || math.IsInf(*wallCPUs, 0) {
		fmt.Fprintf(os.Stderr, "toybox serve: --wall-cpus %g: want 0 (no limit) or a number of CPUs of at least 0.01\n", *wallCPUs)
		return 2
	}
	if *wallDisk < 0 || *wallDisk > 0 && *wallDisk < 16 || *wallDisk > maxLimitMiB {
		fmt.Fprintf(os.Stderr, "toybox serve: --wall-disk-mib %d: want 0 (no limit) or 16 to %d\n", *wallDisk, maxLimitMiB)
		return 2
	}
	if err := wallTasksFit(*wallTasks); err != nil {
		fmt.Fprintf(os.Stderr, "toybox serve: --wall-max-tasks %d: %v\n", *wallTasks, err)
		return 2
	}
	for _, o := range mcpOrigins {
		if _, err := front.ParseOrigin(o); err != nil {
			fmt.Fprintf(os.Stderr, "toybox serve: --mcp-origin: %v\n", err)
			return 2
		}
	}
	if err := runServe(serveOptions{
		bwrap: *bwrapPath, table: *tablePath, dockerSock: *dockerSock,
		state: *stateDir, switchboard: *sbPath, http: *httpAddr, admin: *adminPath, entry: *entryPath, doors: *doorsPath,
		readyTimeout: *readyTimeout, stopGrace: *stopGrace, maxBody: *maxBody, wallTmp: *wallTmp << 20, wallTasks: *wallTasks, uidBase: *uidBase, hosts: hosts, mcpOrigins: mcpOrigins, pkgs: pkgs, publicURL: *publicURL,
		wallMemory: *wallMemory << 20, wallCPUs: *wallCPUs, wallDisk: *wallDisk << 20,
		walls: os.Getenv("TOYBOX_WALLS"), wallsDefault: os.Getenv("TOYBOX_WALLS_DEFAULT"),
		status: *statusAddr, sink: sink, edgeLog: edgeLog,
	}, log); err != nil {
		log.Error("toybox serve", "error", err.Error())
		fmt.Fprintln(os.Stderr, "toybox serve:", err)
		return 1
	}
	return 0
}

// wallTasksFit says why n cannot be each wall's task limit. The supervisor
// sets it, soft and hard, on the wall's first process, which inherited this
// process's hard RLIMIT_NPROC; above it, without CAP_SYS_RESOURCE (a
// supervisor that is not root, or a container's root), the kernel refuses,
// and every walled vat would stay off. Whether this process may go above its
// own hard limit is tried, then undone.
func wallTasksFit(n int) error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &rl); err != nil || rl.Max == unix.RLIM_INFINITY || uint64(n) <= rl.Max {
		return nil
	}
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: rl.Cur, Max: uint64(n)}); err != nil {
		return fmt.Errorf("above this process's hard task limit (RLIMIT_NPROC), %d, which only CAP_SYS_RESOURCE may raise: raise it where toybox starts (LimitNPROC= in its unit) or ask for less", rl.Max)
	}
	_ = unix.Setrlimit(unix.RLIMIT_NPROC, &rl) // lowering: always allowed
	return nil
}

type serveOptions struct {
	state, switchboard, http, admin, entry, doors string
	bwrap, table, dockerSock                      string
	readyTimeout, stopGrace                       time.Duration
	maxBody, wallTmp                              int64
	wallTasks                                     int
	uidBase                                       int
	wallMemory, wallDisk                          int64
	wallCPUs                                      float64
	walls, wallsDefault                           string
	hosts                                         edge.Hosts
	mcpOrigins                                    []string
	status                                        string       // --status, "" for none
	sink                                          notices.Sink // nil: the log and the page only
	pkgs                                          supervisor.PackagesConfig
	publicURL                                     string
	edgeLog                                       *slog.Logger // the MCP edge's decision records
}

// edgeRecordDelay is how long an MCP edge decision record may wait to be
// written with others (entry.BatchWriter).
const edgeRecordDelay = 20 * time.Millisecond

// idleTimeout is how long each listener (public, admin, status) keeps a
// keep-alive connection no request comes on.
const idleTimeout = 2 * time.Minute

// The operator's limits for each wall by default (toybox serve flags).
const (
	DefaultWallMemoryMiB = 512     // a Node or Python server with room to spare
	DefaultWallCPUs      = 1.0     // one vat cannot take the whole of a small host
	DefaultWallDiskMiB   = 1024    // a vat's data and its package caches
	maxLimitMiB          = 1 << 30 // the largest an owner may ask (PUT ?memory_mib=)
)

// httpStopBudget bounds how long requests in flight may finish at shutdown.
const httpStopBudget = 5 * time.Second

func runServe(o serveOptions, log *slog.Logger) error {
	// One supervisor per state dir, taken before anything reads it.
	lock, err := store.Lock(o.state)
	if err != nil {
		return err
	}
	defer lock.Close()
	table, err := loadWallsTable(o, log)
	if err != nil {
		return err
	}
	sw, err := switches.New(switches.Config{
		Kill: o.walls, Default: o.wallsDefault, StateDir: o.state, Table: table,
		NoBwrap: func() bool { _, err := wall.LookBwrap(o.bwrap); return errors.Is(err, wall.ErrNoBwrap) },
	})
	if err != nil {
		return err
	}
	st, err := store.Open(store.Config{StateDir: o.state, MaxBody: o.maxBody, Logger: log})
	if err != nil {
		return err
	}
	if o.entry == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding toybox-entry: %w", err)
		}
		o.entry = filepath.Join(filepath.Dir(exe), "toybox-entry")
	}
	// supervisor.New opens the entry once, and warns here if it cannot:
	// every wall runs that file until toybox restarts.
	if sw.HostWalled() {
		pctx, pcancel := context.WithTimeout(context.Background(), 15*time.Second)
		if err := wall.Probe(pctx, o.bwrap); errors.Is(err, wall.ErrNoBwrap) {
			log.Error("bubblewrap is not installed: every walled vat stays off (off: bubblewrap is not installed on this computer)", "error", err.Error())
		} else if err != nil {
			// Vats stay off ("off: it could not run inside its wall"),
			// never unwalled; say why once, loudly.
			log.Error("walls cannot be built on this host: every walled vat stays off", "error", err.Error())
		}
		pcancel()
	}
	doorTable, err := loadDoors(o, log)
	if err != nil {
		return err
	}
	var up *grant.Upstream
	if o.switchboard != "" {
		abs, err := filepath.Abs(o.switchboard)
		if err != nil {
			return err
		}
		up = grant.NewUpstream(grant.UpstreamConfig{Path: abs, Logger: log})
		defer up.Close()
	} else {
		log.Warn("no --switchboard: no vat can be granted egress")
	}
	httpL, adminL, cleanup, err := listeners(o)
	if err != nil {
		return err
	}
	defer cleanup()
	cg, disks, prepare := openLimits(o, log)
	o.pkgs.Disks = prepare
	defer cg.Close()

	view := newOperatorView(sw, o.sink, log)
	sup, err := supervisor.New(supervisor.Config{
		Store: st, Switches: sw, Upstream: up, EntryPath: o.entry, Bwrap: o.bwrap, Doors: doorTable, DockerSockets: dockerSockets(o.dockerSock),
		Launch: func(ctx context.Context, spec wall.Spec, l *slog.Logger) (supervisor.Process, error) {
			p, err := wall.Start(ctx, spec, l)
			if err != nil {
				return nil, err
			}
			return p, nil
		},
		ReadyTimeout: o.readyTimeout, StopGrace: o.stopGrace, WallTmpBytes: o.wallTmp, WallMaxTasks: o.wallTasks, UIDBase: o.uidBase, Logger: log, EdgeLogger: o.edgeLog,
		Cgroups: cg, Disks: disks, Limits: supervisor.Limits{MemoryBytes: o.wallMemory, CPUs: o.wallCPUs, DiskBytes: o.wallDisk},
		OwnPorts: ownPorts(httpL), Hosts: o.hosts, MCPOrigins: o.mcpOrigins, Observer: view.activity, Packages: o.pkgs,
		PublicURL: publicURL(o.publicURL, httpL),
	})
	if err != nil {
		return err
	}
	if err := view.makeUI(sup, sw, up, o.wallTmp, log); err != nil {
		return err
	}

	// Before any vat starts: a SIGTERM from here on stops them in order
	// (before, it killed the supervisor at once and left its socket).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := sup.Start(); err != nil {
		log.Error("some installed vats could not be read", "error", err.Error())
	}
	vctx, vcancel := context.WithCancel(context.Background())
	defer vcancel()
	go view.notices.Watch(vctx)
	go view.bootNotices(vctx, sup, o.readyTimeout+5*time.Second)
	guard := supervisor.NewConnGuard()
	// ConnContext: each connection's framing (edge.Listener, below), so
	// a request with an ambiguous length closes its connection.
	pub := &http.Server{
		Handler: sup.PublicHandler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout,
		ConnState: guard.ConnState, ConnContext: edge.ConnContext, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// An idle keep-alive connection on the admin socket was held for
	// ever (a script making a client per call left one each).
	adm := &http.Server{Handler: view.adminHandler(sup), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 3)
	servers := []*http.Server{adm, pub}
	if o.status != "" {
		if err := view.listenStatus(o.status, o.state, log, errc); err != nil {
			_ = sup.Shutdown(context.Background())
			return err
		}
		servers = append(servers, view.status)
	}
	if httpL != nil {
		// Past supervisor.MaxPublicConns, new connections wait in the
		// listen queue: the supervisor keeps descriptors for its walls
		// and the admin socket. Before that, idle connections make room,
		// and no client holds more than supervisor.MaxClientConns.
		go func() {
			errc <- pub.Serve(guard.Listener(edge.Listener(netutil.LimitListener(httpL, supervisor.MaxPublicConns))))
		}()
	}
	go func() { errc <- adm.Serve(adminL) }()
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("sd_notify READY=1 failed", "error", err.Error())
	}
	log.Info("toybox serving", "state", st.StateDir(), "admin", adminL.Addr().String(), "http", addrOf(httpL), "public_hosts", o.hosts.Names(), "switchboard", o.switchboard, "entry", o.entry)

	var serveErr error
	select {
	case s := <-sigs:
		log.Info("stopping", "signal", s.String())
	case serveErr = <-errc:
		log.Error("a listener failed", "error", fmt.Sprint(serveErr))
	}
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	// The vats stop at once, each with its grace, while the listeners
	// close: a request held open (by a slow client, or an app that never
	// answers) does not hold the vats' SIGTERM back. It ends when its vat
	// does, or is cut when the listeners' short budget runs out.
	var wg sync.WaitGroup
	hctx, hcancel := context.WithTimeout(context.Background(), httpStopBudget)
	defer hcancel()
	for _, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if srv.Shutdown(hctx) != nil {
				_ = srv.Close()
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.stopGrace+10*time.Second)
	defer cancel()
	serr := sup.Shutdown(ctx)
	wg.Wait()
	if serr != nil {
		return fmt.Errorf("stopping the vats: %w", serr)
	}
	log.Info("stopped")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// loadWallsTable reads the operator's table: --walls-table FILE (which
// must exist), else switches.TablePath (where a missing file means none).
// A table that is refused stops toybox: approvals from a file someone
// else could write are never used, and none is guessed.
func loadWallsTable(o serveOptions, log *slog.Logger) (*switches.Table, error) {
	path, explicit := o.table, o.table != ""
	if !explicit {
		path = switches.TablePath
	}
	t, err := switches.LoadTable(path)
	if !explicit && errors.Is(err, os.ErrNotExist) {
		log.Info("no operator's table: no approved commands, shares or state folders", "walls_table", path)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	log.Info("operator's table read", "walls_table", path, "approved", len(t.Approved), "shares", len(t.Shares), "state", len(t.State))
	return t, nil
}

func dockerSockets(flag string) []string {
	if flag == "" {
		return nil
	}
	return []string{flag}
}

// loadDoors reads the operator's door table: --doors FILE (which must
// exist), else <state>/doors.json (where a missing file means no doors).
func loadDoors(o serveOptions, log *slog.Logger) (*doors.Table, error) {
	path, explicit := o.doors, o.doors != ""
	if !explicit {
		path = filepath.Join(o.state, "doors.json")
	}
	t, err := doors.LoadTable(path)
	if !explicit && errors.Is(err, os.ErrNotExist) {
		log.Info("no door table: no vat has doors", "doors", path)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the door table: %w", err)
	}
	log.Info("door table read", "doors", path, "sets", t.IDs())
	return t, nil
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// listeners returns the http and admin listeners: systemd's (by name) if
// the supervisor was socket-activated, else those the flags name.
func listeners(o serveOptions) (httpL, adminL net.Listener, cleanup func(), err error) {
	cleanup = func() {}
	if files := activation.Files(true); len(files) > 0 { // sets CloseOnExec, unsets the variables
		httpL, adminL, err = activatedListeners(files)
		return httpL, adminL, cleanup, err
	}
	if o.admin == "" {
		return nil, nil, cleanup, errors.New("--admin PATH is required (or socket activation with a socket named \"admin\")")
	}
	var closers []func()
	cleanup = func() {
		for _, c := range closers {
			c()
		}
	}
	adminL, err = unixsock.Listen(o.admin, 0o600)
	if err != nil {
		return nil, nil, cleanup, fmt.Errorf("admin socket: %w", err)
	}
	closers = append(closers, func() { _ = os.Remove(o.admin) })
	switch {
	case o.http == "":
	case strings.HasPrefix(o.http, "unix:"):
		p := strings.TrimPrefix(o.http, "unix:")
		httpL, err = unixsock.Listen(p, 0o666)
		if err != nil {
			cleanup()
			return nil, nil, func() {}, fmt.Errorf("http socket: %w", err)
		}
		closers = append(closers, func() { _ = os.Remove(p) })
	default:
		httpL, err = net.Listen("tcp", o.http)
		if err != nil {
			cleanup()
			return nil, nil, func() {}, fmt.Errorf("http listener: %w", err)
		}
	}
	return httpL, adminL, cleanup, nil
}

// activatedListeners takes the sockets systemd passed (files[i] is fd
// 3+i, named by LISTEN_FDNAMES): the first named "http", and the first
// named "admin", which must be a listening unix stream socket, as every
// socket named "admin" must be: the admin API installs code, so only a
// socket file's owner and mode may decide who reaches it, never TCP, which
// every local user can connect to. A socket that fails is an error, not a
// silent skip; sockets of other names are closed. Every file is closed
// (the listeners hold duplicates).
func activatedListeners(files []*os.File) (httpL, adminL net.Listener, err error) {
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
		if err != nil {
			for _, l := range []net.Listener{httpL, adminL} {
				if l != nil {
					_ = l.Close()
				}
			}
			httpL, adminL = nil, nil
		}
	}()
	for i, f := range files {
		name := f.Name()
		var take *net.Listener
		switch name {
		case "http":
			take = &httpL
		case "admin":
			if err := unixsock.CheckListener(f); err != nil {
				return httpL, adminL, fmt.Errorf("activated fd %d (admin): %w; the admin API is served only on a unix socket", 3+i, err)
			}
			take = &adminL
		default:
			continue
		}
		if *take != nil {
			continue
		}
		l, err := net.FileListener(f)
		if err != nil {
			return httpL, adminL, fmt.Errorf("activated fd %d (%s): %w", 3+i, name, err)
		}
		*take = l
	}
	if adminL == nil {
		return httpL, adminL, errors.New("socket-activated without a socket named \"admin\"")
	}
	return httpL, adminL, nil
}

// ownPorts returns the TCP port of the supervisor's http socket, which no
// manifest may point a vat at.
// checkPublicURL checks a --public-url: "" (none), or an http or https
// URL with a host and nothing after it but an optional "/".
func checkPublicURL(v string) error {
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an http:// or https:// URL", v)
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return fmt.Errorf("%q: want scheme://host[:port] and nothing else", v)
	case u.Path != "" && u.Path != "/":
		return fmt.Errorf("%q: want no path (the vats are at <URL>/<vat>/...)", v)
	}
	return nil
}

// publicURL is the --public-url given, else http://localhost:PORT for a
// loopback TCP listener (what a client on this host uses), else "".
func publicURL(given string, l net.Listener) string {
	if given != "" {
		return strings.TrimSuffix(given, "/")
	}
	if l == nil {
		return ""
	}
	if a, ok := l.Addr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
		return "http://localhost:" + strconv.Itoa(a.Port)
	}
	return ""
}

func ownPorts(l net.Listener) []uint16 {
	if l == nil {
		return nil
	}
	if a, ok := l.Addr().(*net.TCPAddr); ok {
		return []uint16{uint16(a.Port)}
	}
	return nil
}
