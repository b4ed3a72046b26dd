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

// latPath is one way of reaching the echo server.
type latPath struct {
	name string
	// round makes n connects and returns the times of those that worked
	// and the errors of those that did not; err means the path itself
	// could not be tried.
	round    func(ctx context.Context, n int) (got []time.Duration, fails []string, err error)
	err      error
	got      []time.Duration
	fails    int
	attempts int
	firstErr string
	byProc   map[string]time.Duration // CPU by process role over every round
	dial     []time.Duration          // of each connect that worked, where the path says: until connected
}

// perConnect says how much CPU each process spent per connect on the path.
func (p *latPath) perConnect() string {
	if p.attempts == 0 {
		return ""
	}
	roles := make([]string, 0, len(p.byProc))
	for k := range p.byProc {
		roles = append(roles, k)
	}
	sort.Strings(roles)
	var parts []string
	for _, k := range roles {
		us := float64(p.byProc[k].Microseconds()) / float64(p.attempts)
		if us < 5 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f", k, us))
	}
	return p.name + ": " + strings.Join(parts, ", ")
}

// connectTimeout bounds one connect + echo.
const connectTimeout = 10 * time.Second

// one turns a single connect into a round of n.
func one(f func(ctx context.Context) error) func(ctx context.Context, n int) ([]time.Duration, []string, error) {
	return func(ctx context.Context, n int) ([]time.Duration, []string, error) {
		out := make([]time.Duration, 0, n)
		var fails []string
		for range n {
			cctx, cancel := context.WithTimeout(ctx, connectTimeout)
			t0 := time.Now()
			err := f(cctx)
			d := time.Since(t0)
			cancel()
			if err != nil {
				fails = append(fails, err.Error())
				continue
			}
			out = append(out, d)
		}
		return out, fails, nil
	}
}

