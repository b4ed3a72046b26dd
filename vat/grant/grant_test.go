package grant

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"golang.org/x/sys/unix"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/tests/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunCheckingLeaks(m))
}

// startSwitchboard runs a real switchboard serving a local root handle on
// sock and returns a func that stops it. Without args it runs with
// --loopback unchecked, so tests reach their own loopback servers.
func startSwitchboard(t *testing.T, sock string, args ...string) func() {
	t.Helper()
	if len(args) == 0 {
		args = []string{"--loopback", "unchecked"}
	}
	cmd := exec.Command(testenv.Binary(t, "toybox/cmd/switchboard"), append([]string{"--listen", "local=" + sock}, args...)...)
	cmd.Stderr = &testLog{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(unix.SIGTERM)
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	listening := false
	t.Cleanup(func() { // first: a switchboard that never listened is killed
		if !listening {
			_ = cmd.Process.Kill()
		}
	})
	testenv.WaitFor(t, 10*time.Second, func() error {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return fmt.Errorf("switchboard did not listen on %s", sock)
		}
		_ = c.Close()
		return nil
	})
	listening = true
	return stop
}

type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Logf("switchboard: %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

// startSwitchboardHolding starts a switchboard whose connections may
// each hold at most handles handles (limits.handles), and returns its
// socket.
func startSwitchboardHolding(t *testing.T, handles int) string {
	t.Helper()
	return startSwitchboardLimited(t, fmt.Sprintf(`{"handles":%d}`, handles))
}

// startSwitchboardLimited starts a switchboard with the config's limits
// (a JSON object), and returns its socket.
func startSwitchboardLimited(t *testing.T, limits string) string {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "sb.sock")
	cfg := filepath.Join(dir, "sb.json")
	if err := os.WriteFile(cfg, []byte(`{"limits":`+limits+`}`), 0o600); err != nil {
		t.Fatal(err)
	}
	startSwitchboard(t, sock, "--loopback", "unchecked", "--config", cfg)
	return sock
}

// echoServer echoes every connection until the test ends.
func echoServer(t *testing.T) uint16 {
	t.Helper()
	return uint16(testenv.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(c, c) }))
}

// vatClient serves v on one end of a socketpair and returns the Vat
// capability a vat would find on fd 3, with the connection it came on.
func vatClient(t *testing.T, v *Vat) (schema.Vat, *wire.Conn) {
	t.Helper()
	return serveClient(t, v.Serve)
}

// entryClient is vatClient for toybox-entry's connection (ServeEntry).
func entryClient(t *testing.T, v *Vat) (schema.Vat, *wire.Conn) {
	t.Helper()
	return serveClient(t, v.ServeEntry)
}

func serveClient(t *testing.T, serve func(context.Context, *wire.Conn) error) (schema.Vat, *wire.Conn) {
	t.Helper()
	fds, err := testenv.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := wire.FromFile(os.NewFile(uintptr(fds[0]), "supervisor-end"), false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = serve(ctx, srv); close(done) }()
	cli, err := wire.FromFile(os.NewFile(uintptr(fds[1]), "vat-end"), true)
	if err != nil {
		t.Fatal(err)
	}
	rc := cli.RPC(capnp.Client{}, nil)
	vc := schema.Vat(rc.Bootstrap(context.Background()))
	t.Cleanup(func() {
		vc.Release()
		_ = rc.Close()
		cancel()
		<-done
	})
	return vc, cli
}

func egress(t *testing.T, vc schema.Vat) schema.Handle {
	t.Helper()
	fut, release := vc.Egress(context.Background(), nil)
	defer release()
	res, err := fut.Struct()
	if err != nil {
		t.Fatalf("egress(): %v", err)
	}
	h := res.Handle().AddRef()
	t.Cleanup(h.Release)
	return h
}

