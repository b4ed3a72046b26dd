//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
	"toybox/vat/wall"
	"toybox/vat/wall/entry"
	"toybox/vat/wall/seccomp"
)

// runEntry runs the built toybox-entry outside any wall with extra as its
// fds 3, 4, ... and returns its exit code and output.
func runEntry(t *testing.T, extra []*os.File, args ...string) (int, string) {
	t.Helper()
	entryBin, _ := binaries(t)
	cmd := exec.Command(entryBin, args...)
	cmd.Env = []string{}
	cmd.ExtraFiles = extra
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("running toybox-entry: %v", err)
	return 0, ""
}

func socketFile(t *testing.T) *os.File {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fds[0]) })
	f := os.NewFile(uintptr(fds[1]), "app-cap")
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// The attack: descriptors the entry inherits (files at fds 3 to 5 but the
// capability's) must not reach the app, whose fd 3 is its capability
// whatever number the entry held it under. The app is ls, whose one
// descriptor of its own is the folder it lists.
func TestLauncherGivesTheAppExactlyFourDescriptors(t *testing.T) {
	_, probeBin := binaries(t)
	junk, err := os.Open(probeBin)
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	ls, err := exec.LookPath("ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		extra []*os.File
		capFD int
	}{
		{"capability at 3", []*os.File{socketFile(t), junk, junk}, 3},
		{"capability at 4", []*os.File{junk, socketFile(t), junk}, 4},
		{"capability at 5", []*os.File{junk, junk, socketFile(t)}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runEntry(t, tc.extra, "--vat", "t", "--app-cap-fd", strconv.Itoa(tc.capFD), "--", ls, "-l", "/proc/self/fd/")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, out)
			}
			held := map[string]string{}
			for _, line := range strings.Split(out, "\n") {
				if _, link, ok := strings.Cut(line, " -> "); ok {
					f := strings.Fields(line)
					held[f[len(f)-3]] = link
				}
			}
			if len(held) != 5 || !strings.HasPrefix(held["3"], "socket:") || !strings.HasSuffix(held["4"], "/fd") ||
				held["0"] == "" || held["1"] == "" || held["2"] == "" {
				t.Fatalf("the app holds %v; want 0, 1, 2, 3 (a socket) and ls's own folder", held)
			}
		})
	}
}

