//go:build linux

package tests

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkInstallFirstResponse measures PUT /<vat> of a static Go vat
// (counter-v1, ~8 MiB) until its first successful response through the
// public listener, walled. Each iteration is a fresh vat id (a new wall;
// the code itself is stored once). Reports the median as ms/median.
func BenchmarkInstallFirstResponse(b *testing.B) {
	s := newStack(b, stackOpts{})
	bin := example(b, "counter-v1")
	var ds []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		code, body := s.install(id, bin, "")
		if code != http.StatusCreated {
			b.Fatalf("PUT /%s = %d %s", id, code, body)
		}
		for {
			c, out := s.get("/" + id)
			if c == http.StatusOK && out == "v1 count 1" {
				break
			}
			if time.Since(start) > 20*time.Second {
				b.Fatalf("no answer from %s: %d %q", id, c, out)
			}
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if c, out := s.adminDo("DELETE", "/"+id+"?purge=1", nil); c != http.StatusOK {
			b.Fatalf("DELETE /%s = %d %s", id, c, out)
		}
		b.StartTimer()
	}
	b.StopTimer()
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "ms/median")
	b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, "ms/max")
}

// procMem returns a process's RSS and PSS in KiB.
func procMem(pid int) (rss, pss int, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		n, _ := strconv.Atoi(fields[1])
		switch fields[0] {
		case "Rss:":
			rss = n
		case "Pss:":
			pss = n
		}
	}
	return rss, pss, sc.Err()
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// descendants returns pid and every process below it.
func descendants(pid int) []int {
	out := []int{pid}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, descendants(c)...)
			}
		}
	}
	return out
}

// BenchmarkIdleVatCost starts 20 (or $TOYBOX_BENCH_VATS) idle walled vats,
// each with an egress grant, checks that every one answers, and reports, per vat, the
// memory of what toybox adds around an app: the supervisor's growth plus
// the wall's own processes (bwrap, toybox-entry), app excluded. RSS counts
// shared pages once per process; PSS shares them out. Each b.N iteration
// is a whole run: use -benchtime 1x.
func BenchmarkIdleVatCost(b *testing.B) {
	n := 20
	if v, err := strconv.Atoi(os.Getenv("TOYBOX_BENCH_VATS")); err == nil && v > 0 {
		n = v
	}
	for i := 0; i < b.N; i++ {
		func() {
			s := newStack(b, stackOpts{})
			supRSS0, supPSS0, err := procMem(s.tb.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			bin := example(b, "counter-v1")
			for v := 0; v < n; v++ {
				s.mustInstall(fmt.Sprintf("idle-%d", v), bin, q("egress", `{"host":"example.com"}`))
			}
			for v := 0; v < n; v++ {
				s.mustGet(fmt.Sprintf("/idle-%d", v), "v1 count 1")
			}
			time.Sleep(2 * time.Second) // settle
			supRSS1, supPSS1, _ := procMem(s.tb.Process.Pid)
			var wallRSS, wallPSS, appRSS int
			for v := 0; v < n; v++ {
				pid := int(s.status(fmt.Sprintf("idle-%d", v))["pid"].(float64))
				for _, p := range descendants(pid) {
					rss, pss, err := procMem(p)
					if err != nil {
						continue
					}
					switch comm(p) {
					case "bwrap", "toybox-entry":
						wallRSS += rss
						wallPSS += pss
					default:
						appRSS += rss
					}
				}
			}
			perRSS := float64(supRSS1-supRSS0+wallRSS) / float64(n) / 1024
			perPSS := float64(supPSS1-supPSS0+wallPSS) / float64(n) / 1024
			b.ReportMetric(perRSS, "MiB-RSS/vat")
			b.ReportMetric(perPSS, "MiB-PSS/vat")
			b.ReportMetric(float64(supRSS1-supRSS0)/float64(n)/1024, "MiB-supervisor/vat")
			b.ReportMetric(float64(appRSS)/float64(n)/1024, "MiB-app-RSS/vat")
			b.ReportMetric(float64(n), "vats")
		}()
	}
}
