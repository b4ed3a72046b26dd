// Package mcptest holds what tests of the MCP bridge share.
//
// It holds a client for the bridge's endpoint (raw, or the Go SDK's) and a small
// stdio MCP server with tools that misbehave on purpose. The Go SDK's
// conformance everything-server is tests/testenv's EverythingServer.
package mcptest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Banner is the line the fake server writes to stdout before anything
// else, as many servers do (a line that is not JSON-RPC).
const Banner = "fake-mcp v1 starting on stdio"

// Noise are the lines the "noise" tool writes to stdout before its answer.
var Noise = []string{
	"npm notice New major version of npm available! 10.9.2 -> 11.4.1",
	"[dotenv@17.2.0] injecting env (0) from .env -- tip: encrypt with dotenvx",
	`{"hello":"a JSON line that is no JSON-RPC"}`,
	`{"jsonrpc":"2.0","method":"window/logMessage","params":{"type":3,"message":"LSP-style"}}`,
}

// Emoji is the text of the "noise" tool's answer: a zero-width joiner
// sequence, U+2028 and HTML-significant bytes, which must pass byte for
// byte.
const Emoji = "\U0001F469\u200D\U0001F4BB \u2028 <b>&</b>"

// Fake serves the fake stdio MCP server on in and out (logging to errw)
// until in ends. Its tools:
//
//	echo {text, sleepMs}   answers text (after sleepMs)
//	noise                  writes Noise to stdout, then answers Emoji
//	big {mib, sleepMs}     answers a text of mib MiB (after sleepMs)
//	crash                  writes "fatal: boom" to stderr and exits 3
//	slow {ms}              answers after ms, unless cancelled
//	cancelled              answers the ids of the cancelled calls
//	sample                 asks the client sampling/createMessage, answers its text
//	elicit                 asks the client elicitation/create, answers its content
//	roots                  asks the client roots/list, answers the count
//	progress               sends three progress notifications, then answers
//	count                  answers how many times it ran in this process
//	pid                    answers the process id
//	flood                  writes 4 MB to stderr, then answers
//	log                    sends an info notifications/message, then answers
//	level                  answers the last logging/setLevel's level
//	region {region}        answers region (its schema mirrors it in Mcp-Param-Region)
//	stubborn               from now on ignores SIGTERM and the end of stdin
func Fake(in io.Reader, out io.Writer, errw io.Writer) int {
	f := &fake{out: out, errw: errw, waits: map[string]chan json.RawMessage{}, cancel: map[string]chan struct{}{}}
	f.line([]byte(Banner))
	r := bufio.NewReaderSize(in, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			f.handle(bytes.TrimSpace(line))
		}
		if err != nil {
			if f.isStubborn() {
				select {}
			}
			return 0
		}
	}
}

// ModernOnly makes the fake speak only 2026-07-28: initialize is an
// unknown method, server/discover answers, and a request without the
// per-request _meta is refused.
var ModernOnly bool

// Icon, when set, is an icon the fake's serverInfo carries (2025-11-25
// Implementation.icons), such as a data: URI of an image.
var Icon string

// Tools are more tools a test binary adds to the fake server (for an
// attack run from inside a wall): each answers a text.
var Tools = map[string]func() string{}

type fake struct {
	mu        sync.Mutex
	out, errw io.Writer
	count     int
	next      int
	waits     map[string]chan json.RawMessage
	cancel    map[string]chan struct{}
	cancelled []string
	stubborn  bool
	level     string
}

func (f *fake) isStubborn() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stubborn
}

func (f *fake) line(b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, _ = f.out.Write(append(b, '\n'))
}

func (f *fake) send(v any) {
	b, _ := json.Marshal(v)
	f.line(b)
}

type msg struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
}

func (f *fake) handle(line []byte) {
	var m msg
	if err := json.Unmarshal(line, &m); err != nil {
		fmt.Fprintf(f.errw, "fake: bad line %q\n", line)
		return
	}
	switch {
	case m.Method == "" && m.ID != nil:
		f.mu.Lock()
		ch := f.waits[string(m.ID)]
		delete(f.waits, string(m.ID))
		f.mu.Unlock()
		if ch != nil {
			if m.Result != nil {
				ch <- m.Result
			} else {
				ch <- m.Error
			}
		}
	case ModernOnly && m.ID != nil && m.Method != "" && !strings.Contains(string(m.Params), `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`):
		f.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32602, "message": "no _meta protocolVersion"}})
	case ModernOnly && m.Method == "initialize":
		f.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "no method initialize"}})
	case m.Method == "server/discover" && ModernOnly:
		f.result(m.ID, map[string]any{
			"resultType": "complete", "supportedVersions": []string{"2026-07-28"},
			"capabilities": map[string]any{"tools": map[string]any{}},
			"_meta":        map[string]any{"io.modelcontextprotocol/serverInfo": map[string]any{"name": "fake-modern", "version": "1"}},
		})
	case m.Method == "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(m.Params, &p)
		info := map[string]any{"name": "fake-mcp", "version": "1"}
		if Icon != "" {
			info["icons"] = []map[string]any{{"src": Icon, "mimeType": "image/png"}}
		}
		f.result(m.ID, map[string]any{
			"protocolVersion": p.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{}, "logging": map[string]any{}},
			"serverInfo":      info,
		})
	case m.Method == "notifications/cancelled":
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		f.mu.Lock()
		f.cancelled = append(f.cancelled, string(p.RequestID))
		if ch := f.cancel[string(p.RequestID)]; ch != nil {
			close(ch)
			delete(f.cancel, string(p.RequestID))
		}
		f.mu.Unlock()
	case m.Method == "tools/list":
		f.result(m.ID, map[string]any{"tools": []map[string]any{
			{"name": "echo", "inputSchema": map[string]any{"type": "object"}},
			{"name": "region", "inputSchema": map[string]any{"type": "object", "properties": map[string]any{
				"region": map[string]any{"type": "string", "x-mcp-header": "Region"},
			}}},
		}})
	case m.Method == "tools/call":
		go f.call(m)
	case m.Method == "logging/setLevel":
		var p struct {
			Level string `json:"level"`
		}
		_ = json.Unmarshal(m.Params, &p)
		f.mu.Lock()
		f.level = p.Level
		f.mu.Unlock()
		f.result(m.ID, map[string]any{})
	case m.Method == "ping":
		f.result(m.ID, map[string]any{})
	case strings.HasPrefix(m.Method, "notifications/"):
	default:
		if m.ID != nil {
			f.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "no method " + m.Method}})
		}
	}
}