// connectFD asks h for a TCP stream to 127.0.0.1:port with the socket
// handed over, and returns it.
func connectFD(ctx context.Context, h schema.Handle, c *wire.Conn, host string, port uint16) (net.Conn, error) {
	fut, release := h.Connect(ctx, func(p schema.Handle_connect_Params) error {
		t, err := p.NewTarget()
		if err != nil {
			return err
		}
		_ = t.SetScheme("tcp")
		_ = t.SetHost(host)
		t.SetPort(port)
		p.SetWantFd(true)
		return nil
	})
	defer release()
	res, err := fut.Struct()
	if err != nil {
		return nil, err
	}
	if res.Fd() == 0 {
		return nil, errors.New("no socket handed over")
	}
	f, err := c.TakeFD(res.Fd())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return net.FileConn(f)
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if string(buf) != msg {
		t.Fatalf("echo = %q; want %q", buf, msg)
	}
}

func newVat(t *testing.T, sock, id string, grants ...labels.Set) (*Vat, *Upstream) {
	t.Helper()
	return newVatWith(t, sock, VatConfig{ID: labels.VatID(id), Grants: grants})
}

// newVatWith is newVat for a vat of cfg (its Upstream set to sock's).
func newVatWith(t *testing.T, sock string, cfg VatConfig) (*Vat, *Upstream) {
	t.Helper()
	u := NewUpstream(UpstreamConfig{Path: sock})
	t.Cleanup(func() { _ = u.Close() })
	cfg.Upstream = u
	v, err := NewVat(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Revoke)
	return v, u
}

// TestRelayHandsOverSocket: a vat's connect through the supervisor's relay
// gets the connected socket itself, passed from the switchboard through the
// supervisor to the vat.
func TestRelayHandsOverSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	port := echoServer(t)
	v, _ := newVat(t, sock, "alice", labels.Set{Host: "127.0.0.1", Port: port})
	vc, cli := vatClient(t, v)
	h := egress(t, vc)
	c, err := connectFD(context.Background(), h, cli, "127.0.0.1", port)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close()
	roundTrip(t, c, "hello through the wall")
}

// TestRefusalsKeepTheirReason: an ungranted port is refused with the
// switchboard's words, prefix and all, exactly once.
func TestRefusalsKeepTheirReason(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	port := echoServer(t)
	v, _ := newVat(t, sock, "bob", labels.Set{Host: "127.0.0.1", Port: port})
	vc, cli := vatClient(t, v)
	h := egress(t, vc)
	tests := []struct {
		name, host string
		port       uint16
		want       string
	}{
		{"other port", "127.0.0.1", port + 1, "not granted"},
		{"other host", "127.0.0.2", port, "not granted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := connectFD(context.Background(), h, cli, tt.host, tt.port)
			if err == nil {
				t.Fatalf("connect %s:%d admitted; want refused", tt.host, tt.port)
			}
			msg := err.Error()
			if !strings.Contains(msg, "egress refused: ") || !strings.Contains(msg, tt.want) {
				t.Fatalf("connect %s:%d error = %q; want an \"egress refused: ... %s\"", tt.host, tt.port, msg, tt.want)
			}
			if strings.Count(msg, "egress refused:") != 1 {
				t.Errorf("error %q repeats its prefix", msg)
			}
		})
	}
}

// TestUnionAndConstrain: a two-grant vat reaches both; a self-narrowed
// handle reaches only what it kept; narrowing to nothing is an error;
// the vat label can never change.
func TestUnionAndConstrain(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	p1, p2 := echoServer(t), echoServer(t)
	v, _ := newVat(t, sock, "carol", labels.Set{Host: "127.0.0.1", Port: p1}, labels.Set{Host: "127.0.0.1", Port: p2})
	vc, cli := vatClient(t, v)
	h := egress(t, vc)
	ctx := context.Background()
	for _, p := range []uint16{p1, p2} {
		c, err := connectFD(ctx, h, cli, "127.0.0.1", p)
		if err != nil {
			t.Fatalf("union member port %d: %v", p, err)
		}
		roundTrip(t, c, "x")
		_ = c.Close()
	}

	constrain := func(l labels.Set) (schema.Handle, error) { return constrainTo(ctx, h, l) }
	narrow, err := constrain(labels.Set{Port: p2})
	if err != nil {
		t.Fatalf("constrain to port %d: %v", p2, err)
	}
	defer narrow.Release()
	if _, err := connectFD(ctx, narrow, cli, "127.0.0.1", p1); err == nil || !strings.Contains(err.Error(), "egress refused: ") {
		t.Fatalf("narrowed handle reached port %d: err = %v; want refused", p1, err)
	}
	c, err := connectFD(ctx, narrow, cli, "127.0.0.1", p2)
	if err != nil {
		t.Fatalf("narrowed handle port %d: %v", p2, err)
	}
	roundTrip(t, c, "kept")
	_ = c.Close()

	if _, err := constrain(labels.Set{Port: 1}); err == nil {
		t.Error("constrain to a port no member has succeeded; want a conflict")
	}
	if _, err := constrain(labels.Set{Vat: "mallory"}); err == nil {
		t.Error("constrain to another vat id succeeded; want a conflict")
	}
}

