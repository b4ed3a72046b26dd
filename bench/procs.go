package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Switchboard is a running switchboard process serving a local socket.
type Switchboard struct {
	cmd    *exec.Cmd
	Socket string // the local socket's path
	Log    string // its stderr (decision records)
	done   chan struct{}
}

// needBinary reports why path cannot be run, or nil.
func needBinary(path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s is not built", filepath.Base(path))
	}
	if err != nil {
		return err
	}
	if st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", path)
	}
	return nil
}

// StartSwitchboard runs bin (the switchboard) with a local socket in dir
// and waits until the socket answers. Stop it when done.
func StartSwitchboard(ctx context.Context, bin, dir string, log *slog.Logger) (*Switchboard, error) {
	return StartSwitchboardWith(ctx, bin, dir, "", log)
}

// StartSwitchboardWith is StartSwitchboard with a configuration file of
// config's content (JSON, see docs/switchboard.md), when it is not empty.
func StartSwitchboardWith(ctx context.Context, bin, dir, config string, log *slog.Logger) (*Switchboard, error) {
	if err := needBinary(bin); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"--listen", "local=" + filepath.Join(dir, "local.sock"), "--loopback", "unchecked"}
	if config != "" {
		cf := filepath.Join(dir, "switchboard.json")
		if err := os.WriteFile(cf, []byte(config), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "--config", cf)
	}
	sock := filepath.Join(dir, "local.sock")
	logPath := filepath.Join(dir, "switchboard.log")
	lf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = killedWithParent()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the switchboard: %w", err)
	}
	s := &Switchboard{cmd: cmd, Socket: sock, Log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := waitUnix(ctx, sock, s.done, sbListenTimeout); err != nil {
		s.Stop()
		return nil, fmt.Errorf("switchboard socket %s: %w (log: %s)", sock, err, tail(logPath))
	}
	log.Info("switchboard running", "pid", cmd.Process.Pid, "socket", sock)
	return s, nil
}

// Pid returns the switchboard's process id.
func (s *Switchboard) Pid() int { return s.cmd.Process.Pid }

// Stop ends the switchboard (SIGTERM, then SIGKILL after 3s).
func (s *Switchboard) Stop() { stopProc(s.cmd, s.done) }

func stopProc(cmd *exec.Cmd, done chan struct{}) {
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// waitUnix waits until the unix socket at path accepts a connection.
func waitUnix(ctx context.Context, path string, died <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-died:
			return errors.New("the process exited before listening")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening after %s: %w", timeout, err)
		}
	}
}

// tail returns the last bytes of the file at path, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return string(b)
}

func splitHostPort(addr string) (string, uint16, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port of %s: %w", addr, err)
	}
	return h, uint16(n), nil
}
