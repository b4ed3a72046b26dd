package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"toybox/labels"
)

// TestCommandsRefuseBadVatID: the command line is where a vat id enters. A
// bad one is refused with the one message labels.ParseVatID gives, before
// anything reaches the admin socket: "../x" or "a?b" sent as a path would
// name another path or add a query.
func TestCommandsRefuseBadVatID(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	for _, id := range []string{"Bad_ID", "../x", "a?b", "a.b"} {
		_, perr := labels.ParseVatID(id)
		if perr == nil {
			t.Fatalf("ParseVatID(%q) took it; the test needs a bad id", id)
		}
		for _, tt := range []struct {
			name string
			main func([]string) int
			args []string
		}{
			{"install", installMain, []string{"--admin", sock, id, "some-package"}},
			{"reach", reachMain, []string{"--admin", sock, id}},
			{"status", statusMain, []string{"--admin", sock, id}},
		} {
			code, stderr := runCapturingStderr(t, func() int { return tt.main(tt.args) })
			want := "toybox " + tt.name + ": " + perr.Error() + "\n"
			if code != exitError || stderr != want {
				t.Errorf("toybox %s %q = %d, %q; want %d, %q", tt.name, id, code, stderr, exitError, want)
			}
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connections reached the admin socket; want none", n)
	}
}

// runCapturingStderr runs f with os.Stderr going to a pipe, and returns
// what f returned and what it wrote there.
func runCapturingStderr(t *testing.T, f func() int) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	old := os.Stderr
	os.Stderr = w
	got := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	code := f()
	os.Stderr = old
	w.Close()
	return code, <-got
}
