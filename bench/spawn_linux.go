package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"toybox/labels"
	"toybox/schema/wire"
	"toybox/vat/grant"
	"toybox/vat/sockpair"
	"toybox/vat/wall"
	"toybox/vat/wall/cgroup"
)

// spawnUID is who the walls run as when the runner is root (wall.Spec's
// default), and so who the bare baseline runs as too.
const spawnUID = 65534

// spawnSection times Spawns walled spawns (wall.Start: plan, bwrap,
// toybox-entry, then the app's exec, seen as its first byte on stdout)
// against bare bwrap spawns of the same static binary, interleaved.
func (r *run) spawnSection(ctx context.Context) {
	row := r.row(RowSpawn)
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		row.NotMeasured("bwrap is not installed")
		return
	}
	entry := filepath.Join(r.cfg.Bin, "toybox-entry")
	if err := needBinary(entry); err != nil {
		row.NotMeasured(errText(err))
		return
	}
	dir := filepath.Join(r.tmp, "spawn")
	state := filepath.Join(dir, "state")
	code := filepath.Join(state, "code", "benchvat")
	for _, d := range []string{code, state, filepath.Join(state, "data"), filepath.Join(state, "run")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			row.NotMeasured(errText(err))
			return
		}
	}
	app := filepath.Join(code, "benchvat")
	if err := copyFile(filepath.Join(r.cfg.Bin, "benchvat"), app, 0o755); err != nil {
		row.NotMeasured("copying benchvat: " + errText(err))
		return
	}
	// The grant's upstream is dialled lazily, and a spawn never dials it.
	sbSock := filepath.Join(r.tmp, "no-switchboard.sock")
	if r.sb != nil {
		sbSock = r.sb.Socket
	}
	up := grant.NewUpstream(grant.UpstreamConfig{Path: sbSock})
	defer up.Close()
	r.walls = wall.NewHost()
	// Each wall in a cgroup of its own, with toybox serve's default
	// limits, as a supervisor starts it.
	r.cgroups = cgroup.Open(cgroup.Config{Name: fmt.Sprintf("toybox-bench-%d", os.Getpid())})
	defer r.cgroups.Close()
	none := r.row(RowSpawnNone)
	var bare, walled, closed, ungrouped []time.Duration
	for i := range r.cfg.Spawns {
		d, err := bareSpawn(ctx, bwrap, app)
		if err != nil {
			row.NotMeasured("the bare bwrap spawn failed: " + errText(err))
			none.NotMeasured("the bare bwrap spawn failed: " + errText(err))
			return
		}
		bare = append(bare, d)
		if row.Verdict != VerdictNotMeasured {
			d, err = r.wallSpawn(ctx, fmt.Sprintf("spawn-%02d", i+1), entry, code, state, up, r.cgroups)
			if err != nil {
				row.NotMeasured("the walled spawn failed: " + errText(err))
			}
			walled = append(walled, d)
			// The same spawn with no cgroup: what the limits cost.
			if r.cgroups.Enabled() {
				d, err = r.wallSpawn(ctx, fmt.Sprintf("nogroup-%02d", i+1), entry, code, state, up, nil)
				if err != nil {
					row.NotMeasured("the walled spawn without a cgroup failed: " + errText(err))
				}
				ungrouped = append(ungrouped, d)
			}
		}
		if none.Verdict != VerdictNotMeasured {
			d, err = r.wallSpawn(ctx, fmt.Sprintf("closed-%02d", i+1), entry, code, state, nil, r.cgroups)
			if err != nil {
				none.NotMeasured("the walled spawn failed: " + errText(err))
			}
			closed = append(closed, d)
		}
	}
	b := Durations(bare, time.Millisecond)
	planMS := r.planTime(entry, code, state)
	common := fmt.Sprintf("%d spawns of each kind, interleaved, each timed from the start to the first byte the app writes on stdout; baseline = `bwrap --unshare-all --die-with-parent --ro-bind / / benchvat` as uid %d (p90 %.1f ms)", len(bare), spawnUID, b.Percentile(90))
	if sup := r.cgroups.Support(); sup.Version > 0 {
		common += fmt.Sprintf("; each wall in a cgroup of its own (v%d: 512 MiB, 1 CPU, 1024 tasks)", sup.Version)
	} else {
		common += "; no cgroup for the walls here"
	}
	if row.Verdict != VerdictNotMeasured {
		w := Durations(walled, time.Millisecond)
		row.Baseline, row.BaselineSamples = ptr(b.Median()), b
		row.Ours, row.OurSamples = ptr(w.Median()), w
		row.Note = fmt.Sprintf("%s; ours = wall.Start (plan, seccomp, binds, bwrap, toybox-entry) of a vat with one egress grant, so the wall's pid 1 is toybox-entry, which binds its proxy port, starts the app, then takes its capability; same binary and uid; p90 %.1f ms; wall.Start returned (bwrap reported the sandbox's pid) after a median %.1f ms, toybox-entry's first bytes on its capability socket (sent once the app is started) came at a median %.1f ms; wall.BuildPlan alone takes a median %.2f ms (a plan of %d bwrap operations and %d masks)",
			common, w.Percentile(90), Durations(r.spawnStarted, time.Millisecond).Median(), Durations(r.entrySeen, time.Millisecond).Median(), planMS, r.planOps, r.planMasks)
		if len(ungrouped) > 0 {
			u := Durations(ungrouped, time.Millisecond)
			row.Note += fmt.Sprintf("; the same spawn with no cgroup, interleaved: median %.1f ms (%.2f× the baseline), so the limits cost %+.1f ms (%.2f×)",
				u.Median(), u.Median()/b.Median(), w.Median()-u.Median(), w.Median()/u.Median())
		}
	}
	if none.Verdict != VerdictNotMeasured {
		w := Durations(closed, time.Millisecond)
		none.Baseline, none.BaselineSamples = ptr(b.Median()), b
		none.Ours, none.OurSamples = ptr(w.Median()), w
		none.Note = fmt.Sprintf("%s; ours = wall.Start of a vat with no grant (no way out: wall.Net{None: true}), same binary and uid; p90 %.1f ms", common, w.Percentile(90))
	}
}

