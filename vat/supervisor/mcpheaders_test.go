package supervisor

import (
	"maps"
	"net/http"
	"strings"
	"testing"

	"toybox/vat/manifest"
	"toybox/vat/store"
)

// TestMCPEnv: the variables toybox sets for an MCP server (R47), as
// ToolHive does: the transport always, the host and port only for an http
// server on a TCP port.
func TestMCPEnv(t *testing.T) {
	exe := func(mcp string, listen int) (store.Code, store.Record) {
		return store.Code{Manifest: &manifest.Manifest{Command: []string{"./a"}}}, store.Record{MCP: mcp, Listen: listen}
	}
	tests := []struct {
		name   string
		mcp    string
		listen int
		want   map[string]string
	}{
		{"no mcp", "", 3000, nil},
		{"stdio", "stdio", 0, map[string]string{"MCP_TRANSPORT": "stdio"}},
		{"http on the socket", "http", 0, map[string]string{"MCP_TRANSPORT": "streamable-http"}},
		{"http on a port", "http", 8000, map[string]string{"MCP_TRANSPORT": "streamable-http", "MCP_HOST": "127.0.0.1", "MCP_PORT": "8000", "FASTMCP_PORT": "8000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, rec := exe(tt.mcp, tt.listen)
			if got := mcpEnv(code, rec); !maps.Equal(got, tt.want) {
				t.Errorf("mcpEnv(?mcp=%s, ?listen=%d) = %v; want %v", tt.mcp, tt.listen, got, tt.want)
			}
			cfg := mcpOf(code, rec)
			for k := range mcpEnv(code, rec) {
				if !cfg.SetsEnv(k, tt.listen != 0) {
					t.Errorf("mcpEnv sets %s, which manifest.MCP.SetsEnv does not refuse in env", k)
				}
			}
		})
	}
}

// TestHeaderEnv: a client's headers as the variables mcp.headerEnv maps
// them to (R46), and what is refused.
func TestHeaderEnv(t *testing.T) {
	mapping := []manifest.HeaderEnv{{Header: "X-Api-Key", Env: "API_KEY"}, {Header: "X-Region", Env: "REGION"}}
	tests := []struct {
		name    string
		h       http.Header
		want    map[string]string
		wantWhy string
	}{
		{"none", http.Header{"X-Other": {"x"}}, map[string]string{}, ""},
		{"one", http.Header{"X-Api-Key": {"k1"}}, map[string]string{"API_KEY": "k1"}, ""},
		{"both", http.Header{"X-Api-Key": {"k1"}, "X-Region": {"eu"}}, map[string]string{"API_KEY": "k1", "REGION": "eu"}, ""},
		{"empty value", http.Header{"X-Api-Key": {""}}, map[string]string{"API_KEY": ""}, ""},
		{"twice", http.Header{"X-Api-Key": {"k1", "k2"}}, nil, "X-Api-Key is sent 2 times"},
		{"too long", http.Header{"X-Api-Key": {strings.Repeat("k", maxHeaderEnvValue+1)}}, nil, "over 4096 bytes"},
		{"nul", http.Header{"X-Api-Key": {"k\x00"}}, nil, "NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := headerEnv(tt.h, mapping)
			if !strings.Contains(why, tt.wantWhy) || (tt.wantWhy == "") != (why == "") {
				t.Fatalf("headerEnv why = %q; want %q", why, tt.wantWhy)
			}
			if why == "" && !maps.Equal(got, tt.want) {
				t.Errorf("headerEnv = %v; want %v", got, tt.want)
			}
		})
	}
	a, b := envPrincipal(map[string]string{"API_KEY": "a"}), envPrincipal(map[string]string{"API_KEY": "b"})
	if a == b || a != envPrincipal(map[string]string{"API_KEY": "a"}) || !strings.HasPrefix(a, "/env:") || strings.Contains(a, "a\"") {
		t.Errorf("envPrincipal: %q and %q; want one stable digest per set of values", a, b)
	}
}
