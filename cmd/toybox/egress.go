package main

// toybox egress: ask a switchboard socket what it would admit, and use it.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"capnproto.org/go/capnp/v3"
	"capnproto.org/go/capnp/v3/flowcontrol"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
)

func init() { commands["egress"] = egressMain }

// Exit codes of toybox egress.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitRefused = 3
)

const egressChunk = 64 << 10

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func egressUsage(fs *flag.FlagSet) {
	fmt.Fprintln(os.Stderr, `usage: toybox egress --socket PATH [--constrain JSON]... check|fetch|connect TARGET

TARGET is a URL (http, https, ws, wss) or host:port (a tcp stream).
  check    print the decision and its reason
  fetch    GET an http(s) URL and print the body
  connect  relay stdin/stdout to host:port (like nc), or to a ws(s) URL
Exit: 0 admitted, 3 refused (reason on stderr), 1 other errors, 2 bad usage.`)
	fs.PrintDefaults()
}

func egressMain(args []string) int {
	fs := flag.NewFlagSet("egress", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	socket := fs.String("socket", "", "switchboard socket path")
	var cons multiFlag
	fs.Var(&cons, "constrain", "labels as JSON to narrow the handle with (repeatable, applied in order)")
	timeout := fs.Duration("timeout", 30*time.Second, "time limit for check and fetch")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			egressUsage(fs)
			return exitOK
		}
		fmt.Fprintf(os.Stderr, "toybox egress: %v\n", err)
		egressUsage(fs)
		return exitUsage
	}
	if *socket == "" || fs.NArg() != 2 {
		egressUsage(fs)
		return exitUsage
	}
	op, tgt := fs.Arg(0), fs.Arg(1)
	var narrow []labels.Set
	for _, c := range cons {
		// Any label may narrow the operator's handle, vat and origin
		// included: that is how to ask "would this vat reach that?".
		set, err := labels.ParseSet([]byte(c))
		if err != nil {
			sets, gerr := labels.ParseGrant(c) // a legacy host[:port]
			if gerr != nil || len(sets) != 1 || strings.HasPrefix(strings.TrimSpace(c), "{") {
				why := err // a JSON label set
				if !strings.HasPrefix(strings.TrimSpace(c), "{") && gerr != nil {
					why = gerr // a host[:port]: its own words, not JSON's
				}
				fmt.Fprintf(os.Stderr, "toybox egress: --constrain %s: %v (give one label set per --constrain)\n", c, why)
				return exitUsage
			}
			set = sets[0]
		}
		narrow = append(narrow, set)
	}
	isURL := strings.Contains(tgt, "://")
	var req labels.Request
	if isURL {
		r, err := labels.ParseURL(tgt)
		if err != nil {
			return refusedOrError(labels.Refuse(strings.TrimPrefix(err.Error(), labels.ErrBadLabel.Error()+": ")))
		}
		req = r
	} else {
		host, port, err := labels.ParseHostPort(tgt)
		if err != nil {
			return refusedOrError(labels.Refuse(strings.TrimPrefix(err.Error(), labels.ErrBadLabel.Error()+": ")))
		}
		req = labels.Request{Scheme: "tcp", Host: host, Port: port}
	}
	switch op {
	case "check", "connect":
	case "fetch":
		if !isURL || strings.HasPrefix(tgt, "ws") {
			fmt.Fprintln(os.Stderr, "toybox egress: fetch takes an http or https URL")
			return exitUsage
		}
	default:
		fmt.Fprintf(os.Stderr, "toybox egress: unknown operation %q\n", op)
		egressUsage(fs)
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	wc, err := wire.Dial(ctx, *socket, true)
	if err != nil {
		fmt.Fprintf(os.Stderr, "toybox egress: connecting to %s: %v\n", *socket, err)
		return exitError
	}
	conn := wc.RPC(capnp.Client{}, nil)
	defer conn.Close()
	h := schema.Handle(conn.Bootstrap(ctx))
	// Every handle of the chain stays held: releasing one revokes the
	// handles made from it.
	held := []schema.Handle{h}
	defer func() {
		for _, x := range held {
			x.Release()
		}
	}()
	for _, s := range narrow {
		next, err := constrainHandle(ctx, h, s)
		if err != nil {
			return refusedOrError(fmt.Errorf("constrain %s: %w", s, err))
		}
		held = append(held, next)
		h = next
	}

	switch {
	case op == "check":
		cctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		return egressCheck(cctx, h, req)
	case op == "fetch":
		cctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		return egressFetch(cctx, h, tgt)
	case isURL && strings.HasPrefix(tgt, "ws"):
		return egressWebSocket(ctx, h, tgt)
	case isURL:
		fmt.Fprintln(os.Stderr, "toybox egress: connect takes host:port or a ws(s) URL")
		return exitUsage
	default:
		return egressConnect(ctx, wc, h, req)
	}
}