// bareSpawn runs the baseline once and returns the time to the app's first
// byte.
func bareSpawn(ctx context.Context, bwrap, app string) (time.Duration, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer pr.Close()
	cmd := exec.CommandContext(ctx, bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", app, "spawned")
	cmd.Stdout = pw
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Getuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: spawnUID, Gid: spawnUID, Groups: []uint32{}}
	}
	var out [1]byte
	t0 := time.Now()
	err = cmd.Start()
	_ = pw.Close()
	if err != nil {
		return 0, err
	}
	_, rerr := io.ReadFull(pr, out[:])
	d := time.Since(t0)
	werr := cmd.Wait()
	if rerr != nil {
		return 0, errors.Join(fmt.Errorf("reading the app's first byte: %w", rerr), werr)
	}
	return d, werr
}

// wallSpawn starts one wall the way the supervisor does and returns the
// time to the app's first byte.
func (r *run) wallSpawn(ctx context.Context, id, entry, code, state string, up *grant.Upstream, cg *cgroup.Host) (time.Duration, error) {
	cfg := grant.VatConfig{ID: labels.VatID(id)}
	netShape := wall.Net{None: true}
	if up != nil {
		cfg.Grants = []labels.Set{{Scheme: "tcp", Host: r.sinkHost, Port: r.sinkPort}}
		cfg.Upstream = up
		netShape = wall.Net{}
	}
	gv, err := grant.NewVat(cfg)
	if err != nil {
		return 0, err
	}
	defer gv.Revoke()
	data, run := filepath.Join(state, "data", id), filepath.Join(state, "run", id)
	if err := os.MkdirAll(data, 0o755); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(run, 0o700); err != nil {
		return 0, err
	}
	defer os.RemoveAll(data)
	defer os.RemoveAll(run)
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer pr.Close()
	defer pw.Close()
	errf, err := os.CreateTemp(state, "stderr-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(errf.Name())
	defer errf.Close()

	t0 := time.Now()
	var seen func()
	record := !netShape.None && cg == r.cgroups // the row's own spawns: their times go in its note
	if record {
		seen = func() { r.entrySeen = append(r.entrySeen, time.Since(t0)) }
	}
	entryCap, err := capPair(ctx, gv, "entry-cap", seen)
	if err != nil {
		return 0, err
	}
	appCap, err := capPair(ctx, gv, "app-cap", nil)
	if err != nil {
		_ = entryCap.Close()
		return 0, err
	}
	spec := wall.Spec{
		ID: labels.VatID(id), Host: r.walls, InstallDir: code, Command: []string{"benchvat", "spawned"},
		DataDir: data, RunDir: run, StateDir: state,
		Net: netShape, EntryPath: entry, EntryCap: entryCap, AppCap: appCap,
		Stdout: pw, Stderr: errf,
		Cgroups: cg, Limits: cgroup.Limits{MemoryBytes: 512 << 20, CPUs: 1},
	}
	if netShape.None {
		_ = entryCap.Close()
		spec.EntryCap = nil
	}
	p, err := wall.Start(ctx, spec, nil)
	started := time.Since(t0)
	_ = pw.Close()
	if err != nil {
		return 0, err
	}
	var out [1]byte
	_, rerr := io.ReadFull(pr, out[:])
	d := time.Since(t0)
	if record {
		r.spawnStarted = append(r.spawnStarted, started)
	}
	werr := p.Wait()
	if rerr != nil {
		return 0, errors.Join(fmt.Errorf("reading the app's first byte: %w (its stderr: %s)", rerr, tail(errf.Name())), werr)
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return 0, werr
	}
	return d, nil
}

// capPair makes a socketpair, serves gv's bootstrap on one end and returns
// the other, which the caller owns. If seen is not nil, it is called when
// the first bytes arrive (the entry's bootstrap: it is running).
func capPair(ctx context.Context, gv *grant.Vat, name string, seen func()) (*os.File, error) {
	uc, theirs, err := sockpair.Pair(name)
	if err != nil {
		return nil, err
	}
	go func() {
		if seen != nil {
			if raw, err := uc.SyscallConn(); err == nil {
				first := true
				// Read calls the func again once the socket is readable.
				_ = raw.Read(func(uintptr) bool {
					if first {
						first = false
						return false
					}
					return true
				})
				seen()
			}
		}
		serve := gv.Serve
		if name == "entry-cap" {
			serve = gv.ServeEntry // as the supervisor serves toybox-entry
		}
		_ = serve(ctx, wire.NewConn(uc, false))
	}()
	return theirs, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// planTime returns the median time of wall.BuildPlan for the spawn spec, in
// ms (NaN if it fails): the pure part of a walled spawn.
func (r *run) planTime(entry, code, state string) float64 {
	id := "spawn-plan"
	data, run := filepath.Join(state, "data", id), filepath.Join(state, "run", id)
	if err := os.MkdirAll(data, 0o755); err != nil {
		return math.NaN()
	}
	if err := os.MkdirAll(run, 0o700); err != nil {
		return math.NaN()
	}
	defer os.RemoveAll(data)
	defer os.RemoveAll(run)
	spec := wall.Spec{
		ID: labels.VatID(id), Host: r.walls, InstallDir: code, Command: []string{"benchvat", "spawned"},
		DataDir: data, RunDir: run, StateDir: state, Net: wall.Net{}, EntryPath: entry,
	}
	var ds []time.Duration
	for range 10 {
		t0 := time.Now()
		plan, err := wall.BuildPlan(spec)
		if err != nil {
			r.log.Warn("wall.BuildPlan", "error", err)
			return math.NaN()
		}
		ds = append(ds, time.Since(t0))
		r.planOps, r.planMasks = len(plan.Ops), len(plan.Masks)
	}
	return Durations(ds, time.Millisecond).Median()
}
