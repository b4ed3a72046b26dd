package supervisor

import (
	"archive/tar"
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPVatIsItsOwnResourceServer: with mcp.auth "vat" toybox checks no
// token and passes the client's Authorization to the vat (R45), never its
// cookies; it mints no token for the vat, and refuses an upgrade to
// auth "vat" of a vat that holds tokens (they would go unchecked).
func TestMCPVatIsItsOwnResourceServer(t *testing.T) {
	s, st, _ := mcpSupervisor(t)
	own := bundleFile(t, `{"command":["./mcp-http"],"mcp":{"transport":"http","auth":"vat"}}`, "mcp-http", mcpExample(t))
	stat, _, err := s.Install(InstallRequest{ID: "oauth", Code: storeFile(t, st, own)})
	if err != nil {
		t.Fatal(err)
	}
	if stat.MCP == nil || stat.MCP.Auth != "vat" || !strings.Contains(stat.MCP.Access, "toybox does not authenticate this vat") {
		t.Errorf("status MCP = %+v; want it to say toybox does not authenticate it", stat.MCP)
	}
	if stat.MCP != nil && stat.MCP.PublicURL != "https://mcp.example/oauth/mcp" {
		t.Errorf("status MCP public_url = %q; want the endpoint under Config.PublicURL", stat.MCP.PublicURL)
	}
	if _, _, err := s.MintToken("oauth", nil); err == nil {
		t.Error("a token was minted for a vat that authenticates its own clients")
	}
	front := httptest.NewServer(s.PublicHandler())
	defer front.Close()
	c := &mcpClient{t: t, url: front.URL + "/oauth/mcp", headers: map[string]string{
		"Authorization": "Bearer the-vats-own-token", "Cookie": "session=secret-cookie",
	}}
	c.initialize()
	code, text := c.call("whoami", "{}")
	if code != http.StatusOK || !strings.Contains(text, "Authorization: Bearer the-vats-own-token") || strings.Contains(text, "secret-cookie") {
		t.Errorf("whoami = %d %s; want the client's Authorization and no cookie", code, text)
	}
	// It is told the URL its own metadata must name as its resource.
	if !strings.Contains(text, "public url: https://mcp.example/oauth/mcp") {
		t.Errorf("whoami = %s; want $MCP_PUBLIC_URL https://mcp.example/oauth/mcp", text)
	}
	// Its metadata is its own: the example has none, so its 404 passes.
	resp, err := http.Get(front.URL + "/.well-known/oauth-protected-resource/oauth/mcp")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the vat's own metadata: %d; want its answer (404)", resp.StatusCode)
	}

	// A vat holding tokens is not upgraded to auth "vat".
	if stat := installMCP(t, s, st, "tokened"); stat.MCP == nil || stat.MCP.PublicURL != "" {
		t.Errorf("a vat toybox authenticates: status MCP %+v; want no public_url (it is told none)", stat.MCP)
	}
	if _, _, err := s.MintToken("tokened", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Install(InstallRequest{ID: "tokened", Code: storeFile(t, st, own)}); err == nil || !strings.Contains(err.Error(), "revoke them first") {
		t.Errorf("upgrade of a vat with tokens to auth vat: err = %v; want it refused", err)
	}
}

// bundleFile writes a bundle of manifest and the executable exe, named
// name, and returns its path.
func bundleFile(t *testing.T, manifest, name, exe string) string {
	t.Helper()
	code, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"manifest.json", 0o644, []byte(manifest)}, {name, 0o755, code}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "bundle.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