// latencySection times connect + first echoed byte on every path, in
// rounds: a round of each path, then the next round.
func (r *run) latencySection(ctx context.Context) {
	echo := net.JoinHostPort(r.sinkHost, strconv.Itoa(int(r.echoPort)))
	raw := &latPath{name: "raw dial + echo", round: one(func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", echo)
		if err != nil {
			return err
		}
		defer c.Close()
		return echoOne(c)
	})}
	proxy := &latPath{name: "CONNECT proxy", round: one(func(ctx context.Context) error {
		c, err := load.DialConnect(ctx, r.proxy.Addrs["proxy"], echo)
		if err != nil {
			return err
		}
		defer c.Close()
		return load.EchoOnce(c)
	})}
	paths := []*latPath{raw, proxy}
	var sb, piped, wall *latPath
	var phases [3][]time.Duration // constrain, connect + take the socket, echo
	if r.sb != nil {
		client, err := DialSwitchboard(ctx, r.sb.Socket)
		if err != nil {
			r.sbErr = err
		} else {
			defer client.Close()
			sb = &latPath{name: "switchboard", round: one(func(ctx context.Context) error {
				t0 := time.Now()
				h, err := Constrain(ctx, client.Root, r.sinkHost, r.echoPort)
				if err != nil {
					return err
				}
				defer h.Release()
				t1 := time.Now()
				c, err := client.ConnectFD(ctx, h, r.sinkHost, r.echoPort)
				if err != nil {
					return err
				}
				defer c.Close()
				t2 := time.Now()
				if err := echoOne(c); err != nil {
					return err
				}
				phases[0] = append(phases[0], t1.Sub(t0))
				phases[1] = append(phases[1], t2.Sub(t1))
				phases[2] = append(phases[2], time.Since(t2))
				return nil
			})}
			piped = &latPath{name: "switchboard, pipelined", round: one(func(ctx context.Context) error {
				c, err := client.ConnectFDPipelined(ctx, client.Root, r.sinkHost, r.echoPort)
				if err != nil {
					return err
				}
				defer c.Close()
				return echoOne(c)
			})}
			paths = append(paths, sb, piped)
		}
	}
	var transparent *latPath
	if r.wallVat != "" {
		inWall := func(direct string, dials *[]time.Duration) func(ctx context.Context, n int) ([]time.Duration, []string, error) {
			return func(ctx context.Context, n int) ([]time.Duration, []string, error) {
				var out struct {
					NS     []int64  `json:"ns"`
					Dial   []int64  `json:"dial"`
					Errors []string `json:"errors"`
				}
				q := fmt.Sprintf("/%s/latency?target=%s&n=%d%s", r.wallVat, echo, n, direct)
				if err := r.sup.GetJSON(ctx, q, &out); err != nil {
					return nil, nil, err
				}
				ds := make([]time.Duration, len(out.NS))
				for i, ns := range out.NS {
					ds[i] = time.Duration(ns)
				}
				for _, ns := range out.Dial {
					*dials = append(*dials, time.Duration(ns))
				}
				return ds, out.Errors, nil
			}
		}
		wall = &latPath{name: "app in a wall"}
		wall.round = inWall("", &wall.dial)
		transparent = &latPath{name: "app in a wall, transparent"}
		transparent.round = inWall("&direct=1", &transparent.dial)
		paths = append(paths, wall, transparent)
	}
	for range r.cfg.LatencyRounds {
		for _, p := range paths {
			if p.err != nil {
				continue
			}
			// Each round's CPU is its own: counted from a quiet start
			// until the processes are quiet again, so that the work a
			// round leaves behind (its sockets' ends, the garbage it
			// made, collected) is counted with it and not with the next
			// path's round.
			r.settle()
			cpu0 := r.cpuByProc()
			ds, fails, err := p.round(ctx, r.cfg.LatencyPerRound)
			r.settle()
			cpu1 := r.cpuByProc()
			if p.byProc == nil {
				p.byProc = map[string]time.Duration{}
			}
			for k, v := range cpu1 {
				p.byProc[k] += v - cpu0[k]
			}
			if err != nil {
				p.err = err
				r.log.Warn("latency path failed", "path", p.name, "error", err)
				continue
			}
			p.got = append(p.got, ds...)
			p.attempts += len(ds) + len(fails)
			p.fails += len(fails)
			if len(fails) > 0 {
				if p.firstErr == "" {
					p.firstErr = fails[0]
				}
				r.log.Warn("connects failed", "path", p.name, "failed", len(fails), "of", len(ds)+len(fails), "first", fails[0])
			}
			if p.fails*2 > p.attempts {
				p.err = fmt.Errorf("%d of %d connects failed, first: %s", p.fails, p.attempts, p.firstErr)
			}
		}
	}
	for _, p := range paths {
		us := Durations(p.got, time.Microsecond)
		r.log.Info("latency", "path", p.name, "n", len(us), "p50_us", fmt.Sprintf("%.0f", us.Percentile(50)), "p99_us", fmt.Sprintf("%.0f", us.Percentile(99)))
	}
	if proxy.err != nil || raw.err != nil || proxy.fails > 0 || raw.fails > 0 {
		for _, id := range []string{RowConnectP50, RowConnectP99, RowWallLatency, RowTransP50, RowTransP99} {
			r.row(id).NotMeasured(fmt.Sprintf("the baseline failed: raw %v %s, proxy %v %s", raw.err, raw.firstErr, proxy.err, proxy.firstErr))
		}
		return
	}
	base := Durations(proxy.got, time.Microsecond)
	rawUS := Durations(raw.got, time.Microsecond)
	n := r.cfg.LatencyRounds * r.cfg.LatencyPerRound
	set := func(id string, p float64, ours *latPath, missing, note string) {
		row := r.row(id)
		row.Baseline = ptr(base.Percentile(p))
		switch {
		case ours == nil:
			row.NotMeasured(missing)
		case ours.err != nil:
			row.NotMeasured(ours.name + " failed: " + errText(ours.err))
		default:
			row.Ours = ptr(Durations(ours.got, time.Microsecond).Percentile(p))
			row.Note = note
			row.Failures, row.Attempts, row.FirstErr = ours.fails, ours.attempts, errText(errors.New(ours.firstErr))
		}
	}
	scale := fmt.Sprintf("raw dial + 1-byte echo: p50 %.0f µs, p99 %.0f µs", rawUS.Percentile(50), rawUS.Percentile(99))
	note := fmt.Sprintf("%d connects per path in %d interleaved rounds of %d; baseline = dial the proxy + CONNECT + 200 + 1-byte echo; ours = constrain(root → tcp host:port) and connect(wantFd) on the handle constrain promises, sent together (Cap'n Proto promise pipelining: one round trip), + take the socket + 1-byte echo, from a client holding a switchboard connection; for scale, %s", n, r.cfg.LatencyRounds, r.cfg.LatencyPerRound, scale)
	if sb != nil && sb.err == nil && len(sb.got) > 0 {
		su := Durations(sb.got, time.Microsecond)
		note += fmt.Sprintf("; the same without pipelining (connect sent once constrain has answered: two round trips; measured in the same rounds, not the row's figure): p50 %.0f µs, p99 %.0f µs, %d of %d failed", su.Percentile(50), su.Percentile(99), sb.fails, sb.attempts)
		if len(phases[0]) > 0 {
			p := func(i int) float64 { return Durations(phases[i], time.Microsecond).Median() }
			note += fmt.Sprintf(", by phase (medians): constrain %.0f µs, connect until the socket is taken %.0f µs, echo %.0f µs", p(0), p(1), p(2))
		}
	}
	cpuNote := "; CPU µs per connect by process (all processes of the bench), " + proxy.perConnect()
	if piped != nil {
		cpuNote += "; " + piped.perConnect()
	}
	note += cpuNote
	set(RowConnectP50, 50, piped, r.sbMissing(), note)
	set(RowConnectP99, 99, piped, r.sbMissing(), note)
	transNote := fmt.Sprintf("%d connects per path in %d interleaved rounds; ours = inside the wall, a plain connect() to the echo server (the entry's seccomp notifier → its direct switchboard connection, the connected socket put in place of the app's) + 1-byte echo, timed by the app; baseline = dial the plain proxy + CONNECT + 200 + 1-byte echo from the host%s", n, r.cfg.LatencyRounds, wallCPU(proxy, transparent))
	set(RowTransP50, 50, transparent, r.wallMissing(), transNote)
	set(RowTransP99, 99, transparent, r.wallMissing(), transNote)
	wallNote := fmt.Sprintf("%d connects per path in %d interleaved rounds; ours = inside the wall, dial the entry's proxy on 127.0.0.1 + CONNECT (the entry's direct switchboard connection, socket handed over, spliced to the app's) + 1-byte echo, timed by the app; baseline = the same from the host through the plain proxy%s", n, r.cfg.LatencyRounds, wallCPU(proxy, wall))
	set(RowWallLatency, 50, wall, r.wallMissing(), wallNote)
	set(RowWallP99, 99, wall, r.wallMissing(), wallNote)
	r.connectCPU(RowWallCPU, proxy, wall)
	r.connectCPU(RowTransCPU, proxy, transparent)
}

