//go:build linux

package owner

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the helper processes of the integration tests:
// a listener run as the test "toybox user", under various names and places.
const helperEnv = "TOYBOX_OWNER_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "listen":
		os.Exit(helperListen())
	case "hold":
		os.Exit(helperHold())
	case "check":
		os.Exit(helperCheck())
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// helperListen listens on TOYBOX_OWNER_TEST_ADDR (SO_REUSEPORT when
// TOYBOX_OWNER_TEST_REUSEPORT=1), optionally hands the socket to a child
// (TOYBOX_OWNER_TEST_SHARE names the child's binary, argv[0] is its base
// name), prints the bound address and waits for stdin to close.
func helperListen() int {
	lc := net.ListenConfig{}
	if os.Getenv("TOYBOX_OWNER_TEST_REUSEPORT") == "1" {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	if os.Getenv("TOYBOX_OWNER_TEST_NODUMP") == "1" {
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "prctl:", err)
			return 1
		}
	}
	network := "tcp4"
	addr := os.Getenv("TOYBOX_OWNER_TEST_ADDR")
	if strings.HasPrefix(addr, "[") {
		network = "tcp"
	}
	ln, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		return 1
	}
	if share := os.Getenv("TOYBOX_OWNER_TEST_SHARE"); share != "" {
		f, err := ln.(*net.TCPListener).File()
		if err != nil {
			fmt.Fprintln(os.Stderr, "listener file:", err)
			return 1
		}
		child := exec.Command(share)
		child.Args = []string{filepath.Base(share)}
		child.Env = append(os.Environ(), helperEnv+"=hold")
		child.ExtraFiles = []*os.File{f}
		child.Stderr = os.Stderr
		in, _ := child.StdinPipe() // the child lives as long as we do
		out, _ := child.StdoutPipe()
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "starting child:", err)
			return 1
		}
		f.Close()
		defer in.Close()
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "held\n" {
			fmt.Fprintln(os.Stderr, "child did not hold:", line, err)
			return 1
		}
	}
	fmt.Println(ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// helperCheck runs a Checker in this (unprivileged) process, as the
// switchboard would run it, and prints one decision as JSON:
// TOYBOX_OWNER_TEST_CHECK holds a JSON checkRequest.
func helperCheck() int {
	var req checkRequest
	if err := json.Unmarshal([]byte(os.Getenv("TOYBOX_OWNER_TEST_CHECK")), &req); err != nil {
		fmt.Fprintln(os.Stderr, "request:", err)
		return 1
	}
	c, err := New(Config{ToyboxUID: req.UID, OwnRoots: req.Roots, DockerHost: req.DockerHost, CacheTTL: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "new:", err)
		return 1
	}
	defer c.Close()
	d := c.Check(context.Background(), netip.MustParseAddrPort(req.Target), req.Vat, req.Typed)
	if err := json.NewEncoder(os.Stdout).Encode(d); err != nil {
		return 1
	}
	return 0
}

type checkRequest struct {
	UID        int
	Roots      []string
	DockerHost string
	Target     string
	Vat        string
	Typed      bool
}

// helperHold keeps fd 3 (a listening socket) open until stdin closes.
func helperHold() int {
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// testUID is the stand-in for the toybox user in these tests.
const testUID = 64000

// helperTree is a world-readable directory the helper binaries are copied
// into, so that a process of testUID can run them.
func helperTree(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "owner-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyHelper copies the test binary to path (0755), making its directories.
func copyHelper(t *testing.T, path string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// listener describes one helper listener process.
type listener struct {
	bin       string   // the binary (a copy of the test binary)
	argv      []string // argv; argv[0] defaults to bin
	dir       string   // working directory; default: bin's directory
	addr      string   // listen address, e.g. 127.0.0.1:0
	uid       int      // run as this uid and gid; 0 = as the test (root)
	reusePort bool
	noDump    bool   // prctl(PR_SET_DUMPABLE, 0): /proc/<pid>/fd becomes root's
	share     string // a binary to hand the socket to after listening
}

// start runs the listener and returns its pid, its bound address and a
// function that stops it (also called when t ends).
func (l listener) start(t *testing.T) (int, string, func()) {
	t.Helper()
	cmd := exec.Command(l.bin)
	if len(l.argv) > 0 {
		cmd.Args = l.argv
	}
	cmd.Dir = l.dir
	if cmd.Dir == "" {
		cmd.Dir = filepath.Dir(l.bin)
	}
	cmd.Env = append(os.Environ(), helperEnv+"=listen", "TOYBOX_OWNER_TEST_ADDR="+l.addr)
	if l.reusePort {
		cmd.Env = append(cmd.Env, "TOYBOX_OWNER_TEST_REUSEPORT=1")
	}
	if l.noDump {
		cmd.Env = append(cmd.Env, "TOYBOX_OWNER_TEST_NODUMP=1")
	}
	if l.share != "" {
		cmd.Env = append(cmd.Env, "TOYBOX_OWNER_TEST_SHARE="+l.share)
	}
	if l.uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(l.uid), Gid: uint32(l.uid)}}
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting helper %s: %v", l.bin, err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper %s did not report its address: %v", l.bin, err)
	}
	return cmd.Process.Pid, strings.TrimSpace(line), stop
}

// portOf returns the port of a host:port string.
func portOf(t *testing.T, hostport string) uint16 {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	return uint16(n)
}
