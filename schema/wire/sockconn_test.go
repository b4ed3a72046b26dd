//go:build linux

package wire

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan *net.TCPConn, 1)
	go func() {
		c, err := l.AcceptTCP()
		if err != nil {
			done <- nil
			return
		}
		done <- c
	}()
	c, err := net.DialTCP("tcp", nil, l.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
	return c, s
}

// TestTakeConn hands a TCP socket over as the switchboard does (a blocking
// duplicate, DupConn and SendOwnedFD) and uses what TakeConn makes of it as a
// net.Conn: bytes both ways, a read deadline that fires, both addresses,
// and CloseWrite reaching the far end as EOF.
func TestTakeConn(t *testing.T) {
	a, b := pair(t, true)
	mine, far := tcpPair(t)
	// As the switchboard's dial leaves it: blocking.
	raw, err := mine.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Control(func(fd uintptr) { _ = unix.SetNonblock(int(fd), false) }); err != nil {
		t.Fatal(err)
	}
	fd, err := DupConn(mine, false)
	if err != nil {
		t.Fatal(err)
	}
	seq := a.SendOwnedFD(fd)
	if _, err := a.Write([]byte("m")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(b, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	c, err := b.TakeConn(seq)
	if err != nil {
		t.Fatalf("TakeConn(%d): %v", seq, err)
	}
	defer c.Close()
	if _, err := b.TakeConn(seq); !errors.Is(err, ErrNoFD) {
		t.Errorf("second TakeConn(%d) = %v; want ErrNoFD", seq, err)
	}
	if got, want := c.RemoteAddr().String(), far.LocalAddr().String(); got != want {
		t.Errorf("RemoteAddr = %s; want %s", got, want)
	}
	if got, want := c.LocalAddr().String(), far.RemoteAddr().String(); got != want {
		t.Errorf("LocalAddr = %s; want %s", got, want)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(far, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("far end read %q, %v; want ping", buf, err)
	}
	// A deadline works: the socket is in the runtime's poller.
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatalf("SetReadDeadline: %v; want the socket in the runtime's poller", err)
	}
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %v; want os.ErrDeadlineExceeded", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if _, err := far.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("read %q, %v; want pong", buf, err)
	}
	// The sender still holds its copy (as the switchboard does): only a
	// shutdown reaches the far end.
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = far.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := far.Read(buf); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("far end after CloseWrite: %d, %v; want EOF", n, err)
	}
}