// What the launcher cannot do, it does not half do: the app never starts,
// and the exit code and message say why.
func TestLauncherRefusesAndSaysWhy(t *testing.T) {
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		name string
		args []string // before the command; fd 3 is a socket, fd 4 another
		cmd  string   // "" = touch the marker
		code int
		want string
	}{
		{"a number it cannot read", []string{"--app-cap-fd", "03"}, "", entry.ExitSetup, "the launcher did not start the app: --app-cap-fd is not a plain decimal number"},
		{"no app capability", []string{"--vat", "x"}, "", entry.ExitSetup, "no --app-cap-fd"},
		{"an unknown flag", []string{"--app-cap-fd", "3", "--bogus", "1"}, "", entry.ExitSetup, `an unknown flag (argument 3, "--bogus")`},
		{"the proxy port taken", []string{"--cap-fd", "4", "--proxy-port", busyPort, "--app-cap-fd", "3"}, "", entry.ExitSetup, "serving the proxy on port " + busyPort + ": bind 127.0.0.1:" + busyPort + ": address already in use"},
		{"a forwarded port taken", []string{"--cap-fd", "4", "--forward", busyPort + "=db.lan:5432", "--app-cap-fd", "3"}, "", entry.ExitSetup, "forwarding port " + busyPort + ": bind 127.0.0.1:" + busyPort + ": address already in use"},
		{"no such command", []string{"--app-cap-fd", "3"}, "/nonexistent/app", entry.ExitExec, "starting /nonexistent/app: no such file or directory"},
		{"an MCP transport but stdio", []string{"--mcp", "http", "--mcp-fd", "4", "--app-cap-fd", "3"}, "", entry.ExitSetup, "--mcp is not stdio"},
		{"an MCP mode it does not know", []string{"--mcp", "stdio", "--mcp-fd", "4", "--mcp-mode", "pooled", "--app-cap-fd", "3"}, "", entry.ExitSetup, "--mcp-mode is not session, shared or single"},
		{"MCP without a listener", []string{"--mcp", "stdio", "--app-cap-fd", "3"}, "", entry.ExitSetup, "--mcp stdio without --mcp-fd"},
		{"an MCP flag without --mcp", []string{"--mcp-fd", "4", "--app-cap-fd", "3"}, "", entry.ExitSetup, "an --mcp-* flag without --mcp stdio"},
		{"the app's capability as the MCP listener", []string{"--mcp", "stdio", "--mcp-fd", "3", "--app-cap-fd", "3"}, "", entry.ExitSetup, "--mcp-fd names the descriptor of a capability"},
		{"a closed MCP listener", []string{"--mcp", "stdio", "--mcp-fd", "9", "--app-cap-fd", "3"}, "", entry.ExitSetup, "the MCP listener (--mcp-fd): fcntl: bad file descriptor"},
		{"a listen port out of range", []string{"--listen-port", "65536", "--listen-path", "/tmp/x.sock", "--app-cap-fd", "3"}, "", entry.ExitSetup, "--listen-port is not a plain decimal port from 1 to 65535"},
		{"a listen port 0", []string{"--listen-port", "0", "--listen-path", "/tmp/x.sock", "--app-cap-fd", "3"}, "", entry.ExitSetup, "--listen-port is not a plain decimal port from 1 to 65535"},
		{"a listen port without its path", []string{"--listen-port", "3000", "--app-cap-fd", "3"}, "", entry.ExitSetup, "--listen-port and --listen-path come together"},
		{"a relative listen path", []string{"--listen-port", "3000", "--listen-path", "x.sock", "--app-cap-fd", "3"}, "", entry.ExitSetup, "--listen-path is not an absolute path shorter than a unix socket's"},
		{"a listen path too long for a socket", []string{"--listen-port", "3000", "--listen-path", "/" + strings.Repeat("a", 108), "--app-cap-fd", "3"}, "", entry.ExitSetup, "--listen-path is not an absolute path shorter"},
		{"the proxy's port to listen on", []string{"--cap-fd", "4", "--proxy-port", "39080", "--listen-port", "39080", "--listen-path", "/tmp/x.sock", "--app-cap-fd", "3"}, "", entry.ExitSetup, "--listen-port is the proxy's port"},
		{"a forwarded port to listen on", []string{"--cap-fd", "4", "--forward", "5432=db.lan:5432", "--listen-port", "5432", "--listen-path", "/tmp/x.sock", "--app-cap-fd", "3"}, "", entry.ExitSetup, "--listen-port is a forwarded port"},
		{"listen beside a stdio MCP server", []string{"--mcp", "stdio", "--mcp-fd", "4", "--listen-port", "3000", "--listen-path", "/tmp/x.sock", "--app-cap-fd", "3"}, "", entry.ExitSetup, "--listen-port with --mcp stdio"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			argv := append(tc.args, "--")
			if tc.cmd == "" {
				argv = append(argv, "/usr/bin/touch", marker)
			} else {
				argv = append(argv, tc.cmd)
			}
			code, out := runEntry(t, []*os.File{socketFile(t), socketFile(t)}, argv...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output %q; want exit %d and %q", code, out, tc.code, tc.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the app ran")
			}
		})
	}
}

// main says why the launcher did not start the app, with the exit code
// for it.
func TestLaunchCheck(t *testing.T) {
	ok := launch{State: launchStarted, Pid: 42, ArgvAt: 5, Argv: []string{"/app"}, CapFD: 4, AppCapFD: 3, ProxyPort: 39080}
	if code, err := ok.check(); err != nil || code != 0 {
		t.Fatalf("a started launch: %d %v", code, err)
	}
	for _, tc := range []struct {
		name string
		edit func(*launch)
		code int
		want string
	}{
		{"not run", func(l *launch) { *l = launch{Why: "no command"} }, entry.ExitSetup, "the launcher did not start the app: no command"},
		{"not run for an argument", func(l *launch) { *l = launch{Why: "an unknown flag", BadAt: 2, BadArg: "-x"} }, entry.ExitSetup, `the launcher did not start the app: an unknown flag (argument 2, "-x")`},
		{"undumpable failed", func(l *launch) {
			*l = launch{State: launchFailed, Stage: stageDumpable, Call: "prctl", Err: syscall.EPERM}
		}, entry.ExitSetup, "prctl: operation not permitted"},
		{"cloexec failed", func(l *launch) {
			*l = launch{State: launchFailed, Stage: stageCloexec, Call: "close_range", Err: syscall.EINVAL}
		}, entry.ExitSetup, "marking descriptors close-on-exec: close_range: invalid argument"},
		{"spawner failed", func(l *launch) {
			*l = launch{State: launchFailed, Stage: stageSpawner, Call: "fork", Err: syscall.EAGAIN}
		}, entry.ExitSetup, "starting the MCP spawner: fork: resource temporarily unavailable"},
		{"relay failed", func(l *launch) {
			*l = launch{State: launchFailed, Stage: stageListen, Call: "fork", Err: syscall.EAGAIN, Port: 3000}
		}, entry.ExitSetup, "starting the relay to the app's port 3000: fork: resource temporarily unavailable"},
		{"spawn failed", func(l *launch) {
			l.State, l.Stage, l.Call, l.Err = launchFailed, stageSpawn, "posix_spawn", syscall.EACCES
		}, entry.ExitExec, "starting /app: permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ok
			tc.edit(&l)
			code, err := l.check()
			if code != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %d %v; want %d and %q", code, err, tc.code, tc.want)
			}
		})
	}
}