// toyboxRoles are the processes of toybox's own on an in-wall connect's
// path (the app, the targets and the runner are the bench's).
var toyboxRoles = []string{"toybox-entry", "supervisor", "switchboard"}

// connectCPU sets row id: CPU µs per connect of toybox's processes on
// ours, against the plain proxy process's on the baseline path.
func (r *run) connectCPU(id string, proxy, ours *latPath) {
	row := r.row(id)
	switch {
	case ours == nil:
		row.NotMeasured(r.wallMissing())
		return
	case ours.err != nil:
		row.NotMeasured(ours.name + " failed: " + errText(ours.err))
		return
	case proxy.attempts == 0 || ours.attempts == 0:
		row.NotMeasured("no connect was made")
		return
	}
	per := func(p *latPath, roles ...string) float64 {
		var d time.Duration
		for _, k := range roles {
			d += p.byProc[k]
		}
		return float64(d.Microseconds()) / float64(p.attempts)
	}
	row.Baseline = ptr(per(proxy, "proxy"))
	row.Ours = ptr(per(ours, toyboxRoles...))
	row.Note = fmt.Sprintf("CPU (user + system, from /proc) over every round of the path, each from a quiet start until the processes are quiet again (so a round is billed its own tail, not the path before it), divided by its connects; ours = %s; %s; %s", strings.Join(toyboxRoles, " + "), proxy.perConnect(), ours.perConnect())
}

func echoOne(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	return load.EchoOnce(c)
}

func wallCPU(proxy, wall *latPath) string {
	if wall == nil || wall.attempts == 0 {
		return ""
	}
	s := ""
	if len(wall.dial) > 0 {
		s = fmt.Sprintf("; by phase (medians, inside the app): until connected %.0f µs, the rest (echo, close) %.0f µs", Durations(wall.dial, time.Microsecond).Median(), Durations(wall.got, time.Microsecond).Median()-Durations(wall.dial, time.Microsecond).Median())
	}
	return s + "; CPU µs per connect by process, " + proxy.perConnect() + "; " + wall.perConnect()
}
