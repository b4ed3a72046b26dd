package entry

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"toybox/vat/mcp/bridge"
)

// RunMCP serves a stdio MCP vat: the bridge (package bridge) on
// cfg.MCP.Listener, its processes started by the launcher's spawner, the
// wall's network as Run serves it. It returns once a stop request
// (SIGTERM, SIGINT, SIGHUP, SIGQUIT) has ended every process the way the
// stdio transport says, or with ExitSetup when the entry cannot do its
// part (the network could not be set up, the spawner is gone).
func RunMCP(ctx context.Context, cfg Config) int {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "toybox-entry: "+format+"\n", args...)
		return code
	}
	m := cfg.MCP
	if m == nil || m.Listener == nil || m.Spawner == nil || m.SpawnerPid <= 0 {
		return fail(ExitSetup, "no MCP listener or spawner")
	}
	// One P: each call is a chain of hand-offs between goroutines (the
	// connection's, the process's stdout reader), and with a second P each
	// one wakes another thread instead of running on this one. The
	// wall's CPU cap is one CPU by default, and Go's default never goes
	// below 2; the vat's own processes are not held to it.
	runtime.GOMAXPROCS(1)
	signal.Ignore(crashSignals...)
	ls := cfg.Listeners
	if cfg.Cap == nil && ls != nil {
		ls.close()
		ls = nil
	}
	var netDone chan netResult
	var stopNet func()
	if cfg.Cap != nil {
		if ls == nil {
			ls = &Listeners{}
		}
		nctx, cancel := context.WithCancel(ctx)
		defer cancel()
		netDone = make(chan netResult, 1)
		go func() {
			stop, lost, err := serveNet(nctx, cfg, ls, logger)
			netDone <- netResult{stop: stop, lost: lost, err: err}
		}()
	}
	z, err := newZygote(m.Spawner, m.SpawnerPid)
	if err != nil {
		return fail(ExitSetup, "the MCP spawner: %v", err)
	}
	b, err := bridge.New(bridge.Config{
		Vat: cfg.ID, Spawner: z, Mode: m.Mode, Era: m.Era, MaxProcs: m.MaxProcs, Idle: m.Idle,
		Logger: m.Logger, VatLog: os.Stderr,
	})
	if err != nil {
		return fail(ExitSetup, "the MCP bridge: %v", err)
	}
	ln, err := netListener(m.Listener)
	if err != nil {
		b.Close()
		return fail(ExitSetup, "serving the MCP listener: %v", err)
	}
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 30 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	catchSignals()

	// shutdown stops serving, then ends the processes (reaping them as
	// they go) and returns code.
	shutdown := func(code int) int {
		_ = srv.Close()
		closed := make(chan struct{})
		go func() { b.Close(); close(closed) }()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-closed:
				if stopNet != nil {
					go stopNet()
				}
				return code
			case <-chld:
			case <-tick.C:
			}
			z.reapAll()
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lost <-chan struct{}
	for {
		select {
		case r := <-netDone:
			netDone = nil
			if r.err != nil {
				fmt.Fprintf(os.Stderr, "toybox-entry: %v\n", r.err)
				return shutdown(ExitSetup)
			}
			stopNet, lost = r.stop, r.lost
			continue
		case <-lost:
			// As in Run: every connect would fail from here on while the
			// wall looked healthy, so it ends and starts again.
			fmt.Fprintln(os.Stderr, "toybox-entry: the capability connection to the supervisor ended while the MCP server ran; the wall ends so that it starts again with its egress")
			return shutdown(ExitLost)
		case err := <-served:
			fmt.Fprintf(os.Stderr, "toybox-entry: serving MCP: %v\n", err)
			return shutdown(ExitSetup)
		case s := <-sigs:
			switch s {
			case unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT:
				return shutdown(0)
			}
			continue
		case <-chld:
		case <-tick.C:
		}
		if z.reapAll() {
			fmt.Fprintln(os.Stderr, "toybox-entry: the MCP spawner is gone; stopping the vat")
			return shutdown(ExitSetup)
		}
	}
}

// spawnTimeout bounds one request to the spawner (a spawner the app
// stopped, sharing its uid, must not hold the bridge for good).
const spawnTimeout = 10 * time.Second

// zygote asks the launcher's spawner for processes and reaps them (they
// are this process's children) and every orphan that comes to pid 1.
type zygote struct {
	mu   sync.Mutex // one spawn at a time
	conn *net.UnixConn
	pid  int

	rmu      sync.Mutex
	children map[int]*zchild
	early    map[int]string // reaped during a spawn, before its answer came
	spawning bool
	gone     bool
}

func newZygote(f *os.File, pid int) (*zygote, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return nil, errors.New("the spawner's descriptor is not a unix socket")
	}
	return &zygote{conn: uc, pid: pid, children: map[int]*zchild{}, early: map[int]string{}}, nil
}

