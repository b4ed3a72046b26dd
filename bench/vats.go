package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// supervisorSection starts `toybox serve`, times Vats installs to first
// response, measures what the vats cost idle, removes them, then installs
// the vat that measures the wall path.
func (r *run) supervisorSection(ctx context.Context) {
	notMeasured := func(why string) {
		for _, id := range []string{RowInstall, RowIdleVat} {
			r.row(id).NotMeasured(why)
		}
	}
	code, err := os.ReadFile(filepath.Join(r.cfg.Bin, "benchvat"))
	if err != nil {
		r.supErr = fmt.Errorf("reading the benchvat binary: %w", err)
		notMeasured(errText(r.supErr))
		r.wallErr = r.supErr
		return
	}
	sbSock := ""
	if r.sb != nil {
		sbSock = r.sb.Socket
	}
	r.sup, r.supErr = StartSupervisor(ctx, r.cfg.Bin, filepath.Join(r.tmp, "toybox"), sbSock, r.log)
	if r.supErr != nil {
		notMeasured("the supervisor did not run: " + errText(r.supErr))
		r.wallErr = r.supErr
		return
	}
	time.Sleep(500 * time.Millisecond)
	m0, err := ProcMem(r.sup.Pid())
	if err != nil {
		notMeasured("reading the supervisor's memory: " + errText(err))
	}
	// Each vat gets a grant (to the sink, never used), so that its wall
	// holds what the figures name: bwrap, toybox-entry with its proxy, the
	// app. A vat with no way out runs without toybox-entry and costs less.
	idleGrant := ""
	if r.sb != nil {
		g, _ := json.Marshal(map[string]any{"scheme": "tcp", "host": r.sinkHost, "port": r.sinkPort})
		idleGrant = string(g)
	}
	var times []time.Duration
	var installErr error
	var ids []string
	for i := range r.cfg.Vats {
		id := fmt.Sprintf("idle-%02d", i+1)
		t0 := time.Now()
		if err := r.sup.Install(ctx, id, code, idleGrant); err != nil {
			installErr = err
			break
		}
		ids = append(ids, id)
		if err := r.sup.WaitOK(ctx, "/"+id+"/", time.Millisecond, 15*time.Second); err != nil {
			installErr = fmt.Errorf("%s: %w; status: %s", id, err, r.sup.AdminGet(ctx, "/"+id))
			break
		}
		times = append(times, time.Since(t0))
	}
	if installErr != nil {
		notMeasured("installing failed: " + errText(installErr))
	} else {
		ms := Durations(times, time.Millisecond)
		row := r.row(RowInstall)
		row.Ours, row.OurSamples = ptr(ms.Median()), ms
		grantText := "with a one-host grant, so toybox-entry and its proxy start too"
		if idleGrant == "" {
			grantText = "no grant (the switchboard did not run)"
		}
		row.Note = fmt.Sprintf("%d installs of new vats (a %d KiB static Go binary as the body of PUT /<id> on the admin socket, %s), each timed from the PUT to the first 200 of GET /<id>/ on the http socket, polled every 1 ms; p90 %.0f ms, max %.0f ms", len(times), len(code)>>10, grantText, ms.Percentile(90), ms.Percentile(100))
		r.idleMemory(ctx, m0, len(ids))
	}
	for _, id := range ids {
		if err := r.sup.Remove(ctx, id); err != nil {
			r.log.Warn("removing an idle vat", "vat", id, "error", err)
		}
	}
	r.installWallVat(ctx, code)
}

// idleMemory measures n idle vats: the supervisor's growth since m0 plus
// every bwrap and toybox-entry process below it.
func (r *run) idleMemory(ctx context.Context, m0 Mem, n int) {
	row := r.row(RowIdleVat)
	time.Sleep(2 * time.Second) // let the vats settle
	m1, err := ProcMem(r.sup.Pid())
	if err != nil {
		row.NotMeasured("reading the supervisor's memory: " + errText(err))
		return
	}
	ds, err := Descendants(r.sup.Pid())
	if err != nil {
		row.NotMeasured("listing the supervisor's processes: " + errText(err))
		return
	}
	var walls Mem
	counts := map[string]int{}
	var appRSS int64
	for _, d := range ds {
		m, err := ProcMem(d.Pid)
		if err != nil {
			continue
		}
		counts[d.Comm]++
		switch d.Comm {
		case "bwrap", "toybox-entry":
			walls.RSS += m.RSS
			walls.PSS += m.PSS
		default:
			appRSS += m.RSS
		}
	}
	if counts["bwrap"] < n || (r.sb != nil && counts["toybox-entry"] < n) {
		row.NotMeasured(fmt.Sprintf("expected %d walls (bwrap, and toybox-entry for a vat with a grant) below the supervisor, found %v", n, counts))
		return
	}
	const mib = 1 << 20
	perRSS := float64(m1.RSS-m0.RSS+walls.RSS) / float64(n) / mib
	perPSS := float64(m1.PSS-m0.PSS+walls.PSS) / float64(n) / mib
	row.Ours = ptr(perRSS)
	row.Note = fmt.Sprintf("%d idle vats: (supervisor RSS %.1f → %.1f MiB, +%.1f MiB) + bwrap and toybox-entry RSS %.1f MiB (%d bwrap, %d toybox-entry processes), divided by %d; the apps (%.1f MiB RSS in all) excluded; with shared pages divided among sharers (PSS) it is %.1f MiB per vat",
		n, float64(m0.RSS)/mib, float64(m1.RSS)/mib, float64(m1.RSS-m0.RSS)/mib, float64(walls.RSS)/mib, counts["bwrap"], counts["toybox-entry"], n, float64(appRSS)/mib, perPSS)
}

// installWallVat installs the vat that measures the wall path, granted the
// sink and the echo server.
func (r *run) installWallVat(ctx context.Context, code []byte) {
	if r.sb == nil {
		r.wallErr = fmt.Errorf("%s", r.sbMissing())
		return
	}
	grant, _ := json.Marshal([]map[string]any{
		{"scheme": "tcp", "host": r.sinkHost, "port": r.sinkPort},
		{"scheme": "tcp", "host": r.sinkHost, "port": r.echoPort},
	})
	const id = "bench-path"
	if err := r.sup.Install(ctx, id, code, string(grant)); err != nil {
		r.wallErr = err
		return
	}
	if err := r.sup.WaitOK(ctx, "/"+id+"/", 5*time.Millisecond, 15*time.Second); err != nil {
		r.wallErr = fmt.Errorf("%w; status: %s", err, r.sup.AdminGet(ctx, "/"+id))
		return
	}
	// One small transfer proves the path before it is timed.
	var out struct {
		Err string `json:"error"`
	}
	q := fmt.Sprintf("/%s/upload?target=%s:%d&bytes=%d", id, r.sinkHost, r.sinkPort, 1<<20)
	if err := r.sup.GetJSON(ctx, q, &out); err != nil {
		r.wallErr = fmt.Errorf("a first 1 MiB upload from the wall: %w", err)
		return
	}
	if out.Err != "" {
		r.wallErr = fmt.Errorf("a first 1 MiB upload from the wall: %s; logs: %s", out.Err, r.sup.AdminGet(ctx, "/"+id+"/logs"))
		return
	}
	r.wallVat = id
}
