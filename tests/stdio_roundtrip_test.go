//go:build linux

//lint:file-ignore SA1019 a 2025-11-25 client answers the server's sampling requests: the bridge must carry them.

package tests

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"toybox/tests/testenv"
)

// stdioConnect launches `toybox stdio endpoint` as the SDK's client
// launches any stdio server, and connects to it, a client that offers
// roots.
func stdioConnect(t *testing.T, ctx context.Context, endpoint string, opts *sdk.ClientOptions, roots ...*sdk.Root) *sdk.ClientSession {
	t.Helper()
	cmd := exec.Command(filepath.Join(bins, "toybox"), "stdio", endpoint)
	cmd.Stderr = os.Stderr
	cl := sdk.NewClient(&sdk.Implementation{Name: "toybox-test", Version: "1"}, opts)
	cl.AddRoots(roots...)
	cs, err := cl.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("the SDK's client through toybox stdio %s: %v", endpoint, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// toolText is the text of a tool's result, or why there is none.
func toolText(res *sdk.CallToolResult, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return "tool error: " + b.String()
	}
	return b.String()
}

// TestStdioBridgeRoundTrips: what a real client does through `toybox stdio`
// with the Go SDK's everything-server as an HTTP vat (a 2025-11-25 session):
// the server's own requests during a tool call (sampling, elicitation,
// roots),
// progress, a ping, a call's stream the server ends before its answer,
// messages of several MiB each way (the vat takes 4 MiB
// a body at most), and more calls at once than the bridge posts at once,
// each waiting on the client's answer to the server's own request.
func TestStdioBridgeRoundTrips(t *testing.T) {
	s := newStack(t, stackOpts{})
	s.installEverything("every", testenv.EverythingServer(t, testenv.EverythingDual), "-stateless=false")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var progress atomic.Int32
	cs := stdioConnect(t, ctx, "http://"+s.http+"/every/mcp", &sdk.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *sdk.CreateMessageRequest) (*sdk.CreateMessageResult, error) {
			text := ""
			if tc, ok := req.Params.Messages[0].Content.(*sdk.TextContent); ok {
				text = tc.Text
			}
			return &sdk.CreateMessageResult{Model: "m", Role: "assistant", Content: &sdk.TextContent{Text: text}}, nil
		},
		ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"username": "u", "email": "u@example.com"}}, nil
		},
		ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) { progress.Add(1) },
	}, &sdk.Root{URI: "file:///work/project", Name: "project"})
	call := func(name string, args map[string]any) string {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return toolText(cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args}))
	}
	t.Logf("negotiated %s", cs.InitializeResult().ProtocolVersion)

	if err := cs.Ping(ctx, nil); err != nil {
		t.Errorf("ping: %v", err)
	}
	if got := call("test_sampling", map[string]any{"prompt": "hi"}); got != "LLM response: hi" {
		t.Errorf("test_sampling = %q; want the client's answer", got)
	}
	if got := call("test_elicitation", map[string]any{"message": "who?"}); strings.HasPrefix(got, "error") || strings.HasPrefix(got, "tool error") {
		t.Errorf("test_elicitation = %q", got)
	}
	// The server asks for the client's roots (roots/list) in the
	// call's stream: a 2025-11-25 client gets the server's request.
	if got := call("test_input_required_result_list_roots", nil); got != "Client exposed 1 root(s): file:///work/project" {
		t.Errorf("test_input_required_result_list_roots = %q; want the client's root", got)
	}
	if got := call("test_tool_with_progress", nil); strings.HasPrefix(got, "error") {
		t.Errorf("test_tool_with_progress = %q", got)
	} else if n := progress.Load(); n != 3 {
		t.Errorf("test_tool_with_progress: %d progress notifications; want 3", n)
	}
	// The server closes the call's stream before its answer, and keeps
	// no events to take it up again (no EventStore): the client is told
	// at once, not left waiting.
	start := time.Now()
	if got := call("test_reconnection", nil); !strings.Contains(got, "ended with no answer") || time.Since(start) > 10*time.Second {
		t.Errorf("test_reconnection = %q after %v; want at once that the stream ended with no answer", got, time.Since(start).Round(time.Millisecond))
	}
	big := strings.Repeat("x", 3<<20)
	if got := call("test_sampling", map[string]any{"prompt": big}); got != "LLM response: "+big {
		t.Errorf("test_sampling with a 3 MiB prompt = %d bytes %.80q; want the prompt back", len(got), got)
	}

	const n = 24
	var wg sync.WaitGroup
	got := make([]string, n)
	for i := range n {
		wg.Go(func() { got[i] = call("test_sampling", map[string]any{"prompt": fmt.Sprint(i)}) })
	}
	wg.Wait()
	for i, g := range got {
		if want := fmt.Sprint("LLM response: ", i); g != want {
			t.Errorf("call %d of %d at once = %q; want %q", i, n, g, want)
		}
	}
}

