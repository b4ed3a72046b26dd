package switchboard

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sort"
	"testing"
	"time"

	"toybox/labels"
	"toybox/schema"
)

// sinkServer accepts on loopback and discards what it reads, answering
// each read with nothing; echoOne echoes one byte then closes.
func sinkServer(b *testing.B) uint16 {
	b.Helper()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
				_, _ = c.Write([]byte{1})
			}()
		}
	}()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

func throughput(b *testing.B, conn net.Conn) {
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := conn.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil { // the sink read everything
		b.Fatal(err)
	}
	b.StopTimer()
}

// BenchmarkHandoffThroughput compares bulk bytes over a socket the
// switchboard handed over with raw loopback TCP.
func BenchmarkHandoffThroughput(b *testing.B) {
	port := sinkServer(b)
	b.Run("raw", func(b *testing.B) {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", itoa(port)))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		throughput(b, c)
	})
	b.Run("switchboard", func(b *testing.B) {
		f := newBenchFixture(b)
		c := dial(b, f.local)
		conn, err := c.connectFD(context.Background(), c.root, "tcp", "127.0.0.1", port, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		throughput(b, conn)
	})
}

// echoPort starts an echo server for latency runs.
func echoPort(b *testing.B) uint16 {
	port := echoServer(b, "")
	return port
}

// connectProxy is a plain Go net/http CONNECT proxy (hijack + io.Copy),
// the baseline for connect latency.
func connectProxy(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		hj, _ := w.(http.Hijacker)
		c, brw, err := hj.Hijack()
		if err != nil {
			_ = up.Close()
			return
		}
		_, _ = brw.WriteString("HTTP/1.1 200 OK\r\n\r\n")
		_ = brw.Flush()
		go func() { _, _ = io.Copy(up, c); _ = up.(*net.TCPConn).CloseWrite() }()
		_, _ = io.Copy(c, up)
		_ = c.Close()
		_ = up.Close()
	})}
	go func() { _ = srv.Serve(l) }()
	b.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

func echoByte(b *testing.B, c net.Conn) {
	if _, err := c.Write([]byte{7}); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkConnectLatency: constrain + connect + first echoed byte through
// the switchboard, against dial + CONNECT + echo through a plain Go HTTP
// CONNECT proxy, and a raw dial + echo.
func BenchmarkConnectLatency(b *testing.B) {
	port := echoPort(b)
	target := net.JoinHostPort("127.0.0.1", itoa(port))
	b.Run("raw", func(b *testing.B) {
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			c, err := net.Dial("tcp", target)
			if err != nil {
				b.Fatal(err)
			}
			echoByte(b, c)
			d = append(d, time.Since(start))
			_ = c.Close()
		}
		reportPercentiles(b, d)
	})
	b.Run("connectproxy", func(b *testing.B) {
		proxy := connectProxy(b)
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			c, err := net.Dial("tcp", proxy)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
				b.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("CONNECT: %v %v", resp, err)
			}
			if _, err := c.Write([]byte{7}); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(br, make([]byte, 1)); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(start))
			_ = c.Close()
		}
		reportPercentiles(b, d)
	})
	b.Run("switchboard", func(b *testing.B) {
		f := newBenchFixture(b)
		c := dial(b, f.local)
		ctx := context.Background()
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			// constrain, then connect on the promised handle (pipelined:
			// one round trip for both), then the first echoed byte.
			cf, crel := c.root.Constrain(ctx, func(p schema.Handle_constrain_Params) error {
				l, err := p.NewLabels()
				if err != nil {
					return err
				}
				return toSchema(l, labels.Set{Host: "127.0.0.1", Port: port, Vat: "bench"})
			})
			h := cf.Handle()
			conn, err := c.connectFD(ctx, h, "tcp", "127.0.0.1", port, nil)
			if err != nil {
				b.Fatal(err)
			}
			echoByte(b, conn)
			d = append(d, time.Since(start))
			shutdownConn(conn)
			_ = conn.Close()
			crel()
		}
		reportPercentiles(b, d)
	})
	b.Run("switchboard-sequential", func(b *testing.B) {
		f := newBenchFixture(b)
		c := dial(b, f.local)
		ctx := context.Background()
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			h, err := constrain(b, c.root, labels.Set{Host: "127.0.0.1", Port: port, Vat: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			conn, err := c.connectFD(ctx, h, "tcp", "127.0.0.1", port, nil)
			if err != nil {
				b.Fatal(err)
			}
			echoByte(b, conn)
			d = append(d, time.Since(start))
			shutdownConn(conn)
			_ = conn.Close()
			h.Release()
		}
		reportPercentiles(b, d)
	})
}

func newBenchFixture(b *testing.B) *fixture {
	b.Helper()
	return newFixture(b, nil)
}
