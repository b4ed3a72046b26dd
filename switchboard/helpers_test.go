package switchboard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	"golang.org/x/sys/unix"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
	"toybox/switchboard/dnstest"
	"toybox/tests/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunCheckingLeaks(m))
}

type syncBuffer = testenv.Buffer

// fixture is a running switchboard with a test DNS server and both sockets.
type fixture struct {
	srv    *Server
	dns    *dnstest.Server
	log    *syncBuffer
	public string // socket paths
	local  string
}

func newFixture(t testing.TB, mod func(*Config)) *fixture {
	t.Helper()
	dns, err := dnstest.New("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dns.Close() })
	logs := &syncBuffer{}
	cfg := Config{
		Logger:         slog.New(slog.NewJSONHandler(logs, nil)),
		Resolver:       dns.Addr(),
		OwnAddrs:       []netip.Addr{},
		ResolveTimeout: 2 * time.Second,
		DialTimeout:    2 * time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, dns: dns, log: logs}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, name := range []string{"public", "local"} {
		path := filepath.Join(dir, name+".sock")
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ctx, name, l, labels.Set{Network: name}); err != nil {
				t.Errorf("Serve(%s): %v", name, err)
			}
		}()
		if name == "public" {
			f.public = path
		} else {
			f.local = path
		}
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = srv.Close()
	})
	return f
}

// client is one connection to a switchboard socket.
type client struct {
	wc   *wire.Conn
	root schema.Handle
}

// dial connects to path as the supervisor does: wire.Dial accepting
// descriptors, then the bootstrap Handle.
func dial(t testing.TB, path string) *client {
	t.Helper()
	wc, err := wire.Dial(context.Background(), path, true)
	if err != nil {
		t.Fatal(err)
	}
	conn := wc.RPC(capnp.Client{}, nil)
	root := schema.Handle(conn.Bootstrap(context.Background()))
	t.Cleanup(func() {
		root.Release()
		_ = conn.Close()
	})
	return &client{wc: wc, root: root}
}

func target(scheme, host string, port uint16) func(schema.Target) error {
	return func(t schema.Target) error {
		if err := t.SetScheme(scheme); err != nil {
			return err
		}
		if err := t.SetHost(host); err != nil {
			return err
		}
		t.SetPort(port)
		return nil
	}
}

type checkResult struct {
	allow  bool
	reason string
	addrs  []string
	vetted string
}

func check(ctx context.Context, h schema.Handle, scheme, host string, port uint16) (checkResult, error) {
	f, release := h.Check(ctx, func(p schema.Handle_check_Params) error {
		tg, err := p.NewTarget()
		if err != nil {
			return err
		}
		return target(scheme, host, port)(tg)
	})
	defer release()
	r, err := f.Struct()
	if err != nil {
		return checkResult{}, err
	}
	d, err := r.Decision()
	if err != nil {
		return checkResult{}, err
	}
	reason, _ := d.Reason()
	vetted, _ := d.Vetted()
	list, _ := d.Addresses()
	var addrs []string
	for i := 0; i < list.Len(); i++ {
		a, _ := list.At(i)
		addrs = append(addrs, a)
	}
	return checkResult{allow: d.Allow(), reason: reason, addrs: addrs, vetted: vetted}, nil
}

func constrain(t testing.TB, h schema.Handle, s labels.Set) (schema.Handle, error) {
	t.Helper()
	f, release := h.Constrain(context.Background(), func(p schema.Handle_constrain_Params) error {
		l, err := p.NewLabels()
		if err != nil {
			return err
		}
		return toSchema(l, s)
	})
	defer release()
	r, err := f.Struct()
	if err != nil {
		return schema.Handle{}, err
	}
	return r.Handle().AddRef(), nil
}

// connectStream connects to 127.0.0.1:port over the ByteStream pair (no
// wantFd), down receiving the remote's bytes; the results are released
// when the test ends.
func connectStream(ctx context.Context, t testing.TB, h schema.Handle, port uint16, down schema.ByteStream) schema.Handle_connect_Results {
	t.Helper()
	fut, release := h.Connect(ctx, func(p schema.Handle_connect_Params) error {
		tg, err := p.NewTarget()
		if err != nil {
			return err
		}
		if err := target("tcp", "127.0.0.1", port)(tg); err != nil {
			return err
		}
		return p.SetDownstream(down)
	})
	t.Cleanup(release)
	r, err := fut.Struct()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// connectFD connects with wantFd and takes the handed-over socket.
func (c *client) connectFD(ctx context.Context, h schema.Handle, scheme, host string, port uint16, hello []byte) (net.Conn, error) {
	f, release := h.Connect(ctx, func(p schema.Handle_connect_Params) error {
		tg, err := p.NewTarget()
		if err != nil {
			return err
		}
		if err := target(scheme, host, port)(tg); err != nil {
			return err
		}
		p.SetWantFd(true)
		return p.SetTlsHello(hello)
	})
	defer release()
	r, err := f.Struct()
	if err != nil {
		return nil, err
	}
	file, err := c.wc.TakeFD(r.Fd())
	if err != nil {
		return nil, err
	}
	defer file.Close()
	// Handed over in blocking mode, like a freshly accepted socket
	// (docs/switchboard.md).
	fl, err := unix.FcntlInt(file.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the handed-over socket's flags: %w", err)
	}
	if fl&unix.O_NONBLOCK != 0 {
		return nil, fmt.Errorf("the socket was handed over non-blocking (flags %#x)", fl)
	}
	return net.FileConn(file)
}

// echoServer accepts on loopback and echoes; banner, if set, is sent first.
// It returns the port.
func echoServer(t testing.TB, banner string) uint16 {
	t.Helper()
	return serveTCP(t, func(c net.Conn) {
		if banner != "" {
			_, _ = io.WriteString(c, banner)
		}
		_, _ = io.Copy(c, c)
	})
}

// serveTCP is testenv.ServeTCP with the port as a label's port.
func serveTCP(t testing.TB, handle func(net.Conn)) uint16 {
	t.Helper()
	return uint16(testenv.ServeTCP(t, handle))
}

func mustContain(t *testing.T, what, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("%s = %q; want it to contain %q", what, got, want)
	}
}

func itoa(p uint16) string { return fmt.Sprint(p) }

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
