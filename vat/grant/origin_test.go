package grant

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toybox/labels"
	"toybox/tests/testenv"
)

// TestOriginCrossesTheRelay: the origin label the supervisor puts on a
// manifest's grant reaches the switchboard through the relay, where the
// listener-owner check reads it. A service of toybox's user outside
// toybox's tree is reachable through a grant the owner typed, and refused
// through the same address written by a manifest.
func TestOriginCrossesTheRelay(t *testing.T) {
	testenv.RequireRoot(t)
	const toyboxUID = 65534
	port := testenv.ListenAs(t, toyboxUID) // a service of toybox's user, outside its tree

	dir := t.TempDir()
	cfg := filepath.Join(dir, "switchboard.json")
	conf := fmt.Sprintf(`{"owner":{"toyboxUID":%d,"ownRoots":[%q],"dockerHost":"unix:///nonexistent/docker.sock"}}`, toyboxUID, dir)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sb.sock")
	startSwitchboard(t, sock, "--config", cfg)

	tests := []struct {
		name    string
		grant   labels.Set
		refused string // "" = admitted
	}{
		{"typed by the owner", labels.Set{Host: "127.0.0.1", Port: port}, ""},
		{"written by the manifest", labels.Set{Host: "127.0.0.1", Port: port, Origin: labels.OriginManifest}, "never a manifest default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, _ := newVat(t, sock, "alice", tt.grant)
			vc, cli := vatClient(t, v)
			h := egress(t, vc)
			c, err := connectFD(context.Background(), h, cli, "127.0.0.1", port)
			if tt.refused == "" {
				if err != nil {
					t.Fatalf("connect through a typed grant: %v", err)
				}
				shutdownAndClose(c)
				return
			}
			if err == nil {
				shutdownAndClose(c)
				t.Fatal("connect through a manifest grant reached a process of toybox's user")
			}
			// go-capnp names the method before the remote's words.
			if !strings.Contains(err.Error(), "egress refused: ") || !strings.Contains(err.Error(), tt.refused) {
				t.Fatalf("connect = %v; want an egress refusal saying %q", err, tt.refused)
			}
		})
	}
}

func shutdownAndClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		_ = tc.CloseRead()
	}
	_ = c.Close()
}
