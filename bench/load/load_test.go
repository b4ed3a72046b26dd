package load

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func listen(t *testing.T, fn func(net.Conn) error) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go ServeTCP(l, fn)
	return l.Addr().String()
}

// TestThroughProxy runs the bulk protocol and the echo through the
// baseline proxy over real loopback sockets.
func TestThroughProxy(t *testing.T) {
	sink, echo := listen(t, Sink), listen(t, Echo)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: ConnectProxy{}}
	go func() { _ = srv.Serve(pl) }()
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := DialConnect(ctx, pl.Addr().String(), sink)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{1, ChunkSize - 1, 3*ChunkSize + 17} {
		if err := Upload(c, n); err != nil {
			t.Fatalf("Upload(%d) through the proxy: %v", n, err)
		}
	}
	_ = c.Close()

	c, err = DialConnect(ctx, pl.Addr().String(), echo)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		if err := EchoOnce(c); err != nil {
			t.Fatalf("EchoOnce through the proxy: %v", err)
		}
	}
}

// TestProxyRefusal: a target nobody listens on is a 502 the client
// reports, not a hang.
func TestProxyRefusal(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	_ = dead.Close()
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: ConnectProxy{}}
	go func() { _ = srv.Serve(pl) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, err = DialConnect(context.Background(), pl.Addr().String(), addr)
	if err == nil || !strings.Contains(err.Error(), "502") {
		t.Fatalf("DialConnect to a closed port = %v; want a 502 error", err)
	}
}

// TestSinkCountsShortStream: a sender that stops early gets an error, not
// a count.
func TestSinkCountsShortStream(t *testing.T) {
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- Sink(b) }()
	_, _ = a.Write([]byte{0, 0, 0, 0, 0, 0, 0, 10, 1, 2, 3})
	_ = a.Close()
	if err := <-done; err == nil {
		t.Fatal("Sink after a short stream = nil; want an error")
	}
}
