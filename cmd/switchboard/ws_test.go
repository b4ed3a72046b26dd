package main

import (
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/websocket"
)

func TestEgressWebSocketAndHTTPS(t *testing.T) {
	ws := httptest.NewServer(websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil }, // no Origin check
		Handler:   func(c *websocket.Conn) { _, _ = io.Copy(c, c) },
	})
	defer ws.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "over tls")
	}))
	defer tlsSrv.Close()
	caPath := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startSwitchboard(t, map[string]any{"rootCAs": caPath})
	r.dns.Set("ws.test", netip.MustParseAddr("127.0.0.1"))
	r.dns.Set("example.com", netip.MustParseAddr("127.0.0.1"))
	wsPort := ws.Listener.Addr().(*net.TCPAddr).Port
	tlsPort := tlsSrv.Listener.Addr().(*net.TCPAddr).Port

	code, out, errs := egress(t, "one\ntwo\n", "--socket", r.local, "connect", fmt.Sprintf("ws://ws.test:%d/", wsPort))
	if code != 0 || !strings.Contains(out, "one\n") || !strings.Contains(out, "two\n") {
		t.Errorf("ws connect: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = egress(t, "x\n", "--socket", r.public, "connect", fmt.Sprintf("ws://ws.test:%d/", wsPort))
	if code != 3 || !strings.HasPrefix(errs, "egress refused: ws.test resolves to 127.0.0.1") {
		t.Errorf("public ws connect: exit %d, stderr %q", code, errs)
	}
	code, out, errs = egress(t, "", "--socket", r.local, "fetch", fmt.Sprintf("https://example.com:%d/", tlsPort))
	if code != 0 || out != "over tls" {
		t.Errorf("https fetch with rootCAs: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
