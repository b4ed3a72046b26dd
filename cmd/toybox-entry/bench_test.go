//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"toybox/labels"
	"toybox/vat/wall"
)

// benchBytes is what one upload moves.
const benchBytes = 256 << 20

// BenchmarkConnectThroughput uploads benchBytes to a loopback sink three
// ways, with the same client program: from inside a wall through
// toybox-entry's CONNECT proxy (socket handed over by the switchboard,
// spliced), through a plain Go CONNECT proxy on the host, and straight over
// loopback TCP. Each reports MB/s; the targets are wall >= 1.0x the
// plain proxy and >= 0.6x raw TCP.
func BenchmarkConnectThroughput(b *testing.B) {
	sink := sinkServer(b)
	target := "127.0.0.1:" + strconv.Itoa(sink)
	arg := target + "|" + strconv.Itoa(benchBytes)
	report := func(b *testing.B, out string) {
		b.Helper()
		i := strings.Index(out, "SECONDS ")
		if i < 0 {
			b.Fatalf("no timing in the probe's output:\n%s", out)
		}
		secs, err := strconv.ParseFloat(strings.TrimSpace(strings.SplitN(out[i+8:], "\n", 2)[0]), 64)
		if err != nil || secs <= 0 {
			b.Fatalf("bad timing in %q", out)
		}
		b.ReportMetric(float64(benchBytes)/secs/1e6, "MB/s")
	}
	b.Run("wall-entry-proxy", func(b *testing.B) {
		w := newWalled(b, "bench", wall.Net{})
		grants := []labels.Set{{Host: "127.0.0.1", Port: uint16(sink)}}
		for b.Loop() {
			report(b, w.run(b, grants, "bulk", arg))
		}
	})
	b.Run("plain-go-proxy", func(b *testing.B) {
		proxy := plainProxy(b)
		_, probeBin := binaries(b)
		for b.Loop() {
			report(b, runProbe(b, probeBin, "bulk", arg, "http://"+proxy))
		}
	})
	b.Run("raw-tcp", func(b *testing.B) {
		_, probeBin := binaries(b)
		for b.Loop() {
			report(b, runProbe(b, probeBin, "bulkraw", arg, ""))
		}
	})
}

func runProbe(b *testing.B, bin, mode, arg, proxy string) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{probeEnv + "=" + mode, "PROBE_ARG=" + arg, "HTTP_PROXY=" + proxy}
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("probe: %v\n%s", err, out)
	}
	return string(out)
}

// plainProxy is the baseline: a minimal Go CONNECT proxy (io.Copy between
// TCP connections, which splices).
func plainProxy(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
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
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil || req.Method != http.MethodConnect {
					return
				}
				up, err := net.Dial("tcp", req.RequestURI)
				if err != nil {
					fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
					return
				}
				defer up.Close()
				fmt.Fprintf(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(up, br)
					_ = up.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				_, _ = io.Copy(c, up)
				<-done
			}()
		}
	}()
	return l.Addr().String()
}