func (f *fake) result(id json.RawMessage, v any) {
	f.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": v})
}

func (f *fake) text(id json.RawMessage, s string) {
	f.result(id, map[string]any{"content": []map[string]any{{"type": "text", "text": s}}})
}

// ask sends the client a request and waits for its answer.
func (f *fake) ask(method string, params any) json.RawMessage {
	f.mu.Lock()
	f.next++
	id := fmt.Sprintf(`"srv-%d"`, f.next)
	ch := make(chan json.RawMessage, 1)
	f.waits[id] = ch
	f.mu.Unlock()
	f.send(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method, "params": params})
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		return json.RawMessage(`"no answer"`)
	}
}

func (f *fake) call(m msg) {
	var p struct {
		Name      string `json:"name"`
		Arguments struct {
			Text    string `json:"text"`
			SleepMs int    `json:"sleepMs"`
			MiB     int    `json:"mib"`
			Ms      int    `json:"ms"`
			Region  string `json:"region"`
		} `json:"arguments"`
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	_ = json.Unmarshal(m.Params, &p)
	a := p.Arguments
	switch p.Name {
	case "echo":
		time.Sleep(time.Duration(a.SleepMs) * time.Millisecond)
		f.text(m.ID, a.Text)
	case "noise":
		for _, n := range Noise {
			f.line([]byte(n))
		}
		f.text(m.ID, Emoji)
	case "big":
		time.Sleep(time.Duration(a.SleepMs) * time.Millisecond)
		f.text(m.ID, strings.Repeat("x", a.MiB<<20))
	case "crash":
		fmt.Fprintln(f.errw, "fatal: boom")
		os.Exit(3)
	case "slow":
		ch := make(chan struct{})
		f.mu.Lock()
		f.cancel[string(m.ID)] = ch
		f.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(time.Duration(a.Ms) * time.Millisecond):
			f.text(m.ID, "slept")
		}
	case "cancelled":
		f.mu.Lock()
		ids := strings.Join(f.cancelled, ",")
		f.mu.Unlock()
		f.text(m.ID, ids)
	case "sample":
		r := f.ask("sampling/createMessage", map[string]any{"messages": []map[string]any{{"role": "user", "content": map[string]any{"type": "text", "text": "hi"}}}, "maxTokens": 10})
		var res struct {
			Content struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		_ = json.Unmarshal(r, &res)
		f.text(m.ID, "sampled: "+res.Content.Text)
	case "elicit":
		r := f.ask("elicitation/create", map[string]any{"message": "name?", "requestedSchema": map[string]any{"type": "object"}})
		f.text(m.ID, "elicited: "+string(r))
	case "roots":
		r := f.ask("roots/list", map[string]any{})
		f.text(m.ID, "roots: "+string(r))
	case "progress":
		for i := 1; i <= 3; i++ {
			f.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress", "params": map[string]any{"progressToken": p.Meta.ProgressToken, "progress": i, "total": 3}})
		}
		f.text(m.ID, "progressed")
	case "count":
		f.mu.Lock()
		f.count++
		n := f.count
		f.mu.Unlock()
		f.text(m.ID, fmt.Sprint(n))
	case "region":
		f.text(m.ID, a.Region)
	case "log":
		f.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/message", "params": map[string]any{"level": "info", "data": "an info line"}})
		f.text(m.ID, "logged")
	case "level":
		f.mu.Lock()
		l := f.level
		f.mu.Unlock()
		f.text(m.ID, l)
	case "flood":
		line := strings.Repeat("e", 200) + "\n"
		for range 20000 {
			_, _ = io.WriteString(f.errw, line)
		}
		f.text(m.ID, "flooded")
	case "pid":
		f.text(m.ID, fmt.Sprint(os.Getpid()))
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		f.mu.Lock()
		f.stubborn = true
		f.mu.Unlock()
		f.text(m.ID, "stubborn")
	default:
		if tool := Tools[p.Name]; tool != nil {
			f.text(m.ID, tool())
			return
		}
		f.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32602, "message": "no tool " + p.Name}})
	}
}
