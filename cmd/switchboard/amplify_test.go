package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/bench"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/tests/amplify"
	"toybox/tests/testenv"
)

// cost runs f and reports what it cost process pid: the growth of its
// peak RSS and the CPU time it used.
func cost(t *testing.T, pid int, f func()) (peak int64, cpu time.Duration) {
	t.Helper()
	m0, err := bench.ProcMem(pid)
	if err != nil {
		t.Fatal(err)
	}
	c0, err := bench.ProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	f()
	m1, _ := bench.ProcMem(pid)
	c1, _ := bench.ProcCPU(pid)
	return m1.HWM - m0.HWM, c1 - c0
}

// rootHandle dials the switchboard's socket path and returns its root
// Handle; the connection closes with the test.
func rootHandle(t *testing.T, path string) schema.Handle {
	t.Helper()
	wc, err := wire.Dial(context.Background(), path, true)
	if err != nil {
		t.Fatal(err)
	}
	rc := wc.RPC(capnp.Client{}, nil)
	t.Cleanup(func() { _ = rc.Close() })
	h := schema.Handle(rc.Bootstrap(context.Background()))
	t.Cleanup(h.Release)
	return h
}

// stillServes checks that a new client of the switchboard is answered.
func stillServes(t *testing.T, r *running, url string) {
	t.Helper()
	h := rootHandle(t, r.local)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	port := url[strings.LastIndexByte(url, ':')+1:]
	f, release := h.Check(ctx, func(p schema.Handle_check_Params) error {
		tg, err := p.NewTarget()
		if err != nil {
			return err
		}
		_ = tg.SetScheme("http")
		_ = tg.SetHost("127.0.0.1")
		var n int
		for _, c := range port {
			n = 10*n + int(c-'0')
		}
		tg.SetPort(uint16(n))
		return nil
	})
	defer release()
	res, err := f.Struct()
	if err != nil {
		t.Fatalf("another client after the attack: %v", err)
	}
	if d, _ := res.Decision(); !d.Allow() {
		reason, _ := d.Reason()
		t.Fatalf("another client after the attack was refused: %s", reason)
	}
}

// TestAttackAliasedUnservedMessages: a client sends obsoleteSave messages
// of 536 bytes whose object is a DAG and reads nothing. go-capnp answered
// each with its 24 MiB deep copy, queued for a client that never took it.
// The switchboard ends the connection at the first, with a warning that
// says why, grows by less than 16 MiB, and serves the next client.
func TestAttackAliasedUnservedMessages(t *testing.T) {
	r := startSwitchboard(t, nil)
	web := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer web.Close()
	var msgs []*capnp.Message
	boot, err := amplify.Bootstrap()
	if err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, boot)
	for i := 0; i < 8; i++ {
		m, err := amplify.ObsoleteSave()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	b, err := amplify.Frames(msgs...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", r.local)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ended error
	peak, cpu := cost(t, r.cmd.Process.Pid, func() {
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write(b) // it may end the connection before all is written
		time.Sleep(time.Second)
		// Only now does the client read: the end of the connection,
		// not 8 copies of 24 MiB.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64<<10)
		read := 0
		for {
			n, err := c.Read(buf)
			read += n
			if err != nil {
				ended = err
				break
			}
		}
		if read > 64<<10 {
			t.Errorf("the client was sent %d bytes for its %d", read, len(b))
		}
	})
	t.Logf("the switchboard's peak RSS grew by %d KiB; it used %s of CPU", peak>>10, cpu)
	if errors.Is(ended, os.ErrDeadlineExceeded) {
		t.Errorf("the connection was kept: %v", ended)
	}
	if peak > 16<<20 {
		t.Errorf("the switchboard's peak RSS grew by %d MiB; want under 16 MiB", peak>>20)
	}
	waitLog(t, r, "does not serve")
	stillServes(t, r, web.URL)
}

// waitLog waits for the switchboard's log to hold want.
func waitLog(t *testing.T, r *running, want string) {
	t.Helper()
	testenv.WaitFor(t, 5*time.Second, func() error {
		if !strings.Contains(r.stderr.String(), want) {
			return fmt.Errorf("the switchboard's log does not say %q:\n%s", want, r.stderr.String())
		}
		return nil
	})
}

// TestAttackHeaderLists: request() and webSocket() with headers as a list
// of four million empty structs (a call of 300 bytes) made the switchboard
// loop over every one before deciding anything: 2.3 s of CPU and 450 MiB
// a call. Each is now refused before any loop, with a reason; so is a
// list longer than schema.MaxHeaders. The switchboard grows by less than
// 32 MiB and uses under a second for ten calls, and serves the next
// client.
func TestAttackHeaderLists(t *testing.T) {
	r := startSwitchboard(t, nil)
	web := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer web.Close()
	h := rootHandle(t, r.local)
	tooMany := func(seg *capnp.Segment) (schema.Header_List, error) {
		l, err := schema.NewHeader_List(seg, schema.MaxHeaders+1)
		for i := 0; i < l.Len(); i++ {
			_ = l.At(i).SetName("X-A")
			_ = l.At(i).SetValue("b")
		}
		return l, err
	}
	ws := "ws" + strings.TrimPrefix(web.URL, "http")
	calls := []struct {
		name    string
		call    func(context.Context, schema.Handle, string, amplify.Headers) error
		url     string
		headers amplify.Headers
	}{
		{"request with empty structs", amplify.Request, web.URL, amplify.EmptyHeaders(4 << 20)},
		{"webSocket with empty structs", amplify.WebSocket, ws, amplify.EmptyHeaders(4 << 20)},
		{"request with too many headers", amplify.Request, web.URL, tooMany},
		{"webSocket with too many headers", amplify.WebSocket, ws, tooMany},
	}
	for _, tt := range calls {
		t.Run(tt.name, func(t *testing.T) {
			peak, cpu := cost(t, r.cmd.Process.Pid, func() {
				for i := 0; i < 10; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := tt.call(ctx, h, tt.url, tt.headers)
					cancel()
					if err == nil {
						t.Fatalf("call %d was not refused", i)
					}
					if i == 0 {
						t.Logf("refused: %v", err)
					}
				}
			})
			t.Logf("ten calls: the switchboard's peak RSS grew by %d KiB; it used %s of CPU", peak>>10, cpu)
			if peak > 32<<20 {
				t.Errorf("the switchboard's peak RSS grew by %d MiB; want under 32 MiB", peak>>20)
			}
			if cpu > time.Second {
				t.Errorf("ten calls used %s of the switchboard's CPU; want under a second", cpu)
			}
		})
	}
	waitLog(t, r, "headers")
	stillServes(t, r, web.URL)
}