// TestStdioBridgeEnds: `toybox stdio` ends its session (DELETE) when its
// client is gone, whether stdin ends with a call under way or SIGTERM
// comes while stdin is still open (a client quitting).
func TestStdioBridgeEnds(t *testing.T) {
	for _, tt := range []struct {
		name string
		end  func(cmd *exec.Cmd, stdin io.Closer)
	}{
		{"stdin closed", func(_ *exec.Cmd, stdin io.Closer) { stdin.Close() }},
		{"SIGTERM", func(cmd *exec.Cmd, _ io.Closer) { _ = cmd.Process.Signal(syscall.SIGTERM) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			deleted := make(chan struct{}, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch body, _ := io.ReadAll(r.Body); {
				case r.Method == http.MethodDelete && r.Header.Get("Mcp-Session-Id") == "s1":
					deleted <- struct{}{}
				case r.Method == http.MethodPost && strings.Contains(string(body), `"initialize"`):
					w.Header().Set("Mcp-Session-Id", "s1")
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
				case r.Method == http.MethodPost && strings.Contains(string(body), `"tools/call"`):
					<-r.Context().Done() // a call that takes its time
				default:
					w.WriteHeader(http.StatusAccepted)
				}
			}))
			defer srv.Close()
			cmd := exec.Command(filepath.Join(bins, "toybox"), "stdio", srv.URL+"/v/mcp")
			cmd.Stderr = os.Stderr
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(stdin, mcpInit)
			if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || !strings.Contains(line, `"result"`) {
				t.Fatalf("initialize through toybox stdio: %q %v", line, err)
			}
			fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow"}}`)
			time.Sleep(200 * time.Millisecond)
			start := time.Now()
			tt.end(cmd, stdin)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				t.Logf("toybox stdio ended after %v: %v", time.Since(start).Round(time.Millisecond), err)
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("toybox stdio still runs 15 s after its client went (%s)", tt.name)
			}
			select {
			case <-deleted:
			default:
				t.Errorf("toybox stdio ended without ending its session (no DELETE)")
			}
		})
	}
}

// TestStdioBridgeSessionLost: a vat that restarts under a live session
// forgets it, and its endpoint answers the session's next request 404.
// The spec has the HTTP client initialize again, and a stdio client has
// no way to (its server never went): so the bridge does, with the
// client's own initialize, and the call goes through. So too when toybox
// itself restarts.
func TestStdioBridgeSessionLost(t *testing.T) {
	s := newStack(t, stackOpts{})
	s.installEverything("every", testenv.EverythingServer(t, testenv.EverythingDual), "-stateless=false")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := stdioConnect(t, ctx, "http://"+s.http+"/every/mcp", nil)
	call := func() string {
		return toolText(cs.CallTool(ctx, &sdk.CallToolParams{Name: "test_simple_text"}))
	}
	if got := call(); strings.HasPrefix(got, "error") {
		t.Fatalf("test_simple_text = %q", got)
	}
	if code, body := s.adminDo("POST", "/every/restart", nil); code/100 != 2 {
		t.Fatalf("POST /every/restart = %d %s", code, body)
	}
	s.waitWord("every", "walled")
	if got := call(); strings.HasPrefix(got, "error") {
		t.Errorf("test_simple_text after the vat restarted = %q; want its answer", got)
	}
	if got := call(); strings.HasPrefix(got, "error") {
		t.Errorf("test_simple_text again = %q; want its answer", got)
	}
	// toybox itself restarts: every session it held is gone.
	s.restart(nil, nil)
	s.waitWord("every", "walled")
	if got := call(); strings.HasPrefix(got, "error") {
		t.Errorf("test_simple_text after toybox restarted = %q; want its answer", got)
	}
}

// TestStdioBridgeStateless: the everything-server as a stateless vat
// (2026-07-28 and no session) through the bridge, with the SDK's client
// as it is: tools, progress and a ping, and a cancelled call that leaves
// the bridge serving.
func TestStdioBridgeStateless(t *testing.T) {
	s := newStack(t, stackOpts{})
	s.installEverything("every", testenv.EverythingServer(t, testenv.EverythingDual))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var progress atomic.Int32
	cs := stdioConnect(t, ctx, "http://"+s.http+"/every/mcp", &sdk.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) { progress.Add(1) },
	})
	t.Logf("negotiated %s", cs.InitializeResult().ProtocolVersion)
	if err := cs.Ping(ctx, nil); err != nil {
		t.Errorf("ping: %v", err)
	}
	if got := toolText(cs.CallTool(ctx, &sdk.CallToolParams{Name: "test_simple_text"})); strings.HasPrefix(got, "error") {
		t.Errorf("test_simple_text = %q", got)
	}
	if got := toolText(cs.CallTool(ctx, &sdk.CallToolParams{Name: "test_tool_with_progress", Meta: sdk.Meta{"progressToken": "p1"}})); got != "p1" {
		t.Errorf("test_tool_with_progress = %q; want its token", got)
	} else if n := progress.Load(); n != 3 {
		t.Errorf("test_tool_with_progress: %d progress notifications; want 3", n)
	}
	// A 2026-07-28 call is cancelled by closing its stream: the vat
	// sends no progress after the client cancels.
	before := progress.Load()
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "test_tool_with_progress", Meta: sdk.Meta{"progressToken": "p2"}})
	ccancel()
	t.Logf("a call cancelled after 20 ms: %v", err)
	time.Sleep(300 * time.Millisecond)
	if n := progress.Load() - before; n > 1 {
		t.Errorf("a call cancelled after its first progress sent %d in all; want it stopped", n)
	}
	if got := toolText(cs.CallTool(ctx, &sdk.CallToolParams{Name: "test_simple_text"})); strings.HasPrefix(got, "error") {
		t.Errorf("test_simple_text after a cancelled call = %q", got)
	}
}
