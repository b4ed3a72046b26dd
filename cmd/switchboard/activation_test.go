package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// activated starts the switchboard the way systemd does: the sockets as
// fds 3.., LISTEN_PID set to the child's own pid (the shell execs it),
// LISTEN_FDS and LISTEN_FDNAMES, and NOTIFY_SOCKET.
func activated(t *testing.T, files []*os.File, names string, notify string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0"`, filepath.Join(binDir, "switchboard"))
	cmd.ExtraFiles = files
	cmd.Env = append(os.Environ(), "LISTEN_FDS="+itoa(len(files)), "LISTEN_FDNAMES="+names, "NOTIFY_SOCKET="+notify)
	return cmd
}

func itoa(n int) string { return string(rune('0' + n)) }

func unixListenerFile(t *testing.T, path string) *os.File {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.File()
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestSocketActivationAndReady(t *testing.T) {
	dir := t.TempDir()
	notifyPath := filepath.Join(dir, "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	pub, loc := filepath.Join(dir, "public.sock"), filepath.Join(dir, "local.sock")
	cmd := activated(t, []*os.File{unixListenerFile(t, pub), unixListenerFile(t, loc)}, "public:local", notifyPath)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	_ = notify.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 256)
	n, err := notify.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), "READY=1") {
		t.Fatalf("notify = %q, %v; want READY=1 (stderr %s)", buf[:n], err, stderr.String())
	}
	code, _, errs := egress(t, "", "--socket", pub, "check", "127.0.0.1:80")
	if code != 3 || !strings.HasPrefix(errs, "egress refused: 127.0.0.1 is a loopback address") {
		t.Errorf("public activated socket: exit %d, %q", code, errs)
	}
	// The local handle gets past the address class and meets the
	// listener-owner rule: none is configured, so loopback stays closed.
	code, _, errs = egress(t, "", "--socket", loc, "check", "127.0.0.1:80")
	if code != 3 || !strings.Contains(errs, "no listener-owner check is configured") {
		t.Errorf("local activated socket: exit %d, %q; want refused by the unconfigured listener-owner check", code, errs)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM = %v; want clean (stderr %s)", err, stderr.String())
	}
	if _, err := os.Stat(pub); err != nil {
		t.Errorf("activated socket path removed by the switchboard: %v (systemd owns it)", err)
	}
}

func TestActivationRefusesWhatIsNotAUnixListener(t *testing.T) {
	dir := t.TempDir()
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tcpFile, _ := tcp.File()
	defer tcpFile.Close()
	defer tcp.Close()
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	regular, err := os.Open(filepath.Join(dir, "plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	conn1, conn2, err := socketpair()
	if err != nil {
		t.Fatal(err)
	}
	defer conn1.Close()
	defer conn2.Close()
	tests := []struct {
		name  string
		file  *os.File
		names string
		want  string
	}{
		{"tcp listener", tcpFile, "public", "not a unix socket"},
		{"regular file", regular, "public", "not a socket"},
		{"connected unix socket", conn1, "local", "not listening"},
		{"bad name", unixListenerFile(t, filepath.Join(dir, "x.sock")), "lan", "FileDescriptorName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := activated(t, []*os.File{tt.file}, tt.names, "")
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tt.want) {
				t.Errorf("switchboard with %s: %v %s; want a startup error containing %q", tt.name, err, out, tt.want)
			}
		})
	}
}

func socketpair() (*os.File, *os.File, error) {
	fds, err := testenv.SocketPair()
	if err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b"), nil
}
