package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/bench/load"
	"toybox/labels"
	"toybox/switchboard"
)

func TestMain(m *testing.M) {
	var leaks []string
	var mu sync.Mutex
	capnp.SetClientLeakFunc(func(msg string) {
		mu.Lock()
		leaks = append(leaks, msg)
		mu.Unlock()
	})
	code := m.Run()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	if len(leaks) > 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "capnp client leaks:\n%s\n", strings.Join(leaks, "\n"))
		code = 1
	}
	mu.Unlock()
	os.Exit(code)
}

// TestSwitchboardClient drives a real switchboard Server on a real unix
// socket with the runner's client: the socket handed over, and the
// ByteStream fallback, each moving bytes to a real sink.
func TestSwitchboardClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := switchboard.New(switchboard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	sock := filepath.Join(t.TempDir(), "local.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, "local", l, labels.Set{Network: labels.NetworkLocal}) }()
	defer func() { stop(); <-served }()

	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	go load.ServeTCP(sl, load.Sink)
	host, port, err := splitHostPort(sl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}

	client, err := DialSwitchboard(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	h, err := Constrain(ctx, client.Root, host, port)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()

	const n = 4 << 20
	c, err := client.ConnectFD(ctx, h, host, port)
	if err != nil {
		t.Fatalf("ConnectFD: %v", err)
	}
	if _, ok := c.(*net.TCPConn); !ok {
		t.Errorf("ConnectFD returned %T; want the handed-over *net.TCPConn", c)
	}
	if err := load.Upload(c, n); err != nil {
		t.Errorf("Upload over the handed-over socket: %v", err)
	}
	_ = c.Close()

	sc, err := ConnectStream(ctx, h, host, port)
	if err != nil {
		t.Fatalf("ConnectStream: %v", err)
	}
	if err := load.Upload(sc, n); err != nil {
		t.Errorf("Upload over the ByteStream: %v", err)
	}
	if err := sc.Close(); err != nil {
		t.Errorf("closing the ByteStream: %v", err)
	}

	// A target outside the constrained handle is refused with a reason.
	if _, err := client.ConnectFD(ctx, h, host, port+1); err == nil || !strings.Contains(err.Error(), "egress refused") {
		t.Errorf("ConnectFD to another port = %v; want an egress refusal", err)
	}
}
