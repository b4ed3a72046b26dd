package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// mcpClient speaks Streamable HTTP (the 2025-11-25 revision) to one MCP
// endpoint, as a plain HTTP client: the same code for toybox's edge and
// for the server's own transport.
type mcpClient struct {
	hc  *http.Client
	url string
	pid int // the server's process when the runner started it; 0 for the edge
}

const mcpVersion = "2025-11-25"

// post sends one message on session sid ("" for none) and returns the
// answer's session id and body (JSON or the whole event stream).
func (c *mcpClient) post(ctx context.Context, sid, body string) (string, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewBufferString(body))
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", mcpVersion)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", nil, err
	}
	if resp.StatusCode/100 != 2 {
		return "", b, fmt.Errorf("POST %s: %s: %s", c.url, resp.Status, bytes.TrimSpace(b))
	}
	return resp.Header.Get("Mcp-Session-Id"), b, nil
}

// initialize opens a session: its id.
func (c *mcpClient) initialize(ctx context.Context) (string, error) {
	sid, b, err := c.post(ctx, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+mcpVersion+`","capabilities":{},"clientInfo":{"name":"toybench","version":"1"}}}`)
	if err != nil {
		return "", err
	}
	if sid == "" || !bytes.Contains(b, []byte(`"serverInfo"`)) {
		return "", fmt.Errorf("initialize: no session or no InitializeResult: %.200s", b)
	}
	return sid, nil
}

