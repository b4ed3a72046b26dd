package manifest

import (
	"errors"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
)

var mcpTests = []struct {
	name, in string
	want     MCP    // after Parse's defaults; ignored when wantErr is set
	wantErr  string // substring; "" means valid
}{
	{"stdio", `{"transport":"stdio"}`, MCP{Transport: "stdio", Path: "/mcp", Mode: "session", Auth: "toybox"}, ""},
	{"stdio as the issue writes it", `{"transport":"stdio","path":"/mcp","mode":"session"}`, MCP{Transport: "stdio", Path: "/mcp", Mode: "session", Auth: "toybox"}, ""},
	{"stdio shared", `{"transport":"stdio","mode":"shared"}`, MCP{Transport: "stdio", Path: "/mcp", Mode: "shared", Auth: "toybox"}, ""},
	{"stdio single", `{"transport":"stdio","mode":"single"}`, MCP{Transport: "stdio", Path: "/mcp", Mode: "single", Auth: "toybox"}, ""},
	{"http default path", `{"transport":"http"}`, MCP{Transport: "http", Path: "/mcp", Auth: "toybox"}, ""},
	{"http own path", `{"transport":"http","path":"/api/v1/mcp/"}`, MCP{Transport: "http", Path: "/api/v1/mcp/", Auth: "toybox"}, ""},
	{"http root", `{"transport":"http","path":"/"}`, MCP{Transport: "http", Path: "/", Auth: "toybox"}, ""},
	{"http own auth", `{"transport":"http","auth":"vat"}`, MCP{Transport: "http", Path: "/mcp", Auth: "vat"}, ""},
	{"stdio cached", `{"transport":"stdio","cacheToolsList":true}`, MCP{Transport: "stdio", Path: "/mcp", Mode: "session", Auth: "toybox", CacheToolsList: true}, ""},
	{"stdio not cached", `{"transport":"stdio","mode":"single","cacheToolsList":false}`, MCP{Transport: "stdio", Path: "/mcp", Mode: "single", Auth: "toybox"}, ""},
	{"cache for http", `{"transport":"http","cacheToolsList":true}`, MCP{}, "mcp.cacheToolsList is for stdio servers"},
	{"cache not a bool", `{"transport":"stdio","cacheToolsList":"yes"}`, MCP{}, "cacheToolsList"},
	{"cache in other case", `{"transport":"stdio","cachetoolslist":true}`, MCP{}, "case-sensitive"},
	{"no transport", `{"path":"/mcp"}`, MCP{}, "mcp.transport is missing"},
	{"bad transport", `{"transport":"sse"}`, MCP{}, `mcp.transport "sse"`},
	{"transport in other case", `{"transport":"STDIO"}`, MCP{}, `mcp.transport "STDIO"`},
	{"bad mode", `{"transport":"stdio","mode":"pooled"}`, MCP{}, `mcp.mode "pooled"`},
	{"mode for http", `{"transport":"http","mode":"shared"}`, MCP{}, "mcp.mode \"shared\" is for stdio servers"},
	{"path for stdio", `{"transport":"stdio","path":"/other"}`, MCP{}, "a stdio server is served at /mcp"},
	{"own auth for stdio", `{"transport":"stdio","auth":"vat"}`, MCP{}, "is for http servers"},
	{"bad auth", `{"transport":"http","auth":"none"}`, MCP{}, `mcp.auth "none"`},
	{"relative path", `{"transport":"http","path":"mcp"}`, MCP{}, "want an absolute path"},
	{"path with query", `{"transport":"http","path":"/mcp?x=1"}`, MCP{}, "without a query"},
	{"path with escape", `{"transport":"http","path":"/m%63p"}`, MCP{}, "percent escapes"},
	{"path with space", `{"transport":"http","path":"/m cp"}`, MCP{}, "spaces"},
	{"path climbs", `{"transport":"http","path":"/a/../mcp"}`, MCP{}, `".." segment`},
	{"path dot", `{"transport":"http","path":"/./mcp"}`, MCP{}, `"." segment`},
	{"path empty segment", `{"transport":"http","path":"//mcp"}`, MCP{}, "empty segment"},
	{"path too long", `{"transport":"http","path":"/` + strings.Repeat("a", 300) + `"}`, MCP{}, "longer than"},
	{"unknown key", `{"transport":"http","timeout":5}`, MCP{}, "unknown field"},
	{"not an object", `"stdio"`, MCP{}, "bad manifest"},
	{"key twice", `{"transport":"http","transport":"stdio"}`, MCP{}, "appears twice"},
	{"key in other case", `{"transport":"http","Mode":"single"}`, MCP{}, "case-sensitive"},
	// R46: the declared extras and per-user variables.
	{"http headers", `{"transport":"http","headers":["x-tenant","X-Region"]}`, MCP{Transport: "http", Path: "/mcp", Auth: "toybox", Headers: []string{"X-Tenant", "X-Region"}}, ""},
	{"stdio headerEnv", `{"transport":"stdio","headerEnv":[{"header":"x-api-key","env":"API_KEY"}]}`, MCP{Transport: "stdio", Path: "/mcp", Mode: "session", Auth: "toybox", HeaderEnv: []HeaderEnv{{"X-Api-Key", "API_KEY"}}}, ""},
	{"shared headerEnv", `{"transport":"stdio","mode":"shared","headerEnv":[{"header":"X-Api-Key","env":"API_KEY"}]}`, MCP{Transport: "stdio", Path: "/mcp", Mode: "shared", Auth: "toybox", HeaderEnv: []HeaderEnv{{"X-Api-Key", "API_KEY"}}}, ""},
	{"single headerEnv", `{"transport":"stdio","mode":"single","headerEnv":[{"header":"X-Api-Key","env":"API_KEY"}]}`, MCP{}, `in mode "single" one process serves every client`},
	{"http headerEnv", `{"transport":"http","headerEnv":[{"header":"X-Api-Key","env":"API_KEY"}]}`, MCP{}, "mcp.headerEnv is for stdio servers"},
	{"stdio headers", `{"transport":"stdio","headers":["X-Tenant"]}`, MCP{}, "a stdio server reads no headers"},
	{"headerEnv undeclared", `{"transport":"stdio","headerEnv":[{"header":"X-Key","env":"OTHER"}]}`, MCP{}, `env "OTHER" is not a variable the manifest's env declares`},
	{"headerEnv no env", `{"transport":"stdio","headerEnv":[{"header":"X-Key"}]}`, MCP{}, "mcp.headerEnv[0].env is missing"},
	{"headerEnv one var twice", `{"transport":"stdio","headerEnv":[{"header":"X-A","env":"API_KEY"},{"header":"X-B","env":"API_KEY"}]}`, MCP{}, "sets API_KEY from two headers"},
	{"header twice", `{"transport":"http","headers":["X-Tenant","x-tenant"]}`, MCP{}, "names X-Tenant twice"},
	{"header not a name", `{"transport":"http","headers":["X Evil"]}`, MCP{}, "is not a header name"},
	{"header empty", `{"transport":"http","headers":[""]}`, MCP{}, "is not a header name"},
	{"header authorization", `{"transport":"http","headers":["authorization"]}`, MCP{}, "toybox token"},
	{"header cookie", `{"transport":"http","headers":["Cookie"]}`, MCP{}, "cookies are the browser's credentials"},
	{"header proxy auth", `{"transport":"http","headers":["Proxy-Authorization"]}`, MCP{}, "never crosses into a vat"},
	{"header forwarded", `{"transport":"http","headers":["X-Forwarded-For"]}`, MCP{}, "X-Forwarded-* headers itself"},
	{"header toybox", `{"transport":"http","headers":["Toybox-Principal"]}`, MCP{}, "set by toybox alone"},
	{"header env toybox", `{"transport":"stdio","headerEnv":[{"header":"toybox-principal-env","env":"API_KEY"}]}`, MCP{}, "set by toybox alone"},
	{"header mcp", `{"transport":"http","headers":["Mcp-Session-Id"]}`, MCP{}, "cross already"},
	{"header host", `{"transport":"http","headers":["Host"]}`, MCP{}, "the edge sets it"},
	{"header hop", `{"transport":"http","headers":["Connection"]}`, MCP{}, "hop-by-hop"},
	{"headers too many", `{"transport":"http","headers":["X-1","X-2","X-3","X-4","X-5","X-6","X-7","X-8","X-9","X-10","X-11","X-12","X-13","X-14","X-15","X-16","X-17"]}`, MCP{}, "at most 16"},
}