// TestRevokeShutsConnections: revoking a vat shuts the connections it was
// handed and every later call fails.
func TestRevokeShutsConnections(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	port := echoServer(t)
	v, _ := newVat(t, sock, "dave", labels.Set{Host: "127.0.0.1", Port: port})
	vc, cli := vatClient(t, v)
	h := egress(t, vc)
	c, err := connectFD(context.Background(), h, cli, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, "before")
	v.Revoke()
	// The switchboard shuts its duplicate once the upstream handle is
	// released (go-capnp finishes calls up to 250 ms late).
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if err == nil || n != 0 {
		t.Fatalf("read after revoke = %d, %v; want EOF", n, err)
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("read after revoke: %v; want EOF (shut down by the switchboard)", err)
	}
	if _, err := connectFD(context.Background(), h, cli, "127.0.0.1", port); err == nil {
		t.Fatal("connect after revoke succeeded")
	}
}

// TestReconnectAfterSwitchboardRestart: the vat keeps its Handle; after the
// switchboard restarts, new connections work without restarting the vat.
func TestReconnectAfterSwitchboardRestart(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	stop := startSwitchboard(t, sock)
	port := echoServer(t)
	v, _ := newVat(t, sock, "erin", labels.Set{Host: "127.0.0.1", Port: port})
	vc, cli := vatClient(t, v)
	h := egress(t, vc)
	c, err := connectFD(context.Background(), h, cli, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	stop()
	startSwitchboard(t, sock)
	c, err = connectFD(context.Background(), h, cli, "127.0.0.1", port)
	if err != nil {
		t.Fatalf("connect after switchboard restart: %v", err)
	}
	roundTrip(t, c, "again")
	_ = c.Close()
}

// TestNoGrantNoHandle: a vat without a grant gets a null Handle and an
// empty door set.
func TestNoGrantNoHandle(t *testing.T) {
	v, err := NewVat(VatConfig{ID: "frank"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Revoke()
	vc, _ := vatClient(t, v)
	fut, release := vc.Egress(context.Background(), nil)
	defer release()
	res, err := fut.Struct()
	if err != nil {
		t.Fatal(err)
	}
	if res.HasHandle() {
		t.Fatal("a vat with no grant got a Handle")
	}
	dfut, drelease := vc.Doors(context.Background(), nil)
	defer drelease()
	lfut, lrelease := dfut.Doors().List(context.Background(), nil)
	defer lrelease()
	lres, err := lfut.Struct()
	if err != nil {
		t.Fatal(err)
	}
	if es, _ := lres.Entries(); es.Len() != 0 {
		t.Fatalf("doors = %d entries; want none", es.Len())
	}
}

// TestPipelinedOnTheNullHandle: an app with no grant that asks for
// egress().handle().describe() in one go (as generated clients pipeline
// it) gets an error; the call on the null Handle, queued while egress()
// ran, made go-capnp panic in the supervisor (every vat's) once egress()
// answered. Asked many times over, as the race is the app's to win.
func TestPipelinedOnTheNullHandle(t *testing.T) {
	v, err := NewVat(VatConfig{ID: "frank"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Revoke()
	vc, _ := vatClient(t, v)
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		eg, release := vc.Egress(ctx, nil)
		d, drelease := eg.Handle().Describe(ctx, nil)
		_, err := d.Struct()
		drelease()
		release()
		if err == nil {
			t.Fatal("describe() on the null Handle of a vat with no grant answered")
		}
	}
	id, release := vc.Id(ctx, nil)
	defer release()
	if _, err := id.Struct(); err != nil {
		t.Fatalf("id() after the pipelined calls: %v", err)
	}
}

// TestGrantNamingAnotherVat: a grant that names a vat is refused.
func TestGrantNamingAnotherVat(t *testing.T) {
	_, err := NewVat(VatConfig{ID: "gina", Grants: []labels.Set{{Vat: "mallory"}}, Upstream: NewUpstream(UpstreamConfig{Path: "/nonexistent"})})
	if err == nil {
		t.Fatal("NewVat with a grant naming vat mallory succeeded")
	}
}

// warnedVat is a vat with no grant whose relay logs warnings to logs.
func warnedVat(t *testing.T, id string) (*Vat, *syncLog) {
	t.Helper()
	return warnedVatWith(t, VatConfig{ID: labels.VatID(id)})
}

// warnedVatWith is warnedVat for a vat of cfg (its Logger set).
func warnedVatWith(t *testing.T, cfg VatConfig) (*Vat, *syncLog) {
	t.Helper()
	logs := &syncLog{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	v, err := NewVat(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Revoke)
	return v, logs
}

// TestVatCannotPushFDs: a vat sending descriptors to the supervisor breaks
// its own connection and nothing else.
func TestVatCannotPushFDs(t *testing.T) {
	v, logs := warnedVat(t, "henry")
	fds, err := testenv.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := wire.FromFile(os.NewFile(uintptr(fds[0]), "supervisor-end"), false)
	done := make(chan error, 1)
	go func() { done <- v.Serve(context.Background(), srv) }()
	r, w, _ := os.Pipe()
	defer w.Close()
	rights := unix.UnixRights(int(r.Fd()))
	if err := unix.Sendmsg(fds[1], []byte{0}, rights, nil, 0); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the supervisor kept serving a connection that pushed a descriptor")
	}
	_ = unix.Close(fds[1])
	// The operator can see why: a warning naming the broken rule.
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, wire.ErrFDsRefused.Error()) {
		t.Errorf("log %q; want a warning saying %q", got, wire.ErrFDsRefused)
	}
}

type syncLog = testenv.Buffer

// TestRefusalNamesWhatWasDropped: a connect to an address the manifest asked
// for but was not granted says so, and why, inside the refusal the app sees.
func TestRefusalNamesWhatWasDropped(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	port := echoServer(t)
	u := NewUpstream(UpstreamConfig{Path: sock})
	t.Cleanup(func() { _ = u.Close() })
	dropped := Dropped{Set: labels.Set{Host: "127.0.0.1", Port: 5432, Origin: labels.OriginManifest}, Why: "the bundle has no compose file publishing port 5432 on 127.0.0.1"}
	v, err := NewVat(VatConfig{ID: "carol", Grants: []labels.Set{{Host: "127.0.0.1", Port: port}}, Upstream: u, Dropped: []Dropped{dropped}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Revoke)
	vc, cli := vatClient(t, v)
	h := egress(t, vc)
	_, err = connectFD(context.Background(), h, cli, "127.0.0.1", 5432)
	if err == nil || !strings.Contains(err.Error(), "egress refused: ") || !strings.Contains(err.Error(), "the manifest asked for") || !strings.Contains(err.Error(), dropped.Why) {
		t.Fatalf("connect to the dropped address = %v; want a refusal naming the manifest's address and why it was dropped", err)
	}
	_, err = connectFD(context.Background(), h, cli, "127.0.0.1", 6379)
	if err == nil || strings.Contains(err.Error(), "the manifest asked for") {
		t.Fatalf("connect to another address = %v; want a plain refusal", err)
	}
}

// TestVatCannotHoardCapabilities: a vat that asks for its door set again
// and again and keeps every one makes the supervisor keep a server for
// each; past its Limits.Exports its connection ends, with a warning.
func TestVatCannotHoardCapabilities(t *testing.T) {
	const exports = 300 // the rule, at a size a test can reach quickly
	v, logs := warnedVatWith(t, VatConfig{ID: "hoarder", Limits: wire.Limits{Exports: exports}})
	vc, _ := vatClient(t, v)
	var kept []schema.DoorSet
	defer func() {
		for _, d := range kept {
			d.Release()
		}
	}()
	var failed error
	for i := 0; i < exports+100 && failed == nil; i++ {
		fut, release := vc.Doors(context.Background(), nil)
		res, err := fut.Struct()
		if err == nil {
			kept = append(kept, res.Doors().AddRef())
		}
		release()
		failed = err
	}
	if failed == nil {
		t.Fatalf("the vat holds %d door sets (limit %d); want its connection ended", len(kept), exports)
	}
	if len(kept) > exports+1 {
		t.Errorf("the vat got %d door sets; want at most about %d", len(kept), exports)
	}
	testenv.WaitFor(t, 5*time.Second, func() error {
		if !strings.Contains(logs.String(), wire.ErrExports.Error()) {
			return fmt.Errorf("log %q; want a warning saying %q", logs.String(), wire.ErrExports.Error())
		}
		return nil
	})
}

// TestManyConnectsLeaveNothingUnfinished: every connect through the relay,
// granted or refused, is finished on both connections (the vat's, whose
// limit is DefaultVatLimits' Unfinished, and the upstream one every vat shares): a
// leak would end them after that many.
func TestManyConnectsLeaveNothingUnfinished(t *testing.T) {
	n := 3 * DefaultVatLimits().Unfinished / 2
	if s := os.Getenv("TOYBOX_TEST_CONNECTS"); s != "" {
		n, _ = strconv.Atoi(s) // above wire.DefaultUnfinished: the upstream side too
	}
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	port := echoServer(t)
	v, _ := newVat(t, sock, "many", labels.Set{Host: "127.0.0.1", Port: port})
	vc, cli := vatClient(t, v)
	h := egress(t, vc)
	defer h.Release()
	for i := 0; i < n; i++ {
		if i%10 == 9 {
			if _, err := connectFD(context.Background(), h, cli, "127.0.0.1", port+1); err == nil || !strings.Contains(err.Error(), "egress refused") {
				t.Fatalf("connect %d to an ungranted port: %v; want a refusal", i, err)
			}
			continue
		}
		c, err := connectFD(context.Background(), h, cli, "127.0.0.1", port)
		if err != nil {
			t.Fatalf("connect %d of %d: %v", i, n, err)
		}
		_ = c.Close()
	}
}

// TestOneVatCannotFillTheSwitchboardForAll: a vat that keeps connections
// open up to the switchboard's per-connection limit (closing its copies
// alone: the switchboard's duplicates stay) reaches that limit on its own
// connection; another vat's egress goes on.
func TestOneVatCannotFillTheSwitchboardForAll(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "sb.sock")
	cfg := filepath.Join(dir, "sb.json")
	if err := os.WriteFile(cfg, []byte(`{"limits":{"conns":40}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	startSwitchboard(t, sock, "--loopback", "unchecked", "--config", cfg)
	port := echoServer(t)
	up := NewUpstream(UpstreamConfig{Path: sock})
	t.Cleanup(func() { _ = up.Close() })
	vat := func(id string) (schema.Handle, *wire.Conn) {
		v, err := NewVat(VatConfig{ID: labels.VatID(id), Grants: []labels.Set{{Host: "127.0.0.1", Port: port}}, Upstream: up})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(v.Revoke)
		vc, cli := vatClient(t, v)
		return egress(t, vc), cli
	}
	mh, mcli := vat("mallory")
	var limited error
	for range 60 {
		c, err := connectFD(context.Background(), mh, mcli, "127.0.0.1", port)
		if err != nil {
			limited = err
			break
		}
		defer c.Close() // kept open
	}
	if limited == nil || !strings.Contains(limited.Error(), "connections open") {
		t.Fatalf("mallory's connects: %v; want its own connection's limit", limited)
	}
	ah, acli := vat("alice")
	c, err := connectFD(context.Background(), ah, acli, "127.0.0.1", port)
	if err != nil {
		t.Fatalf("alice's connect after mallory filled its limit: %v", err)
	}
	defer c.Close()
	roundTrip(t, c, "still mine")
}

// TestStoppingAVatIsNoWarning: a vat's switchboard connection closed
// because the vat stopped is not reported as a connection that ended on
// its own (that warning is kept for a switchboard that went away).
func TestStoppingAVatIsNoWarning(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	port := echoServer(t)
	logs := &syncLog{}
	up := NewUpstream(UpstreamConfig{Path: sock, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	t.Cleanup(func() { _ = up.Close() })
	v, err := NewVat(VatConfig{ID: "quiet", Grants: []labels.Set{{Host: "127.0.0.1", Port: port}}, Upstream: up})
	if err != nil {
		t.Fatal(err)
	}
	vc, cli := vatClient(t, v)
	c, err := connectFD(context.Background(), egress(t, vc), cli, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	v.Revoke()
	if got := logs.String(); strings.Contains(got, "level=WARN") {
		t.Errorf("stopping a vat logged %q; want no warning", got)
	}
}

// TestAppSocketIsRelayed: a socket an app asks for (wantFd) is one end of a
// unix socketpair the supervisor relays, never the switchboard's TCP socket
// (which connect(AF_UNSPEC) would free to connect anywhere from the
// switchboard's network: tests/egress_test.go has the attack from a real
// wall). Its end is already bound, so no name can be squatted with it; the
// relay ends when either side does. toybox-entry's connection gets the
// socket itself.
func TestAppSocketIsRelayed(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	port := echoServer(t)
	v, _ := newVat(t, sock, "relayed", labels.Set{Host: "127.0.0.1", Port: port})

	vc, cli := vatClient(t, v)
	c, err := connectFD(context.Background(), egress(t, vc), cli, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		t.Fatalf("the app got a %T; want a *net.UnixConn", c)
	}
	roundTrip(t, c, "relayed both ways")
	raw, err := uc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var bindErr, connErr error
	_ = raw.Control(func(fd uintptr) {
		bindErr = unix.Bind(int(fd), &unix.SockaddrUnix{Name: "@toybox-test-squat"})
		connErr = unix.Connect(int(fd), &unix.SockaddrUnix{Name: "@toybox-test-squat"})
	})
	if bindErr == nil {
		t.Error("the app bound its relayed socket to a name of its choosing")
	}
	if connErr == nil {
		t.Error("the app's relayed socket connected again")
	}
	// A half-close goes through: the echo server answers, then ends.
	if _, err := c.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	_ = uc.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, err := io.ReadAll(c)
	if err != nil || string(rest) != "last" {
		t.Errorf("after the half-close read %q, %v; want %q then EOF", rest, err, "last")
	}
	_ = c.Close()

	ec, ecli := entryClient(t, v)
	e, err := connectFD(context.Background(), egress(t, ec), ecli, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, ok := e.(*net.TCPConn); !ok {
		t.Fatalf("toybox-entry got a %T; want the connected *net.TCPConn", e)
	}
	roundTrip(t, e, "the socket itself")
}

// silentVat is a vat of cfg granted a remote that accepts every
// connection and keeps it, never reading or writing, behind a switchboard
// that lets one peer connection hold conns connections.
func silentVat(t *testing.T, conns int, cfg VatConfig) (*Vat, schema.Handle, *wire.Conn, uint16) {
	t.Helper()
	sock := startSwitchboardLimited(t, fmt.Sprintf(`{"conns":%d}`, conns))
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	cfg.Grants = []labels.Set{{Host: "127.0.0.1", Port: port}}
	v, _ := newVatWith(t, sock, cfg)
	vc, cli := vatClient(t, v)
	return v, egress(t, vc), cli, port
}

// TestAppSocketEndsWithTheApp: an app that closes its relayed socket ends
// the connection both ways even when the remote stays open and silent (a
// half-close alone would leave the relay and the switchboard's count of
// the vat's connections in place); and an app holds at most its
// MaxSockets relayed sockets at once.
func TestAppSocketEndsWithTheApp(t *testing.T) {
	v, h, cli, port := silentVat(t, 3, VatConfig{ID: "silent"})
	for round := range 3 {
		var open []net.Conn
		for i := range 3 {
			// The switchboard notices each hang-up of the previous round
			// on its own time and gives its slot back.
			c, err := connectWhenFreed(context.Background(), h, cli, "127.0.0.1", port)
			if err != nil {
				t.Fatalf("round %d, connect %d: %v (the connections the app closed are still counted)", round+1, i+1, err)
			}
			open = append(open, c)
		}
		for _, c := range open {
			_ = c.Close()
		}
	}
	// The supervisor's relays end on their own goroutines too.
	testenv.WaitFor(t, 5*time.Second, func() error {
		if n := v.sockets.Load(); n != 0 {
			return fmt.Errorf("relayed sockets counted after the app closed them all: %d; want 0", n)
		}
		return nil
	})

	// A vat whose app may hold two, behind a switchboard that would let it
	// hold a third.
	_, h, cli, port = silentVat(t, 3, VatConfig{ID: "silent-two", MaxSockets: 2})
	var open []net.Conn
	for range 2 {
		c, err := connectWhenFreed(context.Background(), h, cli, "127.0.0.1", port)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	if _, err := connectWhenFreed(context.Background(), h, cli, "127.0.0.1", port); err == nil || !strings.Contains(err.Error(), ErrSockets.Error()) {
		t.Errorf("a third relayed socket with MaxSockets 2: %v; want %q", err, ErrSockets)
	}
	for _, c := range open {
		_ = c.Close()
	}
}

// TestAppSocketHangUpWhileStuck: an app that wrote more than the buffers
// hold to a remote that never reads, then closed its socket, ends the
// connection too (after HangUpGrace for the remote to take the rest): the
// relay is not left stuck writing, holding the vat's switchboard slot.
func TestAppSocketHangUpWhileStuck(t *testing.T) {
	v, h, cli, port := silentVat(t, 1, VatConfig{ID: "stuck", HangUpGrace: 200 * time.Millisecond})
	c, err := connectFD(context.Background(), h, cli, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(make([]byte, 64<<20)) // far more than the buffers hold
	_ = c.Close()
	testenv.WaitFor(t, 5*time.Second, func() error {
		if n := v.sockets.Load(); n != 0 {
			return fmt.Errorf("relayed sockets counted after the app closed its only one: %d; want 0 (the relay is stuck)", n)
		}
		return nil
	})
	// The switchboard notices the hang-up on its own time.
	c2, err := connectWhenFreed(context.Background(), h, cli, "127.0.0.1", port)
	if err != nil {
		t.Fatalf("connect after the app closed its only socket: %v (relayed sockets still counted: %d)", err, v.sockets.Load())
	}
	_ = c2.Close()
}

// constrainTo narrows h to l over the wire and returns the new Handle (the
// caller releases it).
func constrainTo(ctx context.Context, h schema.Handle, l labels.Set) (schema.Handle, error) {
	fut, release := h.Constrain(ctx, func(p schema.Handle_constrain_Params) error {
		sl, err := p.NewLabels()
		if err != nil {
			return err
		}
		return toSchema(sl, l)
	})
	defer release()
	res, err := fut.Struct()
	if err != nil {
		return schema.Handle{}, err
	}
	return res.Handle().AddRef(), nil
}

// TestNoDoorsRefusalIsBounded: a vat with no doors that asks for a door
// by a huge name is refused with a message of bounded size. The name was
// quoted whole with %q, so each control byte became four: a vat sending a
// name of 60 MiB made the supervisor build a 240 MiB refusal per call.
func TestNoDoorsRefusalIsBounded(t *testing.T) {
	v, err := NewVat(VatConfig{ID: "frank"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Revoke()
	vc, _ := vatClient(t, v)
	ctx := context.Background()
	dfut, drelease := vc.Doors(ctx, nil)
	defer drelease()
	name := strings.Repeat("\x01", 1<<20)
	gfut, grelease := dfut.Doors().Get(ctx, func(p schema.DoorSet_get_Params) error { return p.SetName(name) })
	defer grelease()
	_, err = gfut.Struct()
	if err == nil {
		t.Fatal("get of a huge name on an empty door set answered")
	}
	if !strings.Contains(err.Error(), "door refused: this vat has no door") {
		t.Errorf("get error = %.200q; want a door refusal", err.Error())
	}
	if n := len(err.Error()); n > 1024 {
		t.Errorf("get of a %d-byte name: a %d-byte refusal; want at most 1024 bytes", len(name), n)
	}
}
