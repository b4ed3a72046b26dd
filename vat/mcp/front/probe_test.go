package front

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"toybox/vat/mcp"

	"toybox/tests/testenv"
)

// TestProbeRealServers: the Go SDK's conformance server is recorded dual
// at v1.7.0 in its stateless mode, legacy in its stateful mode (its
// server/discover lists no modern version there), and legacy at v1.6.1,
// with its serverInfo and its tools (R4).
func TestProbeRealServers(t *testing.T) {
	tests := []struct {
		name, version string
		args          []string
		era           mcp.Era
	}{
		{"v1.7.0 stateless", testenv.EverythingDual, nil, mcp.Dual},
		{"v1.7.0 stateful", testenv.EverythingDual, []string{"-stateless=false"}, mcp.Legacy},
		{"v1.6.1", testenv.EverythingLegacy, nil, mcp.Legacy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := testenv.StartEverything(t, testenv.EverythingServer(t, tt.version), tt.args...)
			snap := Prober{Client: http.DefaultClient, URL: url}.Probe(t.Context())
			if snap.Error != "" || snap.Era != tt.era {
				t.Fatalf("Probe = %+v; want era %s and no error", snap, tt.era)
			}
			if snap.ServerInfo == nil || snap.ServerInfo.Name != "mcp-conformance-test-server" {
				t.Errorf("serverInfo = %+v; want the server's name", snap.ServerInfo)
			}
			if snap.ToolCount < 10 || snap.ToolCount != len(snap.Tools) || !slices.Contains(snap.Tools, "test_simple_text") {
				t.Errorf("tools = %d %v; want the server's tools, test_simple_text among them", snap.ToolCount, snap.Tools)
			}
		})
	}
}

// fakeServer answers each method as the table says.
func fakeServer(t *testing.T, answers map[string]func(w http.ResponseWriter, id string)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		body, _ := io.ReadAll(r.Body)
		req := Peek(body)
		if r.Header.Get(mcp.HeaderPrincipal) != ProbePrincipal {
			t.Errorf("%s carries principal %q; want %q", req.Method, r.Header.Get(mcp.HeaderPrincipal), ProbePrincipal)
		}
		f, ok := answers[req.Method]
		if !ok {
			http.Error(w, "<html>not here</html>", http.StatusNotFound)
			return
		}
		f(w, string(req.ID))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

func jsonAnswer(result string) func(http.ResponseWriter, string) {
	return func(w http.ResponseWriter, id string) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, result)
	}
}

func accepted(w http.ResponseWriter, _ string) { w.WriteHeader(http.StatusAccepted) }

