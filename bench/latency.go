package bench

import (
	"toybox/bench/load"

	"context"
	"fmt"
	"net"
	"strconv"
	"time"
)

// latPath is one way of reaching the echo server.
type latPath struct {
	name  string
	round func(ctx context.Context, n int) ([]time.Duration, error)
	err   error
	got   []time.Duration
}

// one turns a single connect into a round of n.
func one(f func(ctx context.Context) error) func(ctx context.Context, n int) ([]time.Duration, error) {
	return func(ctx context.Context, n int) ([]time.Duration, error) {
		out := make([]time.Duration, 0, n)
		for range n {
			t0 := time.Now()
			if err := f(ctx); err != nil {
				return out, err
			}
			out = append(out, time.Since(t0))
		}
		return out, nil
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
		return load.EchoOnce(c)
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
	var sb, wall *latPath
	if r.sb != nil {
		client, err := DialSwitchboard(ctx, r.sb.Socket)
		if err != nil {
			r.sbErr = err
		} else {
			defer client.Close()
			sb = &latPath{name: "switchboard", round: one(func(ctx context.Context) error {
				h, err := Constrain(ctx, client.Root, r.sinkHost, r.echoPort)
				if err != nil {
					return err
				}
				defer h.Release()
				c, err := client.ConnectFD(ctx, h, r.sinkHost, r.echoPort)
				if err != nil {
					return err
				}
				defer c.Close()
				return load.EchoOnce(c)
			})}
			paths = append(paths, sb)
		}
	}
	if r.wallVat != "" {
		wall = &latPath{name: "app in a wall", round: func(ctx context.Context, n int) ([]time.Duration, error) {
			var out struct {
				NS  []int64 `json:"ns"`
				Err string  `json:"error"`
			}
			q := fmt.Sprintf("/%s/latency?target=%s&n=%d", r.wallVat, echo, n)
			if err := r.sup.GetJSON(ctx, q, &out); err != nil {
				return nil, err
			}
			if out.Err != "" {
				return nil, fmt.Errorf("the app in the wall: %s", out.Err)
			}
			ds := make([]time.Duration, len(out.NS))
			for i, ns := range out.NS {
				ds[i] = time.Duration(ns)
			}
			return ds, nil
		}}
		paths = append(paths, wall)
	}
	for range r.cfg.LatencyRounds {
		for _, p := range paths {
			if p.err != nil {
				continue
			}
			ds, err := p.round(ctx, r.cfg.LatencyPerRound)
			p.got = append(p.got, ds...)
			if err != nil {
				p.err = err
				r.log.Warn("latency path failed", "path", p.name, "error", err)
			}
		}
	}
	for _, p := range paths {
		us := Durations(p.got, time.Microsecond)
		r.log.Info("latency", "path", p.name, "n", len(us), "p50_us", fmt.Sprintf("%.0f", us.Percentile(50)), "p99_us", fmt.Sprintf("%.0f", us.Percentile(99)))
	}
	if proxy.err != nil || raw.err != nil {
		for _, id := range []string{RowConnectP50, RowConnectP99, RowWallLatency} {
			r.row(id).NotMeasured(fmt.Sprintf("the baseline failed: raw %v, proxy %v", raw.err, proxy.err))
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
		}
	}
	scale := fmt.Sprintf("raw dial + 1-byte echo: p50 %.0f µs, p99 %.0f µs", rawUS.Percentile(50), rawUS.Percentile(99))
	note := fmt.Sprintf("%d connects per path in %d interleaved rounds of %d; baseline = dial the proxy + CONNECT + 200 + 1-byte echo; ours = constrain(root → tcp host:port) + connect(wantFd) + take the socket + 1-byte echo, from a client holding a switchboard connection; for scale, %s", n, r.cfg.LatencyRounds, r.cfg.LatencyPerRound, scale)
	set(RowConnectP50, 50, sb, r.sbMissing(), note)
	set(RowConnectP99, 99, sb, r.sbMissing(), note)
	set(RowWallLatency, 50, wall, r.wallMissing(), fmt.Sprintf("%d connects per path in %d interleaved rounds; ours = inside the wall, dial the entry's proxy on 127.0.0.1 + CONNECT (entry → supervisor relay → switchboard, socket handed over) + 1-byte echo, timed by the app; baseline = the same from the host through the plain proxy", n, r.cfg.LatencyRounds))
}

func echoOne(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	return load.EchoOnce(c)
}
