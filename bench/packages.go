package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"toybox/vat/packages/npmtest"
)

// The package rows' MCP server: a fixture of vat/packages/npmtest (a stdio
// server with one dependency), served by that package's loopback registry.
const (
	pkgVat  = "pkg-hello"
	pkgSpec = "tb-mcp-hello@1.0.0"
	pkgInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"toybench","version":"1"}}}`
)

// benchTB is npmtest's TB for the runner: a failure ends the section,
// which recovers it as "not measured".
type benchTB struct {
	dir      string
	n        int
	cleanups []func()
}

type benchFatal struct{ msg string }

func (b *benchTB) Helper()                           {}
func (b *benchTB) Fatal(args ...any)                 { panic(benchFatal{fmt.Sprint(args...)}) }
func (b *benchTB) Fatalf(format string, args ...any) { panic(benchFatal{fmt.Sprintf(format, args...)}) }
func (b *benchTB) Skip(args ...any)                  { panic(benchFatal{fmt.Sprint(args...)}) }
func (b *benchTB) Cleanup(f func())                  { b.cleanups = append(b.cleanups, f) }

func (b *benchTB) TempDir() string {
	b.n++
	d := filepath.Join(b.dir, fmt.Sprint(b.n))
	if err := os.MkdirAll(d, 0o755); err != nil {
		b.Fatal(err)
	}
	return d
}

func (b *benchTB) done() {
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		b.cleanups[i]()
	}
}

// packagesSection measures the start of an installed npm MCP server to
// its first initialize answer, beside npx from a warm cache, and counts
// the registry's requests during those starts.
func (r *run) packagesSection(ctx context.Context) {
	rows := []string{RowPackageStart, RowPackageRegistry}
	tb := &benchTB{dir: filepath.Join(r.tmp, "npm")}
	defer tb.done()
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(benchFatal)
			if !ok {
				panic(p)
			}
			for _, id := range rows {
				r.row(id).NotMeasured(f.msg)
			}
		}
	}()
	npx, err := exec.LookPath("npx")
	if err != nil {
		for _, id := range rows {
			r.row(id).NotMeasured("npx is not installed")
		}
		return
	}
	if r.sb == nil {
		for _, id := range rows {
			r.row(id).NotMeasured("the switchboard did not run: the prepare wall needs it")
		}
		return
	}
	reg := npmtest.Start(tb)
	for _, f := range []string{"tb-greeting-1.0.0", "tb-greeting-1.1.0", "tb-mcp-hello"} {
		reg.Publish(tb, npmtest.Pack(tb, npmtest.Fixture(f)))
	}
	sup, err := StartSupervisor(ctx, r.cfg.Bin, filepath.Join(r.tmp, "toybox-packages"), r.sb.Socket, r.log, "--npm-registry", reg.URL)
	if err != nil {
		tb.Fatal("the supervisor did not run: " + errText(err))
	}
	defer sup.Stop()
	if err := sup.AdminDo(ctx, "PUT", "/"+pkgVat, url.Values{"package": {"npm:" + pkgSpec}}, nil); err != nil {
		tb.Fatal("installing the package: " + errText(err))
	}
	ours := func() (time.Duration, error) {
		t0 := time.Now()
		if err := sup.AdminDo(ctx, "POST", "/"+pkgVat+"/restart", nil, nil); err != nil {
			return 0, err
		}
		hdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
		for {
			code, b, err := sup.PostPublic(ctx, "/"+pkgVat+"/mcp", []byte(pkgInit), hdr)
			if err == nil && code == 200 && strings.Contains(string(b), `"serverInfo"`) {
				return time.Since(t0), nil
			}
			if time.Since(t0) > 20*time.Second {
				if err != nil {
					return 0, fmt.Errorf("no initialize answer: %w", err)
				}
				return 0, fmt.Errorf("no initialize answer: %d %s", code, b)
			}
			time.Sleep(time.Millisecond)
		}
	}
	cache := filepath.Join(r.tmp, "npx-cache")
	baseline := func() (time.Duration, error) {
		cmd := exec.CommandContext(ctx, npx, "-y", pkgSpec)
		cmd.Env = append(os.Environ(), "npm_config_registry="+reg.URL, "npm_config_cache="+cache,
			"npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false", "npm_config_loglevel=error")
		cmd.Dir = r.tmp
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		in, err := cmd.StdinPipe()
		if err != nil {
			return 0, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		defer func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}()
		if _, err := in.Write([]byte(pkgInit + "\n")); err != nil {
			return 0, err
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			return 0, fmt.Errorf("npx answered nothing: %w", err)
		}
		if !strings.Contains(line, `"serverInfo"`) {
			return 0, errors.New("npx answered " + line)
		}
		return time.Since(t0), nil
	}
	// Warm both: npx's cache, and the vat's first start.
	if _, err := baseline(); err != nil {
		tb.Fatal("npx: " + errText(err))
	}
	if _, err := ours(); err != nil {
		tb.Fatal("the vat: " + errText(err))
	}
	n := max(r.cfg.Spawns/4, 3)
	var oursT, baseT []time.Duration
	regOurs, regBase := 0, 0
	for range n {
		before := reg.Requests()
		d, err := baseline()
		if err != nil {
			tb.Fatal("npx: " + errText(err))
		}
		baseT = append(baseT, d)
		mid := reg.Requests()
		regBase += mid - before
		if d, err = ours(); err != nil {
			tb.Fatal("the vat: " + errText(err))
		}
		oursT = append(oursT, d)
		regOurs += reg.Requests() - mid
	}
	o, b := Durations(oursT, time.Millisecond), Durations(baseT, time.Millisecond)
	row := r.row(RowPackageStart)
	row.Ours, row.OurSamples = ptr(o.Median()), o
	row.Baseline, row.BaselineSamples = ptr(b.Median()), b
	row.Note = fmt.Sprintf("%d interleaved starts each, after one warm-up of each; ours = POST /%s/restart (the wall stops and starts again) until the first 200 initialize answer through /%s/mcp on the http socket, polled every 1 ms: the bridge in the wall spawns node <entry> for the session; baseline = npx -y %s from a warm npm cache, spawned with initialize on its stdin, until its first stdout line; both against the same loopback registry (vat/packages/npmtest); p90 ours %.0f ms, npx %.0f ms", n, pkgVat, pkgVat, pkgSpec, o.Percentile(90), b.Percentile(90))
	reqRow := r.row(RowPackageRegistry)
	reqRow.Ours = ptr(float64(regOurs))
	reqRow.Note = fmt.Sprintf("registry requests (npmtest's Registry.Requests) during the %d starts of the vat above; npx made %d in its %d starts from a warm cache", n, regBase, n)
}
