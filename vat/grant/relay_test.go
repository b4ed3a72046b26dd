package grant

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire"
)

// keptRemote is a remote that accepts every connection and hands it to the
// test, never reading or writing on its own.
func keptRemote(t *testing.T) (uint16, <-chan net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan net.Conn, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			got <- c
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		close(got)
		for c := range got {
			_ = c.Close()
		}
	})
	return uint16(l.Addr().(*net.TCPAddr).Port), got
}

// switchboardFull is the switchboard's words for a peer connection at its
// limits.conns (switchboard.ErrLimit; vat must not import switchboard).
const switchboardFull = "per-connection limit reached"

// connectWhenFreed is connectFD, retried for up to 5s while the switchboard
// refuses on its own connection limit. The switchboard gives a slot back
// when its epoll tracker sees the hang-up. That happens on its own
// goroutine, after the remote may already have read its end. A slot that
// is never given back still fails: the last refusal is returned.
func connectWhenFreed(ctx context.Context, h schema.Handle, c *wire.Conn, host string, port uint16) (net.Conn, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		nc, err := connectFD(ctx, h, c, host, port)
		if err == nil || !strings.Contains(err.Error(), switchboardFull) || time.Now().After(deadline) {
			return nc, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRefusedAtTheRelayLimitIsShut: a connect refused at the app's limit of
// relayed sockets (VatConfig.MaxSockets) came after the switchboard had connected
// it, and the supervisor only closed its copy. The switchboard keeps a
// duplicate of every socket it hands over, so the connection stayed open,
// at the remote and in the switchboard's count of the vat's connections,
// until the vat restarted (a fault run piled up 3072 from one vat). The
// refused socket is shut down at once: the remote reads its end, and the
// switchboard gives its slot back (a leak reaches its limit of 5).
func TestRefusedAtTheRelayLimitIsShut(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "sb.sock")
	cfg := filepath.Join(dir, "sb.json")
	// Room for the two the app holds and three more: past that the
	// switchboard itself refuses, with words of its own.
	if err := os.WriteFile(cfg, []byte(`{"limits":{"conns":5}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	startSwitchboard(t, sock, "--loopback", "unchecked", "--config", cfg)
	port, remote := keptRemote(t)
	v, _ := newVatWith(t, sock, VatConfig{ID: "refused", Grants: []labels.Set{{Host: "127.0.0.1", Port: port}}, MaxSockets: 2})
	vc, cli := vatClient(t, v)
	h := egress(t, vc)
	ctx := context.Background()
	for range 2 {
		c, err := connectFD(ctx, h, cli, "127.0.0.1", port)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		<-remote
	}
	for i := range 6 {
		// The switchboard frees the previous refused connect's slot on its
		// own time, after the remote read its end: wait for it.
		_, err := connectWhenFreed(ctx, h, cli, "127.0.0.1", port)
		if err == nil || !strings.Contains(err.Error(), ErrSockets.Error()) {
			t.Fatalf("connect %d past the limit of 2: %v; want %q (the refused ones are still open at the switchboard)", i+1, err, ErrSockets)
		}
		var rc net.Conn
		select {
		case rc = <-remote:
		case <-time.After(5 * time.Second):
			t.Fatal("the switchboard connected nothing for a refused connect")
		}
		_ = rc.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := rc.Read(make([]byte, 1))
		if !errors.Is(err, io.EOF) {
			t.Fatalf("refused connect %d: the remote read %d bytes, %v; want its end (EOF) at once", i+1, n, err)
		}
		_ = rc.Close()
	}
	if n := v.sockets.Load(); n != 2 {
		t.Errorf("relayed sockets counted: %d; want the 2 the app holds", n)
	}
}
