package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"toybox/vat/wall/entry"
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
		{"no app capability", []string{"--vat", "x"}, "", entry.ExitSetup, "--app-cap-fd is required"},
		{"an unknown flag", []string{"--app-cap-fd", "3", "--bogus", "1"}, "", entry.ExitSetup, "flag provided but not defined: -bogus"},
		{"the proxy port taken", []string{"--cap-fd", "4", "--proxy-port", busyPort, "--app-cap-fd", "3"}, "", entry.ExitSetup, "serving the proxy on port " + busyPort + ": bind 127.0.0.1:" + busyPort + ": address already in use"},
		{"a forwarded port taken", []string{"--cap-fd", "4", "--forward", busyPort + "=db.lan:5432", "--app-cap-fd", "3"}, "", entry.ExitSetup, "forwarding port " + busyPort + ": bind 127.0.0.1:" + busyPort + ": address already in use"},
		{"no such command", []string{"--app-cap-fd", "3"}, "/nonexistent/app", entry.ExitExec, "starting /nonexistent/app: no such file or directory"},
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

// main checks the launcher's reading of the arguments against its own.
func TestLaunchCheck(t *testing.T) {
	argv := []string{"/app"}
	at := len(os.Args) - len(argv)
	ok := launch{State: launchStarted, Pid: 42, ArgvAt: at, CapFD: 4, AppCapFD: 3, ProxyPort: 39080, ForwardPorts: []int{5432}}
	f := flags{capFD: 4, appCapFD: 3, proxyPort: 39080, forwards: []entry.Forward{{Port: 5432, Host: "db", TargetPort: 5432}}, argv: argv}
	if code, err := ok.check(f); err != nil || code != 0 {
		t.Fatalf("agreeing launch: %d %v", code, err)
	}
	for _, tc := range []struct {
		name string
		edit func(*launch)
		code int
		want string
	}{
		{"another proxy port", func(l *launch) { l.ProxyPort = 8080 }, entry.ExitSetup, "read the arguments differently"},
		{"other forwards", func(l *launch) { l.ForwardPorts = nil }, entry.ExitSetup, "read the arguments differently"},
		{"the command elsewhere", func(l *launch) { l.ArgvAt-- }, entry.ExitSetup, "read the arguments differently"},
		{"another app capability", func(l *launch) { l.AppCapFD = 5 }, entry.ExitSetup, "read the arguments differently"},
		{"not run", func(l *launch) { *l = launch{Why: "no command"} }, entry.ExitSetup, "the launcher did not start the app: no command"},
		{"undumpable failed", func(l *launch) {
			*l = launch{State: launchFailed, Stage: stageDumpable, Call: "prctl", Err: syscall.EPERM}
		}, entry.ExitSetup, "prctl: operation not permitted"},
		{"cloexec failed", func(l *launch) {
			*l = launch{State: launchFailed, Stage: stageCloexec, Call: "close_range", Err: syscall.EINVAL}
		}, entry.ExitSetup, "marking descriptors close-on-exec: close_range: invalid argument"},
		{"spawn failed", func(l *launch) {
			*l = launch{State: launchFailed, Stage: stageSpawn, Call: "posix_spawn", Err: syscall.EACCES}
		}, entry.ExitExec, "starting /app: permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ok
			l.ForwardPorts = []int{5432}
			tc.edit(&l)
			code, err := l.check(f)
			if code != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %d %v; want %d and %q", code, err, tc.code, tc.want)
			}
		})
	}
}