// refusedOrError prints err and returns 3 for a refusal, 1 otherwise.
func refusedOrError(err error) int {
	if reason, ok := labels.RefusalReason(err); ok {
		fmt.Fprintln(os.Stderr, term(labels.Refuse(reason).Error()))
		return exitRefused
	}
	fmt.Fprintf(os.Stderr, "toybox egress: %s\n", term(err.Error()))
	return exitError
}

func constrainHandle(ctx context.Context, h schema.Handle, s labels.Set) (schema.Handle, error) {
	f, release := h.Constrain(ctx, func(p schema.Handle_constrain_Params) error {
		l, err := p.NewLabels()
		if err != nil {
			return err
		}
		return l.SetFields(schema.LabelFields(s))
	})
	defer release()
	r, err := f.Struct()
	if err != nil {
		return schema.Handle{}, err
	}
	return r.Handle().AddRef(), nil
}

func setTarget(t schema.Target, req labels.Request) error {
	if err := t.SetScheme(req.Scheme); err != nil {
		return err
	}
	if err := t.SetHost(req.Host); err != nil {
		return err
	}
	t.SetPort(req.Port)
	return nil
}

func egressCheck(ctx context.Context, h schema.Handle, req labels.Request) int {
	f, release := h.Check(ctx, func(p schema.Handle_check_Params) error {
		t, err := p.NewTarget()
		if err != nil {
			return err
		}
		return setTarget(t, req)
	})
	defer release()
	r, err := f.Struct()
	if err != nil {
		return refusedOrError(err)
	}
	d, err := r.Decision()
	if err != nil {
		return refusedOrError(err)
	}
	reason, _ := d.Reason()
	vetted, _ := d.Vetted()
	list, _ := d.Addresses()
	var addrs []string
	for i := 0; i < list.Len(); i++ {
		a, _ := list.At(i)
		addrs = append(addrs, a)
	}
	if !d.Allow() {
		fmt.Fprintln(os.Stderr, term(labels.Refuse(reason).Error()))
		if len(addrs) > 0 {
			fmt.Fprintf(os.Stderr, "addresses: %s\n", term(strings.Join(addrs, " ")))
		}
		return exitRefused
	}
	fmt.Printf("allowed: %s\naddresses: %s\nvetted: %s\n", term(reason), term(strings.Join(addrs, " ")), term(vetted))
	return exitOK
}

// egressStream is a ByteStream that writes to w.
type egressStream struct {
	w    io.Writer
	done chan struct{}
	once sync.Once
}

func (s *egressStream) Write(ctx context.Context, call schema.ByteStream_write) error {
	d, err := call.Args().Data()
	if err != nil {
		return err
	}
	_, err = s.w.Write(d)
	return err
}

func (s *egressStream) End(ctx context.Context, call schema.ByteStream_end) error {
	s.once.Do(func() { close(s.done) })
	return nil
}

func (s *egressStream) Shutdown() { s.once.Do(func() { close(s.done) }) }

// egressResponder receives the answer to a fetch.
type egressResponder struct {
	body   *egressStream
	status chan uint16
	failed chan string
}

func (r *egressResponder) Start(ctx context.Context, call schema.Responder_start) error {
	r.status <- call.Args().Status()
	res, err := call.AllocResults()
	if err != nil {
		return err
	}
	return res.SetBody(schema.ByteStream_ServerToClient(r.body))
}

func (r *egressResponder) Fail(ctx context.Context, call schema.Responder_fail) error {
	msg, _ := call.Args().Message_()
	r.failed <- msg
	return nil
}

func egressFetch(ctx context.Context, h schema.Handle, url string) int {
	resp := &egressResponder{
		body:   &egressStream{w: os.Stdout, done: make(chan struct{})},
		status: make(chan uint16, 1),
		failed: make(chan string, 1),
	}
	f, release := h.Request(ctx, func(p schema.Handle_request_Params) error {
		if err := p.SetMethod("GET"); err != nil {
			return err
		}
		if err := p.SetUrl(url); err != nil {
			return err
		}
		return p.SetResponder(schema.Responder_ServerToClient(resp))
	})
	defer release()
	r, err := f.Struct()
	if err != nil {
		return refusedOrError(err)
	}
	body := r.Body()
	ef, erel := body.End(ctx, nil)
	_, _ = ef.Struct()
	erel()
	select {
	case msg := <-resp.failed:
		fmt.Fprintf(os.Stderr, "toybox egress: %s\n", term(msg))
		return exitError
	case st := <-resp.status:
		select {
		case <-resp.body.done:
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "toybox egress: %v\n", ctx.Err())
			return exitError
		}
		if st >= 400 {
			fmt.Fprintf(os.Stderr, "toybox egress: HTTP status %d\n", st)
		}
		return exitOK
	case <-ctx.Done():
		fmt.Fprintf(os.Stderr, "toybox egress: %v\n", ctx.Err())
		return exitError
	}
}

