package relay

import (
	"bytes"
	"io"
	"net"
	"os"
	"testing"

	"toybox/tests/testenv"
)

// tcpPair is two ends of one loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch := make(chan net.Conn, 1)
	go func() { c, _ := l.Accept(); ch <- c }()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return c, <-ch
}

// unixPair is two ends of one unix stream socketpair.
func unixPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := testenv.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return conn(fds[0]), conn(fds[1])
}

// a <-> relay <-> b: bytes both ways, then a half-close from a reaches b
// while b can still answer; over TCP on both sides, and TCP to unix (the
// supervisor's relay for an app's socket).
func TestPairHalfClose(t *testing.T) {
	for _, tt := range []struct {
		name   string
		bPairs func(*testing.T) (net.Conn, net.Conn)
	}{
		{"tcp to tcp", tcpPair},
		{"tcp to unix", unixPair},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, pa := tcpPair(t)
			pb, b := tt.bPairs(t)
			defer a.Close()
			defer b.Close()
			done := make(chan struct{})
			var ab, ba int64
			go func() { ab, ba, _ = Pair(pa, pb); close(done) }()
			payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
			go func() {
				_, _ = a.Write(payload)
				_ = a.(*net.TCPConn).CloseWrite()
			}()
			got, err := io.ReadAll(b) // ends at a's half-close
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("b read %d bytes, %v; want the %d-byte payload", len(got), err, len(payload))
			}
			if _, err := b.Write([]byte("answer after half-close")); err != nil {
				t.Fatal(err)
			}
			_ = b.(interface{ CloseWrite() error }).CloseWrite()
			back, err := io.ReadAll(a)
			if err != nil || string(back) != "answer after half-close" {
				t.Fatalf("a read %q, %v", back, err)
			}
			<-done
			if ab != int64(len(payload)) || ba != int64(len("answer after half-close")) {
				t.Errorf("Pair moved %d and %d bytes; want %d and %d", ab, ba, len(payload), len("answer after half-close"))
			}
		})
	}
}
