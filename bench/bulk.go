package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"toybox/bench/load"
)

// pathRun is one way of moving bytes to the sink.
type pathRun struct {
	name  string
	bytes int64
	run   func(ctx context.Context, n int64) error
	// timed, when set, is how long the last run's transfer took as its own
	// process measured it (the app in the wall times itself; the request
	// that starts it through the supervisor is not the path measured).
	timed    time.Duration
	err      error // the path is dropped after more than half failed
	fails    int
	attempts int
	firstErr string
	secs     Samples
	mbps     Samples
	cpuGB    Samples                  // CPU seconds per GB moved
	byRep    map[int]float64          // MB/s by repeat, for paired ratios
	byProc   map[string]time.Duration // CPU by role over every transfer
	moved    int64
}

// breakdown says where the path's CPU went, per GB, by process role.
func (p *pathRun) breakdown() string {
	if p.moved == 0 {
		return ""
	}
	roles := make([]string, 0, len(p.byProc))
	for k := range p.byProc {
		roles = append(roles, k)
	}
	sort.Strings(roles)
	var parts []string
	for _, k := range roles {
		v := p.byProc[k].Seconds() / (float64(p.moved) / 1e9)
		if v < 0.005 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", k, v))
	}
	return p.name + ": " + strings.Join(parts, ", ")
}

