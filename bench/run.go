package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"toybox/vat/wall"
	"toybox/vat/wall/cgroup"
)

// Config is one run of the benchmarks. The zero value of each size takes
// the default noted; the defaults keep `make bench` under 10 minutes on 2
// cores.
type Config struct {
	// Bin is the directory holding switchboard, toybox, toybox-entry and
	// benchvat (built by make bench). A missing binary makes the rows that
	// need it "not measured", with the reason.
	Bin string
	// Self is this runner's binary, started again as the helpers.
	Self string
	// Repeats is how many times each bulk transfer runs. If zero, 11.
	Repeats int
	// Bytes is the size of one bulk transfer. If zero, 1 GiB.
	Bytes int64
	// StreamBytes is the size of one ByteStream transfer. If zero, Bytes.
	StreamBytes int64
	// LatencyRounds × LatencyPerRound connects per path, interleaved by
	// round. If zero, 20 × 100.
	LatencyRounds, LatencyPerRound int
	// Spawns is how many spawns of each kind. If zero, 40.
	Spawns int
	// Vats is how many vats are installed (each timed) and then held idle
	// for the memory figure. If zero, 30.
	Vats int
	// HeldConns is how many granted connections the switchboard holds for
	// the memory figure. If zero, 10000.
	HeldConns int
	// MCPSessions is how many new MCP sessions are timed (initialize and
	// the first tools/call). If zero, 40.
	MCPSessions int
	// MCPCalls is how many tools/call each path makes on one session for
	// the calls-per-second figure. If zero, 4000.
	MCPCalls int
	// Commit names the code measured. If empty, it is read with git from
	// the current directory (with a remark when the tree has uncommitted
	// changes).
	Commit string
	// Only names the sections to run (install, bulk, latency, spawn,
	// packages, held, mcp); empty runs them all. A section left out leaves its rows
	// unmeasured: for a developer's look at one figure, not for results.
	Only []string
	// Logger receives progress. If nil, discarded.
	Logger *slog.Logger
}

// want reports whether section runs.
func (c *Config) want(section string) bool {
	return len(c.Only) == 0 || slices.Contains(c.Only, section)
}