// Whatever the launcher lets start, main accepts: an app never runs in a
// wall whose entry then refuses its own arguments.
func TestLauncherStartsNothingMainRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string // fd 3 and fd 4 are sockets
		ok   bool     // the entry runs the app and exits with its status
	}{
		{"plain", []string{"--vat", "v", "--app-cap-fd", "3"}, true},
		{"a network", []string{"--cap-fd", "4", "--proxy-port", "0", "--forward", "5432=db.lan:5432", "--forward", "5433=[::1]:5433", "--app-cap-fd", "3"}, true},
		{"= forms", []string{"-vat=v", "--log-level=debug", "-app-cap-fd=3"}, true},
		{"a log level main refuses", []string{"--log-level", "bogus", "--app-cap-fd", "3"}, false},
		{"a log level spelled otherwise", []string{"--log-level", "INFO", "--app-cap-fd", "3"}, false},
		{"a forward host with a space", []string{"--cap-fd", "4", "--forward", "80=bad host:1", "--app-cap-fd", "3"}, false},
		{"a forward host with a slash", []string{"--cap-fd", "4", "--forward", "80=a/b:1", "--app-cap-fd", "3"}, false},
		{"an IPv6 forward without brackets", []string{"--cap-fd", "4", "--forward", "80=::1:5", "--app-cap-fd", "3"}, false},
		{"a forward without a target port", []string{"--cap-fd", "4", "--forward", "80=db.lan", "--app-cap-fd", "3"}, false},
		{"a forward to port 0", []string{"--cap-fd", "4", "--forward", "80=db.lan:0", "--app-cap-fd", "3"}, false},
		{"a forward port with a sign", []string{"--cap-fd", "4", "--forward", "+80=db.lan:1", "--app-cap-fd", "3"}, false},
		{"the entry's capability given to the app", []string{"--cap-fd", "3", "--app-cap-fd", "3"}, false},
		{"a flag without its value", []string{"--app-cap-fd", "3", "--vat"}, false},
		{"a triple dash", []string{"---vat", "v", "--app-cap-fd", "3"}, false},
		{"help", []string{"-h", "--app-cap-fd", "3"}, false},
		{"a closed app capability", []string{"--app-cap-fd", "9"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			argv := append(append(tc.args, "--"), "/usr/bin/touch", marker)
			if tc.name == "a flag without its value" {
				argv = tc.args // the command is eaten as --vat's value
			}
			code, out := runEntry(t, []*os.File{socketFile(t), socketFile(t)}, argv...)
			_, serr := os.Stat(marker)
			ran := serr == nil
			if ran && code != 0 {
				t.Fatalf("the app ran, then the entry refused (exit %d): %s", code, out)
			}
			if ran != tc.ok || (!tc.ok && code != entry.ExitSetup) {
				t.Fatalf("app ran %v, exit %d, output %q; want ran %v (and exit %d when not)", ran, code, out, tc.ok, entry.ExitSetup)
			}
		})
	}
}