// bulkSection moves Bytes through every path, Repeats times, interleaved
// (raw, proxy, handed-over socket, ByteStream, wall; then again), so that
// drift in the machine's load touches every path alike.
func (r *run) bulkSection(ctx context.Context) {
	sink := net.JoinHostPort(r.sinkHost, strconv.Itoa(int(r.sinkPort)))
	raw := &pathRun{name: "raw TCP", bytes: r.cfg.Bytes, run: func(ctx context.Context, n int64) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", sink)
		if err != nil {
			return err
		}
		defer c.Close()
		return load.Upload(c, n)
	}}
	proxy := &pathRun{name: "CONNECT proxy", bytes: r.cfg.Bytes, run: func(ctx context.Context, n int64) error {
		c, err := load.DialConnect(ctx, r.proxy.Addrs["proxy"], sink)
		if err != nil {
			return err
		}
		defer c.Close()
		return load.Upload(c, n)
	}}
	paths := []*pathRun{raw, proxy}
	var handoff, stream, wall *pathRun
	if r.sb != nil {
		client, err := DialSwitchboard(ctx, r.sb.Socket)
		if err != nil {
			r.sbErr = err
		} else {
			defer client.Close()
			handoff = &pathRun{name: "granted, socket handed over", bytes: r.cfg.Bytes, run: func(ctx context.Context, n int64) error {
				h, err := Constrain(ctx, client.Root, r.sinkHost, r.sinkPort)
				if err != nil {
					return err
				}
				defer h.Release()
				c, err := client.ConnectFD(ctx, h, r.sinkHost, r.sinkPort)
				if err != nil {
					return err
				}
				defer c.Close()
				return load.Upload(c, n)
			}}
			stream = &pathRun{name: "granted, ByteStream", bytes: r.cfg.StreamBytes, run: func(ctx context.Context, n int64) error {
				h, err := Constrain(ctx, client.Root, r.sinkHost, r.sinkPort)
				if err != nil {
					return err
				}
				defer h.Release()
				c, err := ConnectStream(ctx, h, r.sinkHost, r.sinkPort)
				if err != nil {
					return err
				}
				defer c.Close()
				return load.Upload(c, n)
			}}
			paths = append(paths, handoff, stream)
		}
	}
	var transparent *pathRun
	if r.wallVat != "" {
		inWall := func(p **pathRun, direct string) func(ctx context.Context, n int64) error {
			return func(ctx context.Context, n int64) error {
				var out struct {
					NS  int64  `json:"ns"`
					Err string `json:"error"`
				}
				q := fmt.Sprintf("/%s/upload?target=%s&bytes=%d%s", r.wallVat, sink, n, direct)
				if err := r.sup.GetJSON(ctx, q, &out); err != nil {
					return err
				}
				if out.Err != "" {
					return fmt.Errorf("the app in the wall: %s", out.Err)
				}
				if out.NS <= 0 {
					return fmt.Errorf("the app in the wall gave no time (ns %d)", out.NS)
				}
				(*p).timed = time.Duration(out.NS)
				return nil
			}
		}
		wall = &pathRun{name: "app in a wall", bytes: r.cfg.Bytes}
		wall.run = inWall(&wall, "")
		transparent = &pathRun{name: "app in a wall, transparent", bytes: r.cfg.Bytes}
		transparent.run = inWall(&transparent, "&direct=1")
		paths = append(paths, wall, transparent)
	}
	for i := range r.cfg.Repeats {
		// Each repeat starts the round at the next path, so that no path
		// always follows the same one; and each transfer starts once the
		// bench's processes are quiet: the ByteStream transfer leaves its
		// processes collecting garbage for a while, which would otherwise
		// always fall on the transfer after it.
		for k := range paths {
			p := paths[(i+k)%len(paths)]
			if p.err != nil {
				continue
			}
			r.settle()
			cpu0 := r.cpuByProc()
			p.timed = 0
			t0 := time.Now()
			err := p.run(ctx, p.bytes)
			d := time.Since(t0)
			cpu1 := r.cpuByProc()
			if p.timed > 0 {
				d = p.timed
			}
			cpu := sumCPU(cpu1) - sumCPU(cpu0)
			p.attempts++
			if err != nil {
				p.fails++
				if p.firstErr == "" {
					p.firstErr = err.Error()
				}
				if p.fails*2 > r.cfg.Repeats {
					p.err = fmt.Errorf("%d of %d transfers failed, first: %s", p.fails, p.attempts, p.firstErr)
				}
				r.log.Warn("bulk transfer failed", "path", p.name, "error", err)
				continue
			}
			if p.byProc == nil {
				p.byProc = map[string]time.Duration{}
			}
			for k, v := range cpu1 {
				p.byProc[k] += v - cpu0[k]
			}
			p.moved += p.bytes
			if p.byRep == nil {
				p.byRep = map[int]float64{}
			}
			p.byRep[i] = MBps(p.bytes, d)
			p.secs = append(p.secs, d.Seconds())
			p.mbps = append(p.mbps, MBps(p.bytes, d))
			p.cpuGB = append(p.cpuGB, cpu.Seconds()/(float64(p.bytes)/1e9))
			r.log.Info("bulk", "repeat", i+1, "path", p.name, "MB/s", fmt.Sprintf("%.0f", MBps(p.bytes, d)), "cpu_s_per_GB", fmt.Sprintf("%.2f", cpu.Seconds()/(float64(p.bytes)/1e9)))
		}
	}
	if raw.err != nil || proxy.err != nil || raw.fails > 0 || proxy.fails > 0 {
		for _, id := range []string{RowHandoff, RowStream, RowWallThru, RowCPUHandoff, RowCPUStream, RowCPUWall, RowTransThru} {
			r.row(id).NotMeasured(fmt.Sprintf("the baseline failed: raw %s, proxy %s", raw.firstErr, proxy.firstErr))
		}
		return
	}
	setThru := func(id string, base, ours *pathRun, missing string, note string) {
		row := r.row(id)
		row.Baseline, row.BaselineSamples = ptr(base.mbps.Median()), base.mbps
		switch {
		case ours == nil:
			row.NotMeasured(missing)
		case ours.err != nil:
			row.NotMeasured(ours.name + " failed: " + errText(ours.err))
		default:
			row.Ours, row.OurSamples = ptr(ours.mbps.Median()), ours.mbps
			row.Note = note + paired(base, ours)
			row.Failures, row.Attempts, row.FirstErr = ours.fails, ours.attempts, errText(errors.New(ours.firstErr))
		}
	}
	setCPU := func(id string, base, ours *pathRun, missing string, note string) {
		row := r.row(id)
		row.Baseline, row.BaselineSamples = ptr(base.cpuGB.Median()), base.cpuGB
		switch {
		case ours == nil:
			row.NotMeasured(missing)
		case ours.err != nil:
			row.NotMeasured(ours.name + " failed: " + errText(ours.err))
		default:
			row.Ours, row.OurSamples = ptr(ours.cpuGB.Median()), ours.cpuGB
			row.Note = note + "; CPU s/GB by process, " + base.breakdown() + "; " + ours.breakdown()
			row.Failures, row.Attempts, row.FirstErr = ours.fails, ours.attempts, errText(errors.New(ours.firstErr))
		}
	}
	size := func(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
	common := fmt.Sprintf("median of %d interleaved repeats (each starting at the next path, each transfer once the bench processes are quiet); one transfer = connect + %s upload (%d KiB writes) + the sink's 8-byte count", r.cfg.Repeats, size(r.cfg.Bytes), load.ChunkSize>>10)
	sbMissing := r.sbMissing()
	setThru(RowHandoff, raw, handoff, sbMissing, common+"; ours = constrain + connect(wantFd) through the switchboard process, then the same upload on the received socket")
	setThru(RowStream, raw, stream, sbMissing, fmt.Sprintf("median of %d repeats of a %s upload written as 64 KiB ByteStream messages under a 1 MiB flow window (toybox-entry's stream settings), switchboard → sink over TCP", r.cfg.Repeats, size(r.cfg.StreamBytes)))
	setThru(RowWallThru, proxy, wall, r.wallMissing(), common+"; ours = an app inside a real wall (bwrap, seccomp, toybox-entry) dials the in-wall CONNECT proxy, which connects through the vat's Handle (supervisor relay → switchboard, socket handed over) and splices; timed inside the app, the baseline from the host")
	setThru(RowTransThru, raw, transparent, r.wallMissing(), common+"; ours = an app inside a real wall calls connect() itself (no proxy): the entry's seccomp notifier connects through the vat's Handle and puts the switchboard's socket in place of the app's, so the upload runs on that socket with no relay; timed inside the app, the baseline from the host")
	cpuNote := "CPU time (user+sys) of every bench process (runner, targets = sink and echo, proxy, switchboard, supervisor and its walls) during the transfer, per GB moved; the runner's own reading of /proc is left out"
	setCPU(RowCPUHandoff, raw, handoff, sbMissing, cpuNote)
	setCPU(RowCPUStream, raw, stream, sbMissing, cpuNote)
	setCPU(RowCPUWall, proxy, wall, r.wallMissing(), cpuNote)
	// The proxy's own throughput against raw TCP, for the notes.
	if row := r.row(RowWallThru); row.Verdict != VerdictNotMeasured {
		row.Note += fmt.Sprintf("; for scale: raw loopback TCP %.0f MB/s, the plain proxy %.2f× of it", raw.mbps.Median(), proxy.mbps.Median()/raw.mbps.Median())
	}
}

func (r *run) wallMissing() string {
	switch {
	case r.wallErr != nil:
		return errText(r.wallErr)
	case r.supErr != nil:
		return "the supervisor did not run: " + errText(r.supErr)
	default:
		return "the supervisor did not run"
	}
}

// paired says what the ratio is repeat by repeat (each repeat ran the two
// paths back to back), which is less touched by drift in the machine's load
// than the ratio of the medians.
func paired(base, ours *pathRun) string {
	var rs Samples
	for i, o := range ours.byRep {
		if b, ok := base.byRep[i]; ok && b > 0 {
			rs = append(rs, o/b)
		}
	}
	if len(rs) == 0 {
		return ""
	}
	return fmt.Sprintf("; repeat by repeat the ratio was %.2f× at the median (%.2f–%.2f× over %d pairs)", rs.Median(), rs.Percentile(0.01), rs.Percentile(100), len(rs))
}
