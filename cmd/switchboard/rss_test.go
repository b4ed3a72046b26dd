package main

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"capnproto.org/go/capnp/v3"

	"toybox/schema"
	"toybox/schema/wire"
)

// TestTenThousandConnectionsRSS holds 10,000 granted connections open in
// the switchboard (the client takes each handed-over socket, then drops its
// copy; the switchboard's duplicate keeps the connection up) and checks the
// switchboard's resident memory stays within 64 MiB.
func TestTenThousandConnectionsRSS(t *testing.T) {
	r := startSwitchboard(t, map[string]any{"limits": map[string]any{"conns": 20000}})
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted []net.Conn
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted = append(accepted, c)
		}
	}()
	defer func() {
		_ = l.Close()
		<-acceptDone
		for _, c := range accepted {
			_ = c.Close()
		}
	}()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	ctx := context.Background()
	wc, err := wire.Dial(ctx, r.local, true)
	if err != nil {
		t.Fatal(err)
	}
	conn := wc.RPC(capnp.Client{}, nil)
	defer conn.Close()
	root := schema.Handle(conn.Bootstrap(ctx))
	defer root.Release()
	const n = 10000
	for i := 0; i < n; i++ {
		f, release := root.Connect(ctx, func(p schema.Handle_connect_Params) error {
			tg, err := p.NewTarget()
			if err != nil {
				return err
			}
			_ = tg.SetScheme("tcp")
			_ = tg.SetHost("127.0.0.1")
			tg.SetPort(port)
			p.SetWantFd(true)
			return nil
		})
		res, err := f.Struct()
		if err != nil {
			release()
			t.Fatalf("connect %d: %v", i, err)
		}
		file, err := wc.TakeFD(res.Fd())
		release()
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		_ = file.Close()
	}
	rss := vmRSS(t, r.cmd.Process.Pid)
	t.Logf("switchboard RSS with %d connections held: %.1f MiB", n, float64(rss)/(1<<20))
	if rss > 64<<20 {
		t.Errorf("RSS = %d bytes; want <= 64 MiB", rss)
	}
}

func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
