package entry

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
)

// TestAcceptOutlastsEMFILE: an app can run its entry out of descriptors
// (many idle connections, or prlimit on pid 1). Accept then fails with
// EMFILE; the proxy must keep accepting once descriptors are free again,
// not stop for the rest of the wall's life while the wall looks healthy.
func TestAcceptOutlastsEMFILE(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	// The clients' sockets exist before the limit comes down.
	const n = 3
	var clients []int
	for i := 0; i < n; i++ {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		clients = append(clients, fd)
	}
	var logs testenv.Buffer
	got := make(chan net.Conn, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)

	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// The lowest free descriptor number: below it every number is taken,
	// so with the soft limit there no new descriptor can be made.
	free, err := unix.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(free)
	restore := func() { _ = unix.Setrlimit(unix.RLIMIT_NOFILE, &old) }
	defer restore()
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: uint64(free), Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	go func() {
		done <- acceptLoop(ctx, l, slog.New(slog.NewTextHandler(&logs, nil)), func(c net.Conn) { got <- c })
	}()
	for _, fd := range clients {
		if err := unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			restore()
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // accept fails with EMFILE meanwhile
	restore()
	if !strings.Contains(logs.String(), "too many open files") {
		t.Errorf("log %q; want the accept failure said", logs.String())
	}
	for i := 0; i < n; i++ {
		select {
		case c := <-got:
			_ = c.Close()
		case err := <-done:
			t.Fatalf("the accept loop ended: %v; want it to outlast EMFILE", err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d connections accepted once descriptors were free again", i, n)
		}
	}
	_ = l.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the accept loop did not end with its listener")
	}
}

// flakyListener fails every other Accept with EMFILE, as a listener does
// while its process runs at its descriptor limit and connections come and
// go.
type flakyListener struct {
	net.Listener
	n int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.n++
	if l.n%2 == 1 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: unix.EMFILE}
	}
	return l.Listener.Accept()
}

// TestAcceptWarningsAreRateLimited: each accept failure that followed a
// success was a warning of its own; under a storm of connections at the
// descriptor limit they filled the wall's log tail and pushed out what
// caused them. One warning per logEvery, saying how many more failed.
func TestAcceptWarningsAreRateLimited(t *testing.T) {
	tl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &flakyListener{Listener: tl}
	var logs testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan net.Conn, 64)
	done := make(chan error, 1)
	go func() {
		done <- acceptLoop(ctx, l, slog.New(slog.NewTextHandler(&logs, nil)), func(c net.Conn) { got <- c })
	}()
	const n = 20
	for range n {
		c, err := net.Dial("tcp4", tl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		select {
		case a := <-got:
			_ = a.Close()
		case <-time.After(5 * time.Second):
			t.Fatal("a connection was not accepted")
		}
	}
	_ = tl.Close()
	<-done
	if k := strings.Count(logs.String(), "accepting a connection failed"); k != 1 {
		t.Errorf("%d accept failures made %d warnings; want 1:\n%s", n, k, logs.String())
	}
}
