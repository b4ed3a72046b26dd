package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Supervisor is a running `toybox serve`, its admin and http sockets.
type Supervisor struct {
	cmd    *exec.Cmd
	done   chan struct{}
	Log    string
	admin  *http.Client
	public *http.Client
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 4,
	}}
}

// StartSupervisor runs `bin/toybox serve` with its state in dir, holding
// the switchboard socket sbSock ("" for none), with more serve flags
// extra, and waits for its admin socket. Stop it when done.
func StartSupervisor(ctx context.Context, bin, dir, sbSock string, log *slog.Logger, extra ...string) (*Supervisor, error) {
	toybox := filepath.Join(bin, "toybox")
	for _, b := range []string{toybox, filepath.Join(bin, "toybox-entry")} {
		if err := needBinary(b); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	admin, pub := filepath.Join(dir, "admin.sock"), filepath.Join(dir, "http.sock")
	logPath := filepath.Join(dir, "toybox.log")
	lf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	// The entry as an installed system has it: a copy, as make install
	// makes. A file the linker has just written sits in the page cache
	// in large folios, and each wall's entry maps more of it (about 1 MiB
	// more RSS per idle vat, with the same code).
	entry := filepath.Join(dir, "toybox-entry")
	if err := installFile(filepath.Join(bin, "toybox-entry"), entry); err != nil {
		return nil, fmt.Errorf("installing toybox-entry for the bench: %w", err)
	}
	// The walls have no CPU limit: every row's baseline runs on the host
	// with none. Under serve's default of one CPU an app's own upload and
	// the kernel's loopback work it pays for share that one CPU, and a
	// throughput row would measure the limit, not the path
	// (docs/benchmarks.md, "Reading the table").
	args := []string{
		"serve", "--state", filepath.Join(dir, "state"), "--http", "unix:" + pub, "--admin", admin,
		"--entry", entry, "--wall-cpus", "0",
	}
	if sbSock != "" {
		args = append(args, "--switchboard", sbSock)
	}
	args = append(args, extra...)
	cmd := exec.Command(toybox, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), "TOYBOX_WALLS=", "TOYBOX_WALLS_DEFAULT=")
	cmd.SysProcAttr = killedWithParent()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting toybox serve: %w", err)
	}
	s := &Supervisor{cmd: cmd, done: make(chan struct{}), Log: logPath, admin: unixClient(admin), public: unixClient(pub)}
	go func() { _ = cmd.Wait(); close(s.done) }()
	for _, sock := range []string{admin, pub} {
		if err := waitUnix(ctx, sock, s.done, 10*time.Second); err != nil {
			s.Stop()
			return nil, fmt.Errorf("toybox serve socket %s: %w (log: %s)", sock, err, tail(logPath))
		}
	}
	log.Info("supervisor running", "pid", cmd.Process.Pid)
	return s, nil
}

// Pid returns the supervisor's process id.
func (s *Supervisor) Pid() int { return s.cmd.Process.Pid }

// Stop ends the supervisor and its vats.
func (s *Supervisor) Stop() { stopProc(s.cmd, s.done) }

// Install PUTs code as vat id with the egress grant (JSON, "" for none).
func (s *Supervisor) Install(ctx context.Context, id string, code []byte, egress string) error {
	q := url.Values{}
	if egress != "" {
		q.Set("egress", egress)
	}
	return s.AdminDo(ctx, http.MethodPut, "/"+id, q, code)
}

// AdminDo sends method path?q with body to the admin socket and wants a
// 2xx answer.
func (s *Supervisor) AdminDo(ctx context.Context, method, path string, q url.Values, body []byte) error {
	u := "http://toybox" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := s.admin.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// PostPublic sends POST path with a JSON body and headers to the public
// socket (as Host localhost) and returns the status and body.
func (s *Supervisor) PostPublic(ctx context.Context, path string, body []byte, headers map[string]string) (int, []byte, error) {
	return s.publicDo(ctx, http.MethodPost, path, bytes.NewReader(body), headers)
}

// publicDo sends one request to the public socket, as Host localhost (a
// name the public listener serves).
func (s *Supervisor) publicDo(ctx context.Context, method, path string, body io.Reader, headers map[string]string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, body)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := s.public.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// Remove DELETEs vat id with its data.
func (s *Supervisor) Remove(ctx context.Context, id string) error {
	return s.AdminDo(ctx, http.MethodDelete, "/"+id, url.Values{"purge": {"1"}}, nil)
}

// Get sends GET path to the public socket (as Host localhost, a name the
// public listener serves) and returns the status and body.
func (s *Supervisor) Get(ctx context.Context, path string) (int, []byte, error) {
	return s.publicDo(ctx, http.MethodGet, path, nil, nil)
}

// GetJSON sends GET path to the public socket and decodes a 200 answer.
func (s *Supervisor) GetJSON(ctx context.Context, path string, v any) error {
	code, b, err := s.Get(ctx, path)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET %s: %d: %s", path, code, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, v)
}

// AdminGet sends GET path to the admin socket and returns the body.
func (s *Supervisor) AdminGet(ctx context.Context, path string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://toybox"+path, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := s.admin.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return string(bytes.TrimSpace(b))
}

// WaitOK polls GET path until it answers 200, every interval, until
// timeout.
func (s *Supervisor) WaitOK(ctx context.Context, path string, interval, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		code, b, err := s.Get(ctx, path)
		if err == nil && code == http.StatusOK {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d: %s", code, bytes.TrimSpace(b))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("GET %s did not answer 200 within %s; last: %s", path, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// installFile copies src to dst (mode 0755), as install(1) does.
func installFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