// parseCase parses in: when wantErr is set, it checks the refusal (a bad
// manifest, its message holding wantErr) and returns nil; else the manifest.
func parseCase(t *testing.T, in, wantErr string) *Manifest {
	t.Helper()
	m, err := Parse(strings.NewReader(in))
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("Parse(%s) err = %v; want one containing %q", in, err, wantErr)
		}
		if !errors.Is(err, ErrBadManifest) {
			t.Errorf("Parse(%s) err = %v; want ErrBadManifest", in, err)
		}
		return nil
	}
	if err != nil {
		t.Fatalf("Parse(%s) = %v; want ok", in, err)
	}
	return m
}

func TestParseMCP(t *testing.T) {
	for _, tt := range mcpTests {
		t.Run(tt.name, func(t *testing.T) {
			in := `{"command":["./a"],"env":["API_KEY"],"mcp":` + tt.in + `}`
			m := parseCase(t, in, tt.wantErr)
			if m == nil {
				return
			}
			if m.MCP == nil || !reflect.DeepEqual(*m.MCP, tt.want) {
				t.Errorf("Parse(%s).MCP = %+v; want %+v", in, m.MCP, tt.want)
			}
		})
	}
}

// TestParseMCPEnvToyboxSets: a manifest may not declare a variable toybox
// sets for its MCP server (R47): MCP_TRANSPORT for any, MCP_HOST,
// MCP_PORT and FASTMCP_PORT for an http server on a TCP port.
func TestParseMCPEnvToyboxSets(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{
		{"transport stdio", `{"command":["./a"],"env":["MCP_TRANSPORT"],"mcp":{"transport":"stdio"}}`, "env declares MCP_TRANSPORT, which toybox sets"},
		{"transport http", `{"command":["./a"],"env":["MCP_TRANSPORT"],"mcp":{"transport":"http"}}`, "env declares MCP_TRANSPORT"},
		{"port on a port", `{"command":["./a"],"env":["MCP_PORT"],"listen":{"port":3000},"mcp":{"transport":"http"}}`, "env declares MCP_PORT"},
		{"fastmcp on a port", `{"command":["./a"],"env":["FASTMCP_PORT"],"listen":{"port":3000},"mcp":{"transport":"http"}}`, "env declares FASTMCP_PORT"},
		{"host on a port", `{"command":["./a"],"env":["MCP_HOST"],"listen":{"port":3000},"mcp":{"transport":"http"}}`, "env declares MCP_HOST"},
		{"port on the socket", `{"command":["./a"],"env":["MCP_PORT"],"mcp":{"transport":"http"}}`, ""},
		{"no mcp", `{"command":["./a"],"env":["MCP_TRANSPORT","MCP_PORT"],"listen":{"port":3000}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { parseCase(t, tt.in, tt.wantErr) })
	}
}

// TestParseMCPNamedErrors: a bad mcp value is ErrBadMCP as well as
// ErrBadManifest, so the admin API and the status can say which part failed.
func TestParseMCPNamedErrors(t *testing.T) {
	_, err := Parse(strings.NewReader(`{"command":["./a"],"mcp":{"transport":"sse"}}`))
	if !errors.Is(err, ErrBadMCP) || !errors.Is(err, ErrBadManifest) {
		t.Errorf("err = %v; want ErrBadMCP and ErrBadManifest", err)
	}
}

func TestParseMCPQuery(t *testing.T) {
	tests := []struct {
		in      string
		want    MCP
		wantErr bool
	}{
		{"stdio", MCP{Transport: "stdio", Path: "/mcp", Mode: "session", Auth: "toybox"}, false},
		{"http", MCP{Transport: "http", Path: "/mcp", Auth: "toybox"}, false},
		{"", MCP{}, true},
		{"Stdio", MCP{}, true},
		{"stdio,http", MCP{}, true},
	}
	for _, tt := range tests {
		m, err := ParseMCPQuery(tt.in)
		if tt.wantErr {
			if !errors.Is(err, ErrBadMCP) {
				t.Errorf("ParseMCPQuery(%q) err = %v; want ErrBadMCP", tt.in, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(*m, tt.want) {
			t.Errorf("ParseMCPQuery(%q) = %+v, %v; want %+v", tt.in, m, err, tt.want)
		}
	}
}

func FuzzParseMCP(f *testing.F) {
	for _, tt := range mcpTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Parse(strings.NewReader(`{"command":["./a"],"env":["API_KEY"],"mcp":` + s + `}`))
		if err != nil || m.MCP == nil {
			return
		}
		c := m.MCP
		if c.Path == "" || c.Path[0] != '/' || strings.ContainsAny(c.Path, "?#% \t\r\n") {
			t.Fatalf("accepted mcp.path %q", c.Path)
		}
		for _, seg := range strings.Split(c.Path, "/") {
			if seg == ".." || seg == "." {
				t.Fatalf("accepted mcp.path %q", c.Path)
			}
		}
		if (c.Transport == TransportStdio) != (c.Mode != "") || c.Auth == "" {
			t.Fatalf("accepted mcp %+v without its defaults", c)
		}
		names := c.Headers
		for _, he := range c.HeaderEnv {
			names = append(names, he.Header)
		}
		for _, h := range names {
			if h != textproto.CanonicalMIMEHeaderKey(h) || h == "Authorization" || h == "Cookie" || strings.HasPrefix(h, "Toybox-") || strings.HasPrefix(h, "Mcp-") {
				t.Fatalf("accepted header %q", h)
			}
		}
		if len(c.HeaderEnv) > 0 && (c.Transport != TransportStdio || c.Mode == ModeSingle) {
			t.Fatalf("accepted mcp.headerEnv with %+v", c)
		}
	})
}
