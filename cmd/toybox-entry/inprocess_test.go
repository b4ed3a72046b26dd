package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/vat/grant"
	"toybox/vat/wall/entry"
)

// inProcessProxy runs the entry's proxy in this process (no wall) over a
// real grant.Vat and switchboard, and returns its address.
func inProcessProxy(t testing.TB, grants []labels.Set, opts ...func(*entry.Proxy)) string {
	t.Helper()
	dir := t.TempDir()
	sock := startSwitchboard(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	u := grant.NewUpstream(grant.UpstreamConfig{Path: sock})
	t.Cleanup(func() { _ = u.Close() })
	v, err := grant.NewVat(grant.VatConfig{ID: "inproc", Grants: grants, Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Revoke)
	f := serveVat(t, ctx, v)
	conn, err := wire.FromFile(f, true)
	if err != nil {
		t.Fatal(err)
	}
	rc := conn.RPC(capnp.Client{}, nil)
	t.Cleanup(func() { _ = rc.Close() })
	vc := schema.Vat(rc.Bootstrap(ctx))
	defer vc.Release()
	fut, rel := vc.Egress(ctx, nil)
	defer rel()
	res, err := fut.Struct()
	if err != nil {
		t.Fatal(err)
	}
	p := entry.NewProxy("inproc", res.Handle().AddRef(), conn, nil)
	t.Cleanup(p.Close)
	for _, o := range opts {
		o(p)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() { _ = p.ServeProxy(ctx, l) }()
	return l.Addr().String()
}

func TestProxyInProcess(t *testing.T) {
	tests := []struct {
		name string
		opts []func(*entry.Proxy)
		size int
	}{
		{"socket handed over", nil, 1 << 20},
		{"ByteStream pair", []func(*entry.Proxy){(*entry.Proxy).UseStreams}, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			echo := echoServer(t)
			addr := inProcessProxy(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(echo)}}, tt.opts...)
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			target := fmt.Sprintf("127.0.0.1:%d", echo)
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT = %s", resp.Status)
			}
			msg := bytes.Repeat([]byte("through the proxy "), tt.size/18)
			go func() {
				_, _ = c.Write(msg)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
			got, err := io.ReadAll(br)
			if err != nil {
				t.Fatalf("reading the echo: %v", err)
			}
			if !bytes.Equal(got, msg) {
				t.Errorf("echo = %d bytes; want the %d sent", len(got), len(msg))
			}
		})
	}
}

// TestProbeAgainstInProcessProxy runs the in-wall probe program (as a
// separate process, outside any wall) against the in-process proxy: the
// probe's own checks, without bubblewrap.
func TestProbeAgainstInProcessProxy(t *testing.T) {
	echo := echoServer(t)
	addr := inProcessProxy(t, []labels.Set{{Host: "127.0.0.1", Port: uint16(echo)}})
	_, probeBin := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, probeBin)
	cmd.Env = []string{probeEnv + "=connect", fmt.Sprintf("PROBE_ARG=127.0.0.1:%d|hello", echo), "HTTP_PROXY=http://" + addr}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v; output:\n%s", err, out)
	}
	want(t, string(out), "STATUS 200", "ECHO hello")
}
