package doors

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"toybox/schema"
	"toybox/schema/wire"
	"toybox/tests/testenv"
)

// helperEnv makes the test binary act as a helper process (see TestMain).
const helperEnv = "TOYBOX_DOORS_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "vat", "helper":
		testenv.TrackLeaks()
		os.Exit(helperMain(os.Getenv(helperEnv)))
	}
	code := testenv.RunCheckingLeaks(m)
	if backendPath != "" {
		_ = os.RemoveAll(filepath.Dir(backendPath))
	}
	os.Exit(code)
}

// command is one line a test sends to a helper process on its stdin.
type command struct {
	Op      string      `json:"op"`
	Door    string      `json:"door,omitempty"` // a name the helper keeps a Door under
	As      string      `json:"as,omitempty"`
	Name    string      `json:"name,omitempty"`
	Method  string      `json:"method,omitempty"`
	Path    string      `json:"path,omitempty"`
	Headers [][2]string `json:"headers,omitempty"`
	Body    string      `json:"body,omitempty"`
}

// reply is the helper's answer, one line on its stdout.
type reply struct {
	Err     string      `json:"err,omitempty"`
	Entries []string    `json:"entries,omitempty"`
	Status  int         `json:"status,omitempty"`
	Headers [][2]string `json:"headers,omitempty"`
	Body    string      `json:"body,omitempty"`
}

// helperMain runs a helper process. A "vat" finds a DoorSet as the bootstrap
// capability on fd 3 (and may serve one of its Doors to another process on
// fd 4, when told to leak it); a "helper" finds a Door on fd 3 (kept as
// "root"). Both obey commands on stdin. Every capability is released before
// exit; a leak makes the exit status 3.
func helperMain(role string) int {
	ctx := context.Background()
	conn, err := wire.FromFile(os.NewFile(3, "fd3"), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rc := conn.RPC(capnp.Client{}, nil)
	boot := rc.Bootstrap(ctx)
	doors := map[string]schema.Door{}
	var set schema.DoorSet
	if role == "vat" {
		set = schema.DoorSet(boot)
	} else {
		doors["root"] = schema.Door(boot)
	}
	var leakConn interface{ Close() error }
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	out := json.NewEncoder(os.Stdout)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if c.Op == "exit" {
			break
		}
		_ = out.Encode(run(ctx, c, set, doors, &leakConn))
	}
	for _, d := range doors {
		d.Release()
	}
	set.Release()
	if leakConn != nil {
		_ = leakConn.Close()
	}
	_ = rc.Close()
	if l := testenv.Leaks(); len(l) > 0 {
		fmt.Fprintf(os.Stderr, "%d capability leaks: %v\n", len(l), l)
		return 3
	}
	return 0
}

