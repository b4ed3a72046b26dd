package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"

	"toybox/bench/load"
)

// Helper names: the runner starts these as child processes of its own
// binary, so that the CPU each side spends can be read from /proc apart
// from the runner's.
const (
	HelperTargets = "targets" // a bulk sink and an echo server on loopback
	HelperProxy   = "proxy"   // the baseline CONNECT proxy on loopback
)

// Helper is a running helper process. Stop it when done.
type Helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// Addrs holds the addresses it listens on, by name ("sink", "echo",
	// "proxy").
	Addrs map[string]string
}

// StartHelper runs `exe helper name` and waits for the line of JSON that
// names its addresses. The helper ends when its stdin closes (Stop, or the
// runner's death).
func StartHelper(ctx context.Context, exe, name string) (*Helper, error) {
	cmd := exec.CommandContext(ctx, exe, "helper", name)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting helper %s: %w", name, err)
	}
	h := &Helper{cmd: cmd, stdin: in}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err == nil {
		err = json.Unmarshal([]byte(line), &h.Addrs)
	}
	if err != nil {
		_ = h.Stop()
		return nil, fmt.Errorf("reading helper %s's addresses: %w", name, err)
	}
	return h, nil
}

// Pid returns the helper's process id.
func (h *Helper) Pid() int { return h.cmd.Process.Pid }

// Stop closes the helper's stdin and waits for it to exit.
func (h *Helper) Stop() error {
	_ = h.stdin.Close()
	return h.cmd.Wait()
}

// RunHelper is the helper process's side: it serves what name says, prints
// its addresses as one line of JSON on stdout, and returns when stdin
// reaches EOF.
func RunHelper(name string) error {
	addrs := map[string]string{}
	listen := func(key string) (net.Listener, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs[key] = l.Addr().String()
		return l, nil
	}
	switch name {
	case HelperTargets:
		sink, err := listen("sink")
		if err != nil {
			return err
		}
		echo, err := listen("echo")
		if err != nil {
			return err
		}
		go load.ServeTCP(sink, load.Sink)
		go load.ServeTCP(echo, load.Echo)
	case HelperProxy:
		l, err := listen("proxy")
		if err != nil {
			return err
		}
		go func() { _ = http.Serve(l, load.ConnectProxy{}) }()
	default:
		return fmt.Errorf("unknown helper %q; want one of %s", name, strings.Join([]string{HelperTargets, HelperProxy}, ", "))
	}
	if err := json.NewEncoder(os.Stdout).Encode(addrs); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}
