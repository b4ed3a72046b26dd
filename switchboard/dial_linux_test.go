package switchboard

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDialHandOver(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ap := l.Addr().(*net.TCPAddr).AddrPort()
	c, err := dialHandOver(context.Background(), ap, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := c.RemoteAddr().(*net.TCPAddr).AddrPort(); got != ap {
		t.Errorf("RemoteAddr = %v; want %v", got, ap)
	}
	fd, err := connFD(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range [][3]int{
		{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1},
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 30},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9},
	} {
		if v, err := unix.GetsockoptInt(fd, o[0], o[1]); err != nil || v != o[2] {
			t.Errorf("option %v = %d, %v; want %d", o[:2], v, err, o[2])
		}
	}
	if _, err := unix.Getpeername(fd); err != nil {
		t.Errorf("dialHandOver returned a socket that is not connected: %v", err)
	}
	if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
		t.Error("the socket is not close-on-exec")
	}
	// Bytes flow both ways, and a hello written before the handoff arrives.
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := s.Read(buf); err != nil || string(buf) != "hello" {
		t.Fatalf("server read %q, %v", buf, err)
	}
}

func TestDialHandOverFailures(t *testing.T) {
	// A port nobody listens on: refused at once, named.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).AddrPort()
	l.Close()
	if _, err := dialHandOver(context.Background(), closed, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial to a closed port = %v; want connection refused", err)
	}

	// A connect that never completes (here a TCP socket that never
	// connects: no error, no peer): the wait ends at its timeout, or when
	// its context is cancelled.
	pending := func() *os.File {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "never connects")
		t.Cleanup(func() { f.Close() })
		return f
	}
	t0 := time.Now()
	if err := waitConnected(context.Background(), pending(), 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("wait past the timeout = %v; want os.ErrDeadlineExceeded", err)
	}
	if d := time.Since(t0); d < 250*time.Millisecond || d > 3*time.Second {
		t.Errorf("the timeout took %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if err := waitConnected(ctx, pending(), 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("wait cancelled = %v; want context.Canceled", err)
	}
}