// The entry holds its capability and its listeners, nothing else it
// inherited: not a file left open at fd 5, not the app's capability.
func TestEntryHoldsOnlyItsOwn(t *testing.T) {
	_, probeBin := binaries(t)
	junk, err := os.Open(probeBin)
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	appCap, entryCap := socketFile(t), socketFile(t)
	var st unix.Stat_t
	if err := unix.Fstat(int(appCap.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	appCapLink := "socket:[" + strconv.FormatUint(st.Ino, 10) + "]"
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	entryBin, _ := binaries(t)
	cmd := exec.Command(entryBin, "--cap-fd", "4", "--proxy-port", strconv.Itoa(port), "--app-cap-fd", "3", "--", "/bin/sleep", "3")
	cmd.Env = []string{}
	cmd.ExtraFiles = []*os.File{appCap, entryCap, junk}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// The launcher has run once the Go runtime has threads of its own.
	// What the entry holds is read until it holds its capability: the Go
	// half moves it to a descriptor of its own while starting, and the
	// runtime opens files of its own (the cgroup's CPU quota) meanwhile.
	// No reading may show a descriptor that is not the entry's.
	capLink := "socket:[" + strconv.FormatUint(inode(t, entryCap), 10) + "]"
	testenv.WaitFor(t, 30*time.Second, func() error {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
		if err != nil {
			return fmt.Errorf("reading the entry's status: %w", err)
		}
		if strings.Contains(string(b), "\nThreads:\t1\n") {
			return errors.New("the entry's runtime never started")
		}
		held := fdLinks(t, cmd.Process.Pid)
		for fd, link := range held {
			if link == probeBin || link == appCapLink {
				t.Fatalf("the entry holds fd %s -> %s, which is not its own", fd, link)
			}
		}
		if !slices.Contains(slices.Collect(maps.Values(held)), capLink) {
			return fmt.Errorf("the entry's runtime never started holding its capability; last seen: %v", held)
		}
		return nil
	})
	if c, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(port)); err != nil {
		t.Errorf("the proxy port does not answer: %v", err)
	} else {
		_ = c.Close()
	}
}

func fdLinks(t *testing.T, pid int) map[string]string {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			m[e.Name()] = link
		}
	}
	return m
}

func inode(t *testing.T, f *os.File) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// An app that makes its stdio non-blocking before the entry's runtime
// starts (libuv does so for pipes) must not break the entry: the Go
// runtime then puts that descriptor in its poller, whose descriptors the
// entry must not take for inherited ones.
func TestEntrySurvivesNonBlockingStdio(t *testing.T) {
	entryBin, _ := binaries(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := unix.SetNonblock(int(w.Fd()), true); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(entryBin, "--cap-fd", "4", "--proxy-port", "0", "--app-cap-fd", "3", "--", "/bin/sleep", "1")
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.ExtraFiles = []*os.File{socketFile(t), socketFile(t)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = out.ReadFrom(r); close(done) }()
	err = cmd.Wait()
	<-done
	if err != nil {
		t.Fatalf("the entry ended with %v: %s", err, out.String())
	}
}

// TestEntryLocksItself: the filter the launcher installs in the entry once
// the app runs. The entry holds sockets of the switchboard's network; even
// code run in the entry must not disconnect one and connect, bind or listen
// with it, nor connect one with a MSG_FASTOPEN send, nor make a socket.
func TestEntryLocksItself(t *testing.T) {
	echo := echoServer(t)
	_, probeBin := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, probeBin)
	cmd.Env = []string{probeEnv + "=lock", fmt.Sprintf("PROBE_ARG=127.0.0.1:%d", echo)}
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		t.Fatalf("probe: %v; output:\n%s", err, out)
	}
	want(t, out,
		"CONNECT-UNSPEC operation not permitted",
		"BIND operation not permitted",
		"LISTEN operation not permitted",
		"SOCKET operation not permitted",
		"SOCKETPAIR operation not permitted",
		"IO_URING operation not permitted",
		"FASTOPEN-SENDTO operation not supported",
		"FASTOPEN-SENDMSG operation not supported",
		"FASTOPEN-SENDMMSG operation not supported",
		"FASTOPEN-STATE 7",
		"ECHO still carries <nil>",
	)
}

// TestEntryIsLockedInTheWall: in a real wall the entry (pid 1) has one
// seccomp filter more than the wall's: its own, installed after the app
// started, so the app never has it. The app has one of its own instead
// where the wall has transparent egress (its connect() calls go to the
// entry), and none more otherwise.
func TestEntryIsLockedInTheWall(t *testing.T) {
	w := newWalled(t, "locked", wall.Net{})
	out := w.run(t, nil, "filters", "")
	self := "FILTERS self 1"
	if seccomp.NotifierSupported() == nil {
		self = "FILTERS self 2"
	}
	want(t, out, "FILTERS 1 2", self)
}