var errSpawnerGone = errors.New("the spawner is gone")

// maxSpawnEnv bounds a principal's environment as sent to the spawner
// (its TE_ENV_MAX); the supervisor allows 32 KiB.
const maxSpawnEnv = 64 << 10

// envPipe returns the read end of a pipe holding env (NAME=value, each
// ending in NUL), written and closed: the spawner reads it to EOF.
func envPipe(env []string) (*os.File, error) {
	var blob []byte
	for _, kv := range env {
		if strings.IndexByte(kv, 0) >= 0 || !strings.Contains(kv, "=") {
			return nil, fmt.Errorf("a principal's variable %q is not NAME=value", kv)
		}
		blob = append(append(blob, kv...), 0)
	}
	if len(blob) > maxSpawnEnv {
		return nil, fmt.Errorf("the principal's environment is %d bytes, over %d", len(blob), maxSpawnEnv)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// A pipe holds 64 KiB: the write never waits for the reader.
	_, err = w.Write(blob)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

// Spawn asks the spawner for one process of the app's command on the
// three files, with env set over the app's environment (a fourth file,
// a pipe holding it, when there is any).
func (z *zygote) Spawn(stdin, stdout, stderr *os.File, env []string) (bridge.Child, error) {
	var envR *os.File
	if len(env) > 0 {
		var err error
		if envR, err = envPipe(env); err != nil {
			return nil, fmt.Errorf("passing the principal's environment: %w", err)
		}
		defer envR.Close()
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.rmu.Lock()
	if z.gone {
		z.rmu.Unlock()
		return nil, errSpawnerGone
	}
	z.spawning = true
	z.rmu.Unlock()
	defer func() {
		z.rmu.Lock()
		z.spawning = false
		z.early = map[int]string{}
		z.rmu.Unlock()
	}()
	_ = z.conn.SetDeadline(time.Now().Add(spawnTimeout))
	fds := []int{int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd())}
	if envR != nil {
		fds = append(fds, int(envR.Fd()))
	}
	rights := unix.UnixRights(fds...)
	if _, _, err := z.conn.WriteMsgUnix([]byte{0}, rights, nil); err != nil {
		return nil, z.broken(fmt.Errorf("asking the spawner: %w", err))
	}
	var rep [8]byte
	n, err := z.conn.Read(rep[:])
	if err != nil || n != len(rep) {
		// A late answer would be read as the next request's: the spawner
		// is ended, and the entry with it (reapAll).
		return nil, z.broken(fmt.Errorf("the spawner's answer: %d bytes, %w", n, err))
	}
	pid := int(int32(binary.NativeEndian.Uint32(rep[0:4])))
	errno := syscall.Errno(binary.NativeEndian.Uint32(rep[4:8]))
	if errno != 0 {
		// A child that failed its exec exits 127 and is reaped as an
		// orphan would be.
		return nil, os.NewSyscallError("exec", errno)
	}
	if pid <= 0 {
		return nil, errors.New("the spawner answered no pid")
	}
	c := &zchild{pid: pid, done: make(chan struct{})}
	z.rmu.Lock()
	if text, ok := z.early[pid]; ok {
		c.finish(text)
	} else {
		z.children[pid] = c
	}
	z.rmu.Unlock()
	return c, nil
}

// broken ends a spawner that failed a request: nothing it says can be
// paired with a request any more.
func (z *zygote) broken(err error) error {
	z.rmu.Lock()
	z.gone = true
	z.rmu.Unlock()
	_ = unix.Kill(z.pid, unix.SIGKILL)
	return err
}

// reapAll reaps every child that has ended; it reports whether the
// spawner is among them.
func (z *zygote) reapAll() (spawnerGone bool) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return spawnerGone
		}
		text := exitText(ws)
		z.rmu.Lock()
		if pid == z.pid {
			z.gone = true
			spawnerGone = true
		} else if c := z.children[pid]; c != nil {
			delete(z.children, pid)
			c.finish(text)
		} else if z.spawning {
			z.early[pid] = text
		}
		z.rmu.Unlock()
	}
}

func exitText(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "signal: " + strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
	}
	return "ended"
}

// zchild is one process the spawner started: the leader of its own
// process group.
type zchild struct {
	pid  int
	once sync.Once
	done chan struct{}
	text string
}

func (c *zchild) finish(text string) {
	c.once.Do(func() {
		c.text = text
		close(c.done)
	})
}

func (c *zchild) Pid() int              { return c.pid }
func (c *zchild) Done() <-chan struct{} { return c.done }
func (c *zchild) ExitText() string      { return c.text }

// Signal sends sig to the process's group: what it started goes too.
func (c *zchild) Signal(sig syscall.Signal) error {
	return unix.Kill(-c.pid, sig)
}