// egressConnect relays stdin/stdout over a handed-over socket.
func egressConnect(ctx context.Context, wc *wire.Conn, h schema.Handle, req labels.Request) int {
	f, release := h.Connect(ctx, func(p schema.Handle_connect_Params) error {
		t, err := p.NewTarget()
		if err != nil {
			return err
		}
		p.SetWantFd(true)
		return setTarget(t, req)
	})
	defer release()
	r, err := f.Struct()
	if err != nil {
		return refusedOrError(err)
	}
	file, err := wc.TakeFD(r.Fd())
	if err != nil {
		fmt.Fprintf(os.Stderr, "toybox egress: taking the socket: %v\n", err)
		return exitError
	}
	nc, err := net.FileConn(file)
	_ = file.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "toybox egress: %v\n", err)
		return exitError
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		_ = nc.Close()
		fmt.Fprintln(os.Stderr, "toybox egress: the handed-over socket is not TCP")
		return exitError
	}
	// The switchboard holds a duplicate: end with shutdown, not close alone.
	defer func() {
		if raw, err := tc.SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
		}
		_ = tc.Close()
	}()
	go func() {
		_, _ = io.Copy(tc, os.Stdin)
		_ = tc.CloseWrite()
	}()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(os.Stdout, tc)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintf(os.Stderr, "toybox egress: %v\n", err)
			return exitError
		}
	case <-ctx.Done():
	}
	return exitOK
}

// egressMessages prints each message it receives on its own line.
type egressMessages struct {
	mu     sync.Mutex
	closed chan struct{}
	once   sync.Once
}

func (m *egressMessages) Send(ctx context.Context, call schema.MessageStream_send) error {
	d, err := call.Args().Data()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err = os.Stdout.Write(append(d, '\n'))
	return err
}

func (m *egressMessages) Close(ctx context.Context, call schema.MessageStream_close) error {
	m.once.Do(func() { close(m.closed) })
	return nil
}

func (m *egressMessages) Shutdown() { m.once.Do(func() { close(m.closed) }) }

// egressWebSocket sends each stdin line as a text message and prints the
// messages that come back.
func egressWebSocket(ctx context.Context, h schema.Handle, url string) int {
	down := &egressMessages{closed: make(chan struct{})}
	f, release := h.WebSocket(ctx, func(p schema.Handle_webSocket_Params) error {
		if err := p.SetUrl(url); err != nil {
			return err
		}
		return p.SetDownstream(schema.MessageStream_ServerToClient(down))
	})
	defer release()
	r, err := f.Struct()
	if err != nil {
		return refusedOrError(err)
	}
	up := r.Upstream().AddRef()
	defer up.Release()
	// A stdin line longer than the window goes alone, as one window.
	up.SetFlowLimiter(wire.StreamLimiter(flowcontrol.NewFixedLimiter(4*egressChunk), 4*egressChunk))
	lines := make(chan string)
	go func() {
		defer close(lines)
		buf := make([]byte, egressChunk)
		var pending string
		for {
			n, err := os.Stdin.Read(buf)
			pending += string(buf[:n])
			for {
				i := strings.IndexByte(pending, '\n')
				if i < 0 {
					break
				}
				lines <- pending[:i]
				pending = pending[i+1:]
			}
			if err != nil {
				if pending != "" {
					lines <- pending
				}
				return
			}
		}
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				if err := up.WaitStreaming(); err != nil {
					return refusedOrError(err)
				}
				cf, crel := up.Close(ctx, func(p schema.MessageStream_close_Params) error { p.SetCode(1000); return nil })
				_, _ = cf.Struct()
				crel()
				select {
				case <-down.closed:
				case <-time.After(5 * time.Second):
				}
				return exitOK
			}
			data := []byte(line)
			if err := up.Send(ctx, func(p schema.MessageStream_send_Params) error { return p.SetData(data) }); err != nil {
				return refusedOrError(err)
			}
		case <-down.closed:
			return exitOK
		case <-ctx.Done():
			return exitOK
		}
	}
}
