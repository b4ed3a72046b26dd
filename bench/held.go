package bench

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"
)

// heldConnsSection starts a fresh switchboard, has it grant HeldConns
// connections to the echo server (sockets handed over and held open by
// the runner) and reads its memory.
func (r *run) heldConnsSection(ctx context.Context) {
	row := r.row(RowHeldConns)
	if r.sb == nil {
		row.NotMeasured(r.sbMissing())
		return
	}
	// One client holds them all: past the default per-peer limit (4096),
	// which bounds one vat, not the switchboard.
	config := fmt.Sprintf(`{"limits": {"conns": %d, "totalConns": %d}}`, r.cfg.HeldConns+16, r.cfg.HeldConns+16)
	sb, err := StartSwitchboardWith(ctx, filepath.Join(r.cfg.Bin, "switchboard"), filepath.Join(r.tmp, "sb-held"), config, r.log)
	if err != nil {
		row.NotMeasured("a fresh switchboard did not start: " + errText(err))
		return
	}
	defer sb.Stop()
	client, err := DialSwitchboard(ctx, sb.Socket)
	if err != nil {
		row.NotMeasured(errText(err))
		return
	}
	defer client.Close()
	h, err := Constrain(ctx, client.Root, r.sinkHost, r.echoPort)
	if err != nil {
		row.NotMeasured(errText(err))
		return
	}
	defer h.Release()
	// One connection first, so the idle figure includes a warmed-up peer.
	c0, err := client.ConnectFD(ctx, h, r.sinkHost, r.echoPort)
	if err != nil {
		row.NotMeasured(errText(err))
		return
	}
	time.Sleep(300 * time.Millisecond)
	m0, _ := ProcMem(sb.Pid())

	n := r.cfg.HeldConns
	conns := make([]net.Conn, 0, n)
	conns = append(conns, c0)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	var mu sync.Mutex
	var firstErr error
	next := 1
	t0 := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= n || firstErr != nil {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				c, err := client.ConnectFD(ctx, h, r.sinkHost, r.echoPort)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("connection %d: %w", len(conns)+1, err)
					}
				} else {
					conns = append(conns, c)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	if firstErr != nil {
		row.NotMeasured(fmt.Sprintf("after %d connections: %s", len(conns), errText(firstErr)))
		return
	}
	// Every connection still works: one byte through a sample of them.
	for i := 0; i < len(conns); i += len(conns) / 10 {
		if err := echoOne(conns[i]); err != nil {
			row.NotMeasured(fmt.Sprintf("held connection %d no longer echoes: %s", i, errText(err)))
			return
		}
	}
	time.Sleep(time.Second)
	m1, err := ProcMem(sb.Pid())
	if err != nil {
		row.NotMeasured(errText(err))
		return
	}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", sb.Pid()))
	const mib = 1 << 20
	row.Ours = ptr(float64(m1.RSS) / mib)
	row.Note = fmt.Sprintf("a fresh switchboard process; one client connection, one constrained handle, %d connect(wantFd) calls from 8 goroutines (%.1f s, %.0f connects/s), every socket held open by the runner, a sample echoed through; switchboard RSS %.1f MiB with one connection, %.1f MiB with %d (PSS %.1f MiB), %d fds open in it",
		len(conns), took.Seconds(), float64(len(conns))/took.Seconds(), float64(m0.RSS)/mib, float64(m1.RSS)/mib, len(conns), float64(m1.PSS)/mib, len(fds))
}