func TestProbeEdges(t *testing.T) {
	tools := `{"tools":[{"name":"a"},{"name":"b"}]}`
	tests := []struct {
		name    string
		answers map[string]func(http.ResponseWriter, string)
		era     mcp.Era
		tools   []string
		errHas  string
	}{
		{
			name: "modern only: initialize refused",
			answers: map[string]func(http.ResponseWriter, string){
				"server/discover": jsonAnswer(`{"supportedVersions":["2026-07-28"],"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"m","version":"2"}}}`),
				"initialize": func(w http.ResponseWriter, id string) {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32022,"message":"unsupported"}}`, id)
				},
				"tools/list": jsonAnswer(tools),
			},
			era: mcp.Modern, tools: []string{"a", "b"},
		},
		{
			// Discover answered with HTML 404: the fallback is taken on
			// anything, not one error code.
			name: "legacy: discover is a 404 page",
			answers: map[string]func(http.ResponseWriter, string){
				"initialize":                jsonAnswer(`{"protocolVersion":"2025-06-18","serverInfo":{"name":"l"}}`),
				"notifications/initialized": accepted,
				"tools/list":                jsonAnswer(tools),
			},
			era: mcp.Legacy, tools: []string{"a", "b"},
		},
		{
			// An SSE answer with a notification and a server request
			// before the response, split over data lines.
			name: "event stream with messages before the answer",
			answers: map[string]func(http.ResponseWriter, string){
				"initialize":                jsonAnswer(`{"protocolVersion":"2025-11-25","serverInfo":{"name":"s"}}`),
				"notifications/initialized": accepted,
				"tools/list": func(w http.ResponseWriter, id string) {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprint(w, "id: 0\ndata:\n\n: keep-alive\n\n")
					fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n")
					fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"roots/list\"}\n\n")
					fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"id\":%s,\"result\":{\"tools\":[{\"name\":\"x\"}]}}\n\n", id)
				},
			},
			era: mcp.Legacy, tools: []string{"x"},
		},
		{
			name: "paged tools",
			answers: map[string]func(http.ResponseWriter, string){
				"initialize":                jsonAnswer(`{"protocolVersion":"2025-11-25","serverInfo":{"name":"p"}}`),
				"notifications/initialized": accepted,
				"tools/list": func(w http.ResponseWriter, id string) {
					w.Header().Set("Content-Type", "application/json")
					if id == "3" {
						fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"one"}],"nextCursor":"c"}}`, id)
						return
					}
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"two"}]}}`, id)
				},
			},
			era: mcp.Legacy, tools: []string{"one", "two"},
		},
		{
			name:    "nothing answers",
			answers: map[string]func(http.ResponseWriter, string){},
			errHas:  "answered neither server/discover nor initialize",
		},
		{
			name: "tools/list fails",
			answers: map[string]func(http.ResponseWriter, string){
				"initialize":                jsonAnswer(`{"protocolVersion":"2025-11-25","serverInfo":{"name":"f"}}`),
				"notifications/initialized": accepted,
			},
			era: mcp.Legacy, errHas: "tools/list",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := Prober{Client: http.DefaultClient, URL: fakeServer(t, tt.answers)}.Probe(t.Context())
			if snap.Era != tt.era {
				t.Errorf("era = %q; want %q (%+v)", snap.Era, tt.era, snap)
			}
			if tt.errHas == "" && snap.Error != "" || !strings.Contains(snap.Error, tt.errHas) {
				t.Errorf("error = %q; want %q", snap.Error, tt.errHas)
			}
			if tt.tools != nil && !slices.Equal(snap.Tools, tt.tools) {
				t.Errorf("tools = %v; want %v", snap.Tools, tt.tools)
			}
		})
	}
}

// TestProbeBounded: what a probe keeps of a server's answers is bounded:
// the snapshot goes into the vat's record, each status and the log. A
// server answering with megabytes of names, versions and error text made
// the supervisor keep them all (50 pages of 8 MiB of tool names).
func TestProbeBounded(t *testing.T) {
	const maxSnapshotJSON = 160 << 10  // 1000 names of 128 bytes, and the rest
	huge := strings.Repeat("é", 1<<19) // 1 MiB, two bytes a rune
	versions := make([]string, 5000)
	for i := range versions {
		versions[i] = fmt.Sprintf("2025-11-25-%0100d", i)
	}
	versions = append(versions, "2026-07-28")
	discover, _ := json.Marshal(map[string]any{
		"supportedVersions": versions,
		"_meta":             map[string]any{"io.modelcontextprotocol/serverInfo": map[string]any{"name": huge, "version": huge, "title": huge}},
	})
	page := func(w http.ResponseWriter, id string) {
		tools := make([]map[string]string, 3)
		for i := range tools {
			tools[i] = map[string]string{"name": huge}
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "result": map[string]any{"tools": tools, "nextCursor": "more"}})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}
	failing := func(w http.ResponseWriter, id string) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "error": map[string]any{"code": -32603, "message": huge}})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}
	tests := []struct {
		name    string
		answers map[string]func(http.ResponseWriter, string)
	}{
		{"long names, versions and pages", map[string]func(http.ResponseWriter, string){
			"server/discover": jsonAnswer(string(discover)), "tools/list": page,
		}},
		{"a long error", map[string]func(http.ResponseWriter, string){
			"server/discover": jsonAnswer(string(discover)), "tools/list": failing,
		}},
		{"nothing answers, at length", map[string]func(http.ResponseWriter, string){
			"server/discover": failing, "initialize": failing,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := Prober{Client: http.DefaultClient, URL: fakeServer(t, tt.answers)}.Probe(t.Context())
			b, err := json.Marshal(snap)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > maxSnapshotJSON {
				t.Errorf("the snapshot is %d bytes of JSON; want at most %d", len(b), maxSnapshotJSON)
			}
			if !utf8.Valid(b) {
				t.Error("the snapshot is not valid UTF-8 once cut")
			}
		})
	}
}