func (c *Config) defaults() {
	if c.Repeats == 0 {
		c.Repeats = 11
	}
	if c.Bytes == 0 {
		c.Bytes = 1 << 30
	}
	if c.StreamBytes == 0 {
		c.StreamBytes = c.Bytes
	}
	if c.LatencyRounds == 0 {
		c.LatencyRounds = 20
	}
	if c.LatencyPerRound == 0 {
		c.LatencyPerRound = 100
	}
	if c.Spawns == 0 {
		c.Spawns = 40
	}
	if c.Vats == 0 {
		c.Vats = 30
	}
	if c.HeldConns == 0 {
		c.HeldConns = 10000
	}
	if c.MCPSessions == 0 {
		c.MCPSessions = 40
	}
	if c.MCPCalls == 0 {
		c.MCPCalls = 4000
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Row ids, in table order.
const (
	RowHandoff         = "handoff-throughput"
	RowStream          = "bytestream-throughput"
	RowConnectP50      = "connect-latency-p50"
	RowConnectP99      = "connect-latency-p99"
	RowWallThru        = "wall-throughput"
	RowWallLatency     = "wall-connect-latency-p50"
	RowWallP99         = "wall-connect-latency-p99"
	RowWallCPU         = "wall-connect-cpu"
	RowTransCPU        = "transparent-connect-cpu"
	RowSpawn           = "walled-spawn"
	RowSpawnNone       = "walled-spawn-no-way-out"
	RowInstall         = "install-first-response"
	RowIdleVat         = "idle-vat-rss"
	RowHeldConns       = "switchboard-rss-10k"
	RowCPUHandoff      = "cpu-per-gb-handoff"
	RowCPUStream       = "cpu-per-gb-bytestream"
	RowCPUWall         = "cpu-per-gb-wall"
	RowRawLatency      = "raw-dial-echo-latency"
	RowProxyThru       = "connect-proxy-throughput"
	RowMCPInit         = "mcp-initialize-p50"
	RowMCPFirstCall    = "mcp-first-tools-call"
	RowMCPRate         = "mcp-session-calls-per-second"
	RowPackageStart    = "package-start-initialize"
	RowPackageRegistry = "package-start-registry-requests"
	RowTransP50        = "transparent-connect-latency-p50"
	RowTransP99        = "transparent-connect-latency-p99"
	RowTransThru       = "transparent-throughput"
	sbListenTimeout    = 10 * time.Second
)

// newRows returns the table's rows, not yet measured.
func newRows() []*Row {
	return []*Row{
		{ID: RowHandoff, Figure: "bulk throughput over a granted connection (socket handed over)", Unit: "MB/s", BaselineName: "raw loopback TCP", Target: Target{Kind: RatioAtLeast, Value: 0.9}},
		{ID: RowStream, Figure: "throughput over the ByteStream fallback", Unit: "MB/s", BaselineName: "raw loopback TCP", Target: Target{Kind: ReportRatio, Value: 0.25}},
		{ID: RowConnectP50, Figure: "connect latency p50 (constrain + connect, pipelined, + first echoed byte)", Unit: "µs", BaselineName: "plain Go CONNECT proxy", Target: Target{Kind: RatioAtMost, Value: 1.0}},
		{ID: RowConnectP99, Figure: "connect latency p99 (constrain + connect, pipelined, + first echoed byte)", Unit: "µs", BaselineName: "plain Go CONNECT proxy", Target: Target{Kind: ReportRatio}}, // the target is the p50
		{ID: RowWallThru, Figure: "app in a wall → CONNECT proxy → switchboard → sink, throughput", Unit: "MB/s", BaselineName: "plain Go CONNECT proxy", Target: Target{Kind: RatioAtLeast, Value: 1.0}},
		{ID: RowWallLatency, Figure: "same path, connect latency p50", Unit: "µs", BaselineName: "plain Go CONNECT proxy", Target: Target{Kind: RatioAtMost, Value: 1.0}},
		{ID: RowWallP99, Figure: "same path, connect latency p99", Unit: "µs", BaselineName: "plain Go CONNECT proxy", Target: Target{Kind: RatioAtMost, Value: 1.2}},
		{ID: RowWallCPU, Figure: "same path, CPU per connect of toybox's processes (entry, supervisor, switchboard)", Unit: "µs", BaselineName: "the plain Go CONNECT proxy's", Target: Target{Kind: RatioAtMost, Value: 1.0}},
		{ID: RowTransP50, Figure: "app in a wall, plain connect() (transparent egress), connect latency p50", Unit: "µs", BaselineName: "plain Go CONNECT proxy", Target: Target{Kind: RatioAtMost, Value: 1.0}},
		{ID: RowTransP99, Figure: "same path, connect latency p99", Unit: "µs", BaselineName: "plain Go CONNECT proxy", Target: Target{Kind: RatioAtMost, Value: 1.2}},
		{ID: RowTransCPU, Figure: "same path, CPU per connect of toybox's processes (entry, supervisor, switchboard)", Unit: "µs", BaselineName: "the plain Go CONNECT proxy's", Target: Target{Kind: RatioAtMost, Value: 1.0}},
		{ID: RowTransThru, Figure: "app in a wall, plain connect() (transparent egress) → sink, throughput on the socket handed over", Unit: "MB/s", BaselineName: "raw loopback TCP", Target: Target{Kind: RatioAtLeast, Value: 0.95}},
		{ID: RowSpawn, Figure: "walled spawn to app exec, vat with a grant (entry + proxy), median", Unit: "ms", BaselineName: "bare bwrap spawn", Target: Target{Kind: RatioAtMost, Value: 1.5}},
		{ID: RowSpawnNone, Figure: "walled spawn to app exec, vat with no way out, median", Unit: "ms", BaselineName: "bare bwrap spawn", Target: Target{Kind: RatioAtMost, Value: 1.5}},
		{ID: RowInstall, Figure: "install → first response, static Go vat (median)", Unit: "ms", Target: Target{Kind: AtMost, Value: 150}},
		{ID: RowIdleVat, Figure: "RSS per idle vat (supervisor share + bwrap + entry)", Unit: "MiB", Target: Target{Kind: AtMost, Value: 12}},
		{ID: RowHeldConns, Figure: "switchboard RSS with 10,000 granted connections open", Unit: "MiB", Target: Target{Kind: AtMost, Value: 64}},
		{ID: RowPackageStart, Figure: "start of an installed npm MCP server → first initialize answer (median)", Unit: "ms", BaselineName: "npx from a warm cache", Target: Target{Kind: RatioAtMost, Value: 0.3}},
		{ID: RowPackageRegistry, Figure: "registry requests while an installed npm MCP server starts", Unit: "requests", Target: Target{Kind: AtMost, Value: 0}},
		{ID: RowCPUHandoff, Figure: "CPU per GB, granted connection (socket handed over)", Unit: "CPU s/GB", BaselineName: "raw loopback TCP", Target: Target{Kind: ReportRatio}},
		{ID: RowCPUStream, Figure: "CPU per GB, ByteStream fallback", Unit: "CPU s/GB", BaselineName: "raw loopback TCP", Target: Target{Kind: ReportRatio}},
		{ID: RowCPUWall, Figure: "CPU per GB, app in a wall → proxy → switchboard", Unit: "CPU s/GB", BaselineName: "plain Go CONNECT proxy", Target: Target{Kind: ReportRatio}},
		{ID: RowMCPInit, Figure: "MCP initialize through the edge, stdio vat with a warm spare, p50", Unit: "ms", Target: Target{Kind: AtMost, Value: 50}},
		{ID: RowMCPFirstCall, Figure: "MCP first tools/call of a new session, stdio vat, median", Unit: "ms", Target: Target{Kind: ReportOnly}},
		{ID: RowMCPRate, Figure: "MCP tools/call per second on one session, stdio vat through the edge", Unit: "calls/s", BaselineName: "the same server over its own HTTP transport", Target: Target{Kind: RatioAtLeast, Value: 0.9}},
	}
}

// run is the state of one run.
type run struct {
	cfg  Config
	log  *slog.Logger
	tmp  string
	rows map[string]*Row

	targets, proxy *Helper
	sinkHost       string
	sinkPort       uint16
	echoPort       uint16

	sb           *Switchboard // nil when it could not start
	sbErr        error
	sup          *Supervisor // nil when it could not start
	supErr       error
	wallVat      string          // the vat that measures the wall path; "" if none
	spawnStarted []time.Duration // how long wall.Start took, per walled spawn
	entrySeen    []time.Duration // when toybox-entry first spoke on its capability
	planOps      int             // operations in the spawn's plan
	planMasks    int             // masks in the spawn's plan
	scanCost     time.Duration   // the runner's CPU spent reading /proc
	wallErr      error
	cgroups      *cgroup.Host // the spawned walls' cgroups
	walls        *wall.Host   // what the spawned walls share, as a supervisor's do
}

func (r *run) row(id string) *Row { return r.rows[id] }

// Run runs every benchmark and returns the results. It fails only when the
// baselines themselves cannot run; a piece of toybox that cannot run makes
// its rows "not measured" with the reason.
func Run(ctx context.Context, cfg Config) (Results, error) {
	cfg.defaults()
	if abs, err := filepath.Abs(cfg.Bin); err == nil {
		cfg.Bin = abs
	}
	start := time.Now()
	res := Results{Started: start.UTC().Format(time.RFC3339), Machine: ReadMachine()}
	res.Commit = cfg.Commit
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil && res.Commit == "" {
		res.Commit = strings.TrimSpace(string(out))
		if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(out) > 0 {
			res.Commit += " (built from the working tree, which had uncommitted changes)"
		}
	}
	tmp, err := os.MkdirTemp("", "toybench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return res, err
	}
	r := &run{cfg: cfg, log: cfg.Logger, tmp: tmp, rows: map[string]*Row{}}
	rows := newRows()
	for _, row := range rows {
		r.rows[row.ID] = row
	}
	if _, err := RaiseNoFile(1 << 17); err != nil {
		return res, fmt.Errorf("raising RLIMIT_NOFILE: %w", err)
	}
	if err := r.startHelpers(ctx); err != nil {
		return res, err
	}
	defer r.targets.Stop()
	defer r.proxy.Stop()

	r.sb, r.sbErr = StartSwitchboard(ctx, filepath.Join(cfg.Bin, "switchboard"), filepath.Join(tmp, "sb"), r.log)
	if r.sb != nil {
		defer r.sb.Stop()
	}
	if r.sbErr != nil {
		r.log.Warn("switchboard not running", "error", r.sbErr)
	}

	// The supervisor: installs, idle memory, then the vat that measures
	// the wall path.
	if cfg.want("install") || cfg.want("bulk") || cfg.want("latency") {
		r.supervisorSection(ctx)
	} else if cfg.want("mcp") {
		sbSock := ""
		if r.sb != nil {
			sbSock = r.sb.Socket
		}
		r.sup, r.supErr = StartSupervisor(ctx, cfg.Bin, filepath.Join(tmp, "toybox"), sbSock, r.log)
	}
	if r.sup != nil {
		defer r.sup.Stop()
	}

	if cfg.want("bulk") {
		r.bulkSection(ctx)
	}
	if cfg.want("latency") {
		r.latencySection(ctx)
	}
	if cfg.want("mcp") {
		r.mcpSection(ctx)
	}
	if cfg.want("spawn") {
		r.spawnSection(ctx)
	}
	if r.sup != nil {
		r.sup.Stop()
		r.sup = nil
	}
	if cfg.want("packages") {
		r.packagesSection(ctx)
	}
	if cfg.want("held") {
		r.heldConnsSection(ctx)
	}

	for _, row := range rows {
		if row.Verdict == "" {
			row.Judge()
		}
		res.Rows = append(res.Rows, *row)
	}
	res.Duration = time.Since(start).Round(time.Second).String()
	return res, nil
}

func (r *run) startHelpers(ctx context.Context) error {
	var err error
	if r.targets, err = StartHelper(ctx, r.cfg.Self, HelperTargets); err != nil {
		return err
	}
	if r.proxy, err = StartHelper(ctx, r.cfg.Self, HelperProxy); err != nil {
		_ = r.targets.Stop()
		return err
	}
	host, port, err := splitHostPort(r.targets.Addrs["sink"])
	if err != nil {
		return err
	}
	r.sinkHost, r.sinkPort = host, port
	if _, r.echoPort, err = splitHostPort(r.targets.Addrs["echo"]); err != nil {
		return err
	}
	return nil
}

// cpuByProc is the CPU used so far by this runner and every process of the
// bench (the helpers "targets" (sink and echo) and "proxy", the
// switchboard, the supervisor and everything below it), by role.
//
// Reading /proc costs the runner CPU; that cost is kept out of the runner's
// figure (it is measurement, not work of any path).
func (r *run) cpuByProc() map[string]time.Duration {
	begin := SelfCPU()
	out := map[string]time.Duration{}
	add := func(role string, pid int) {
		if d, err := ProcCPU(pid); err == nil {
			out[role] += d
		}
	}
	add("targets", r.targets.Pid())
	add("proxy", r.proxy.Pid())
	if r.sb != nil {
		add("switchboard", r.sb.Pid())
	}
	if r.sup != nil {
		add("supervisor", r.sup.Pid())
		if ds, err := Descendants(r.sup.Pid()); err == nil {
			for _, d := range ds {
				role := "app"
				if d.Comm == "bwrap" || d.Comm == "toybox-entry" {
					role = d.Comm
				}
				add(role, d.Pid)
			}
		}
	}
	end := SelfCPU()
	r.scanCost += end - begin
	out["runner"] = end - r.scanCost
	return out
}

// settle waits until the bench's processes together use less than a tenth
// of a core over 20 ms, for at most a second.
func (r *run) settle() {
	const window = 20 * time.Millisecond
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		before := sumCPU(r.cpuByProc())
		time.Sleep(window)
		if sumCPU(r.cpuByProc())-before < window/10 {
			return
		}
	}
}

func sumCPU(m map[string]time.Duration) time.Duration {
	var t time.Duration
	for _, d := range m {
		t += d
	}
	return t
}

// missing says why a row that needs the switchboard is not measured.
func (r *run) sbMissing() string {
	if r.sbErr != nil {
		return "the switchboard did not run: " + r.sbErr.Error()
	}
	return "the switchboard did not run"
}

func errText(err error) string {
	if err == nil {
		return "unknown"
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strings.ReplaceAll(s, "|", "/")
}