func run(ctx context.Context, c command, set schema.DoorSet, doors map[string]schema.Door, leakConn *interface{ Close() error }) reply {
	errReply := func(err error) reply { return reply{Err: err.Error()} }
	switch c.Op {
	case "list":
		var l schema.DoorEntry_List
		var err error
		var release capnp.ReleaseFunc
		if c.Door == "" {
			f, rel := set.List(ctx, nil)
			release = rel
			res, e := f.Struct()
			if err = e; err == nil {
				l, err = res.Entries()
			}
		} else {
			f, rel := doors[c.Door].Entries(ctx, nil)
			release = rel
			res, e := f.Struct()
			if err = e; err == nil {
				l, err = res.Entries()
			}
		}
		defer release()
		if err != nil {
			return errReply(err)
		}
		var r reply
		for i := 0; i < l.Len(); i++ {
			n, _ := l.At(i).Name()
			r.Entries = append(r.Entries, n)
		}
		return r
	case "all", "get":
		var d schema.Door
		if c.Op == "all" {
			f, release := set.All(ctx, nil)
			defer release()
			res, err := f.Struct()
			if err != nil {
				return errReply(err)
			}
			d = res.Door().AddRef()
		} else {
			f, release := set.Get(ctx, func(p schema.DoorSet_get_Params) error { return p.SetName(c.Name) })
			defer release()
			res, err := f.Struct()
			if err != nil {
				return errReply(err)
			}
			d = res.Door().AddRef()
		}
		if old, ok := doors[c.As]; ok {
			old.Release()
		}
		doors[c.As] = d
		return reply{}
	case "call":
		d, ok := doors[c.Door]
		if !ok {
			return reply{Err: "helper: no door " + c.Door}
		}
		f, release := d.Call(ctx, func(p schema.Door_call_Params) error {
			if err := p.SetMethod(c.Method); err != nil {
				return err
			}
			if err := p.SetPath(c.Path); err != nil {
				return err
			}
			hl, err := p.NewHeaders(int32(len(c.Headers)))
			if err != nil {
				return err
			}
			for i, h := range c.Headers {
				if err := hl.At(i).SetName(h[0]); err != nil {
					return err
				}
				if err := hl.At(i).SetValue(h[1]); err != nil {
					return err
				}
			}
			return p.SetBody([]byte(c.Body))
		})
		defer release()
		res, err := f.Struct()
		if err != nil {
			return errReply(err)
		}
		r := reply{Status: int(res.Status())}
		body, _ := res.Body()
		r.Body = string(body)
		hl, _ := res.Headers()
		for i := 0; i < hl.Len(); i++ {
			n, _ := hl.At(i).Name()
			v, _ := hl.At(i).Value()
			r.Headers = append(r.Headers, [2]string{n, v})
		}
		return r
	case "leak":
		d, ok := doors[c.Door]
		if !ok {
			return reply{Err: "helper: no door " + c.Door}
		}
		wc, err := wire.FromFile(os.NewFile(4, "fd4"), false)
		if err != nil {
			return errReply(err)
		}
		*leakConn = wc.RPC(capnp.Client(d.AddRef()), nil)
		return reply{}
	case "release":
		if d, ok := doors[c.Door]; ok {
			d.Release()
			delete(doors, c.Door)
		}
		return reply{}
	}
	return reply{Err: "helper: unknown op " + c.Op}
}

// proc is a running helper process the test talks to.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	done chan error
}

// startHelper starts the test binary as a helper with extra files as fds
// 3, 4, ...; the files are closed in the parent once the child has them.
func startHelper(t *testing.T, role string, extra ...*os.File) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+role)
	cmd.ExtraFiles = extra
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range extra {
		_ = f.Close()
	}
	p := &proc{t: t, cmd: cmd, in: in, out: bufio.NewScanner(outR), done: make(chan error, 1)}
	p.out.Buffer(make([]byte, 1<<20), 1<<22)
	t.Cleanup(func() { p.stop() })
	return p
}

// do sends one command and waits for the reply.
func (p *proc) do(c command) reply {
	p.t.Helper()
	b, _ := json.Marshal(c)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("writing to helper: %v", err)
	}
	if !p.out.Scan() {
		p.t.Fatalf("helper gave no reply to %s: %v", b, p.out.Err())
	}
	var r reply
	if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
		p.t.Fatalf("helper reply %q: %v", p.out.Bytes(), err)
	}
	return r
}

// stop asks the helper to release everything and exit, and fails the test
// if it leaked a capability or did not exit cleanly.
func (p *proc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_, _ = p.in.Write([]byte(`{"op":"exit"}` + "\n"))
	_ = p.in.Close()
	go func() { p.done <- p.cmd.Wait() }()
	select {
	case err := <-p.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			p.t.Errorf("helper %v leaked capabilities", p.cmd.Env[len(p.cmd.Env)-1])
		} else if err != nil {
			p.t.Errorf("helper exited: %v", err)
		}
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("helper did not exit")
	}
}

var (
	buildOnce   sync.Once
	backendPath string
	buildErr    error
)

// backendBinary builds examples/door-backend once per test run.
func backendBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("building door-backend needs the go command on PATH: %w", err)
			return
		}
		dir, err := os.MkdirTemp("", "doors-backend-")
		if err != nil {
			buildErr = err
			return
		}
		backendPath = filepath.Join(dir, "door-backend")
		out, err := exec.Command(goBin, "build", "-o", backendPath, "toybox/examples/door-backend").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building door-backend: %w: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return backendPath
}

// startBackend runs the example backend listening at spec, waits until it
// is ready, and returns the address it listens on and a func that stops it.
func startBackend(t *testing.T, spec string) (string, func()) {
	t.Helper()
	cmd := exec.Command(backendBinary(t), "-listen", spec)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("door-backend did not get ready: %v", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	if !ok {
		t.Fatalf("door-backend said %q; want ready", line)
	}
	return addr, stop
}