// initialized sends notifications/initialized.
func (c *mcpClient) initialized(ctx context.Context, sid string) error {
	_, _, err := c.post(ctx, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return err
}

// add calls the add tool and checks its sum.
func (c *mcpClient) add(ctx context.Context, sid string, id int) error {
	_, b, err := c.post(ctx, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add","arguments":{"a":%d,"b":1}}}`, id, id))
	if err != nil {
		return err
	}
	if want := fmt.Sprintf(`"structuredContent":{"sum":%d}`, id+1); !bytes.Contains(b, []byte(want)) {
		return fmt.Errorf("tools/call add: no %s in %.200s", want, b)
	}
	return nil
}

// end DELETEs session sid.
func (c *mcpClient) end(ctx context.Context, sid string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.url, nil)
	if err != nil {
		return
	}
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", mcpVersion)
	if resp, err := c.hc.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// rps makes n add calls on session sid from workers goroutines and
// returns the calls per second and the calls that failed.
func (c *mcpClient) rps(ctx context.Context, sid string, n, workers int) (float64, int, error) {
	var mu sync.Mutex
	var failed int
	var first error
	next := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				if err := c.add(ctx, sid, id); err != nil {
					mu.Lock()
					failed++
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i + 2
	}
	close(next)
	wg.Wait()
	return float64(n) / time.Since(t0).Seconds(), failed, first
}

// waitSpare waits until vat id's bridge has a spare process ready.
func (s *Supervisor) waitSpare(ctx context.Context, id string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var st struct {
			MCP struct {
				Bridge struct {
					Spare bool `json:"spare"`
				} `json:"bridge"`
			} `json:"mcp"`
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://toybox/"+id, nil)
		if err != nil {
			return err
		}
		if resp, err := s.admin.Do(req); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if st.MCP.Bridge.Spare {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("vat %s had no spare process within %s", id, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// startBenchMCP runs benchmcp -listen on a socket in dir (unwalled: the
// server over its own HTTP transport) and returns a client of it.
func startBenchMCP(ctx context.Context, bin, dir string) (*mcpClient, func(), error) {
	sock := filepath.Join(dir, "benchmcp.sock")
	cmd := exec.Command(bin, "-listen", sock)
	cmd.SysProcAttr = killedWithParent()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() { stopProc(cmd, done) }
	if err := waitUnix(ctx, sock, done, 10*time.Second); err != nil {
		stop()
		return nil, nil, fmt.Errorf("benchmcp -listen: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return &mcpClient{hc: unixClient(sock), url: "http://localhost/mcp", pid: cmd.Process.Pid}, stop, nil
}

// mcpSection measures the MCP edge with benchmcp installed as a stdio vat
// (?mcp=stdio): initialize with a warm spare, a new session's first
// tools/call, and calls per second on one session against the same binary
// over its own HTTP transport.
func (r *run) mcpSection(ctx context.Context) {
	rows := []string{RowMCPInit, RowMCPFirstCall, RowMCPRate}
	notMeasured := func(why string) {
		for _, id := range rows {
			r.row(id).NotMeasured(why)
		}
	}
	if r.sup == nil {
		notMeasured("the supervisor did not run: " + errText(r.supErr))
		return
	}
	bin := filepath.Join(r.cfg.Bin, "benchmcp")
	code, err := os.ReadFile(bin)
	if err != nil {
		notMeasured("reading the benchmcp binary: " + errText(err))
		return
	}
	const id = "bench-mcp"
	if err := r.sup.AdminDo(ctx, http.MethodPut, "/"+id, url.Values{"mcp": {"stdio"}}, code); err != nil {
		notMeasured(errText(err))
		return
	}
	defer func() { _ = r.sup.Remove(ctx, id) }()
	edge := &mcpClient{hc: r.sup.public, url: "http://localhost/" + id + "/mcp"}

	var inits, firsts []time.Duration
	var failed int
	var firstErr error
	fail := func(err error) {
		failed++
		if firstErr == nil {
			firstErr = err
		}
	}
	for range r.cfg.MCPSessions {
		if err := r.sup.waitSpare(ctx, id, 10*time.Second); err != nil {
			fail(err)
			continue
		}
		t0 := time.Now()
		sid, err := edge.initialize(ctx)
		if err != nil {
			fail(err)
			continue
		}
		inits = append(inits, time.Since(t0))
		if err := edge.initialized(ctx, sid); err != nil {
			fail(err)
			continue
		}
		t1 := time.Now()
		if err := edge.add(ctx, sid, 1); err != nil {
			fail(err)
		} else {
			firsts = append(firsts, time.Since(t1))
		}
		edge.end(ctx, sid)
	}
	sessions := fmt.Sprintf("%d new sessions, each begun once the bridge had a spare process ready (polled on GET /%s), with a plain HTTP client on the http socket", len(inits), id)
	for _, rid := range []string{RowMCPInit, RowMCPFirstCall} {
		row := r.row(rid)
		row.Attempts, row.Failures = r.cfg.MCPSessions, failed
		if firstErr != nil {
			row.FirstErr = errText(firstErr)
		}
	}
	if ms := Durations(inits, time.Millisecond); len(ms) > 0 {
		row := r.row(RowMCPInit)
		row.Ours, row.OurSamples = ptr(ms.Median()), ms
		row.Note = fmt.Sprintf("%s; timed from the POST of initialize to its whole answer; p95 %.1f ms (mcp.md R58: ≤ 150), max %.1f ms", sessions, ms.Percentile(95), ms.Percentile(100))
	} else {
		r.row(RowMCPInit).NotMeasured("no initialize answered: " + errText(firstErr))
	}
	if ms := Durations(firsts, time.Millisecond); len(ms) > 0 {
		row := r.row(RowMCPFirstCall)
		row.Ours, row.OurSamples = ptr(ms.Median()), ms
		row.Note = fmt.Sprintf("the same %s; timed from the POST of the first tools/call (after notifications/initialized) to its whole answer; p95 %.1f ms", sessions, ms.Percentile(95))
	} else {
		r.row(RowMCPFirstCall).NotMeasured("no first tools/call answered: " + errText(firstErr))
	}
	r.mcpRate(ctx, bin, edge)
}

// mcpRate measures calls per second on one session, through the edge and
// against benchmcp's own HTTP transport, in interleaved rounds.
func (r *run) mcpRate(ctx context.Context, bin string, edge *mcpClient) {
	row := r.row(RowMCPRate)
	direct, stop, err := startBenchMCP(ctx, bin, r.tmp)
	if err != nil {
		row.NotMeasured(errText(err))
		return
	}
	defer stop()
	const workers, rounds = 4, 5
	per := max(1, r.cfg.MCPCalls/rounds)
	open := func(c *mcpClient) (string, error) {
		sid, err := c.initialize(ctx)
		if err == nil {
			err = c.initialized(ctx, sid)
		}
		return sid, err
	}
	esid, err := open(edge)
	if err != nil {
		row.NotMeasured("a session through the edge: " + errText(err))
		return
	}
	defer edge.end(ctx, esid)
	dsid, err := open(direct)
	if err != nil {
		row.NotMeasured("a session of benchmcp's own transport: " + errText(err))
		return
	}
	defer direct.end(ctx, dsid)
	var ours, base Samples
	baseCPU := &latPath{name: "baseline"}
	oursCPU := &latPath{name: "ours"}
	row.Attempts = 2 * rounds * per
	for range rounds {
		for _, side := range []struct {
			c   *mcpClient
			sid string
			out *Samples
			cpu *latPath
		}{{direct, dsid, &base, baseCPU}, {edge, esid, &ours, oursCPU}} {
			cpu0 := r.mcpCPU(direct.pid)
			v, failed, err := side.c.rps(ctx, side.sid, per, workers)
			cpu1 := r.mcpCPU(direct.pid)
			if side.cpu.byProc == nil {
				side.cpu.byProc = map[string]time.Duration{}
			}
			for k, d := range cpu1 {
				side.cpu.byProc[k] += d - cpu0[k]
			}
			side.cpu.attempts += per
			row.Failures += failed
			if err != nil && row.FirstErr == "" {
				row.FirstErr = errText(err)
			}
			*side.out = append(*side.out, v)
		}
	}
	if len(ours) == 0 {
		row.NotMeasured("no round ran")
		return
	}
	row.Ours, row.OurSamples = ptr(ours.Median()), ours
	row.Baseline, row.BaselineSamples = ptr(base.Median()), base
	row.Note = fmt.Sprintf("%d rounds of %d tools/call (add) per path on one session, %d at a time, alternating; ours = benchmcp as a stdio vat through /<vat>/mcp on the http socket (edge, bridge in the wall, stdio); baseline = the same binary's Go SDK Streamable HTTP handler on a unix socket, unwalled, the same client; CPU µs per call by process (runner = the client), %s; %s", rounds, per, workers, baseCPU.perConnect(), oursCPU.perConnect())
}

// mcpCPU is cpuByProc with the baseline's server (pid, a child of the
// runner) as "benchmcp -listen".
func (r *run) mcpCPU(pid int) map[string]time.Duration {
	out := r.cpuByProc()
	begin := SelfCPU()
	if d, err := ProcCPU(pid); err == nil {
		out["benchmcp -listen"] = d
	}
	cost := SelfCPU() - begin
	r.scanCost += cost
	out["runner"] -= cost
	return out
}
