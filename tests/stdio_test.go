//go:build linux

package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestStdioBridge: `toybox stdio URL` is a vat's /<vat>/mcp as a stdio
// server, for clients that launch stdio servers only (Claude Desktop's
// config file takes no other kind). The official Go SDK's client launches
// it as it launches any stdio server and calls a walled stdio vat's tools
// through the edge, its bearer token from the environment. Without the
// token, and once the vat is gone, the client is told why, in the
// endpoint's own words.
func TestStdioBridge(t *testing.T) {
	s := newStack(t, stackOpts{})
	if code, body := s.install("counter", example(t, "mcp-stdio"), "mcp=stdio"); code != http.StatusCreated {
		t.Fatalf("PUT /counter?mcp=stdio = %d %s", code, body)
	}
	code, body := s.adminDo("POST", "/counter/tokens", nil)
	var tok struct {
		Token string `json:"token"`
	}
	if code != http.StatusOK && code != http.StatusCreated || json.Unmarshal([]byte(body), &tok) != nil || tok.Token == "" {
		t.Fatalf("POST /counter/tokens = %d %s", code, body)
	}
	endpoint := "http://" + s.http + "/counter/mcp"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(env ...string) (*sdk.ClientSession, error) {
		cmd := exec.Command(filepath.Join(bins, "toybox"), "stdio", endpoint)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stderr = os.Stderr
		cl := sdk.NewClient(&sdk.Implementation{Name: "toybox-test", Version: "1"}, nil)
		return cl.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	}

	cs, err := connect("TOYBOX_TOKEN=" + tok.Token)
	if err != nil {
		t.Fatalf("the SDK's client through toybox stdio: %v", err)
	}
	defer cs.Close()
	if got := cs.InitializeResult().ServerInfo.Name; got != "toybox-example-mcp-stdio" {
		t.Errorf("serverInfo.name = %q; want the vat's", got)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list: %v %+v", err, tools)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "add", Arguments: map[string]any{"a": 2, "b": 3}})
	if err != nil || res.IsError {
		t.Fatalf("tools/call add: %v %+v", err, res)
	}
	if sc, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(sc), `"sum":5`) {
		t.Errorf("add's structuredContent = %s; want the sum 5", sc)
	}
	for want := 1; want <= 2; want++ {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "count", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			t.Fatalf("tools/call count: %v %+v", err, res)
		}
		if sc, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(sc), `"count":`+string(rune('0'+want))) {
			t.Errorf("count's structuredContent = %s; want %d", sc, want)
		}
	}

	// No token: the edge's 401, in its words, and no session.
	if cs2, err := connect("TOYBOX_TOKEN="); err == nil {
		cs2.Close()
		t.Errorf("a client with no token connected; want the 401")
	} else if t.Logf("a client with no token: %v", err); !strings.Contains(err.Error(), "401") {
		t.Errorf("a client with no token: %v; want the endpoint's 401 named", err)
	}

	// The vat removed under a live session: the next call says so.
	if code, body := s.adminDo("DELETE", "/counter", nil); code != http.StatusOK {
		t.Fatalf("DELETE /counter = %d %s", code, body)
	}
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "add", Arguments: map[string]any{"a": 1, "b": 1}})
	t.Logf("tools/call once the vat is gone: %v", err)
	if err == nil || !strings.Contains(err.Error(), "toybox stdio") || !strings.Contains(err.Error(), "404") {
		t.Errorf("tools/call once the vat is gone: %v; want the endpoint's 404, named by toybox stdio", err)
	}
}
