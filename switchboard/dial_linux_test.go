package switchboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
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

// A connect that does not finish at once (the listener's accept queue is
// full, so the first SYN is dropped) takes the slow path: the wait in the
// runtime's poller, until the retried SYN gets through.
func TestDialHandOverSlowPath(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	lf := os.NewFile(uintptr(fd), "listener")
	defer lf.Close()
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil { // an accept queue of one
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port))
	var fill []net.Conn
	defer func() {
		for _, c := range fill {
			_ = c.Close()
		}
	}()
	for range 2 {
		c, err := net.DialTimeout("tcp4", ap.String(), 200*time.Millisecond)
		if err != nil {
			break
		}
		fill = append(fill, c)
	}
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := dialHandOver(context.Background(), ap, 10*time.Second)
		done <- result{c, err}
	}()
	// Still connecting while the queue is full.
	select {
	case r := <-done:
		if r.err == nil {
			r.c.Close()
		}
		testenv.Unavailable(t, fmt.Sprintf("the connect finished at once (%v): this kernel did not drop the SYN", r.err))
	case <-time.After(200 * time.Millisecond):
	}
	// Make room: the retried SYN gets in.
	for range len(fill) + 1 {
		nfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		if err == nil {
			defer unix.Close(nfd)
		}
	}
	go func() {
		for {
			nfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
			if err != nil {
				return
			}
			defer unix.Close(nfd)
		}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("slow dial: %v", r.err)
		}
		defer r.c.Close()
		cfd, err := connFD(r.c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Getpeername(cfd); err != nil {
			t.Errorf("the slow path returned a socket that is not connected: %v", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the slow dial never finished")
	}
}
