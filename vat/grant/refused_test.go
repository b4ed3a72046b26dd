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

// TestRefusedAtTheRelayLimitIsShut: a connect refused at the app's limit of
// relayed sockets (MaxAppSockets) came after the switchboard had connected
// it, and the supervisor only closed its copy. The switchboard keeps a
// duplicate of every socket it hands over, so the connection stayed open,
// at the remote and in the switchboard's count of the vat's connections,
// until the vat restarted (a fault run piled up 3072 from one vat). The
// refused socket is shut down at once: the remote reads its end.
func TestRefusedAtTheRelayLimitIsShut(t *testing.T) {
	old := appSocketLimit.Swap(2)
	defer appSocketLimit.Store(old)
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
	v, _ := newVat(t, sock, "refused", labels.Set{Host: "127.0.0.1", Port: port})
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
		_, err := connectFD(ctx, h, cli, "127.0.0.1", port)
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
