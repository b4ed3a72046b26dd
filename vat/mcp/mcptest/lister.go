package mcptest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// ListerConfig is what the lister's tools/list answers carry.
type ListerConfig struct {
	// Dir holds the tool list and the count of tools/list answered, so
	// that every process of the server shares them. Required.
	Dir string
	// TTLMs and Scope are each list page's ttlMs and cacheScope; a
	// negative TTLMs and an empty Scope leave the key out.
	TTLMs int
	Scope string
}

// ListerTools are the lister's tools before any grow.
var ListerTools = []string{"alpha", "beta", "gamma"}

// ListerPage is how many tools one tools/list page holds.
const ListerPage = 2

// Lister serves a stdio MCP server whose tool list changes, on in and
// out, until in ends. It speaks the 2025 revisions (initialize) and
// 2026-07-28 (server/discover). Its state is in cfg.Dir, shared by all its
// processes:
//
//   - tools: the tool list, a name a line (ListerTools when absent);
//     tools/list answers it in pages of ListerPage, the cursor the next
//     offset ("2"); a bad cursor gets -32602;
//   - lists: a line per tools/list asked (a refused one too).
//
// Its tools:
//
//	grow {name}   adds name to the list, saying nothing
//	announce      sends notifications/tools/list_changed, then answers
//	listed        answers how many tools/list all its processes answered
func Lister(in io.Reader, out io.Writer, cfg ListerConfig) int {
	l := &lister{out: out, cfg: cfg}
	r := bufio.NewReaderSize(in, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			l.handle(bytes.TrimSpace(line))
		}
		if err != nil {
			return 0
		}
	}
}

type lister struct {
	mu  sync.Mutex
	out io.Writer
	cfg ListerConfig
}

func (l *lister) send(v any) {
	b, _ := json.Marshal(v)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.out.Write(append(b, '\n'))
}

func (l *lister) result(id json.RawMessage, v any) {
	l.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": v})
}

func (l *lister) fail(id json.RawMessage, code int, msg string) {
	l.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
}

func (l *lister) text(id json.RawMessage, s string) {
	l.result(id, map[string]any{"content": []map[string]any{{"type": "text", "text": s}}})
}

func (l *lister) tools() []string {
	b, err := os.ReadFile(filepath.Join(l.cfg.Dir, "tools"))
	if err != nil {
		return ListerTools
	}
	return strings.Fields(string(b))
}

func (l *lister) handle(line []byte) {
	var m msg
	if err := json.Unmarshal(line, &m); err != nil || m.Method == "" {
		return
	}
	switch m.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(m.Params, &p)
		l.result(m.ID, map[string]any{
			"protocolVersion": p.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": true}},
			"serverInfo":      map[string]any{"name": "lister", "version": "1"},
		})
	case "server/discover":
		l.result(m.ID, map[string]any{
			"resultType": "complete", "supportedVersions": []string{"2026-07-28"},
			"capabilities": map[string]any{"tools": map[string]any{"listChanged": true}},
			"_meta":        map[string]any{"io.modelcontextprotocol/serverInfo": map[string]any{"name": "lister", "version": "1"}},
		})
	case "tools/list":
		l.list(m)
	case "tools/call":
		l.call(m)
	case "ping":
		l.result(m.ID, map[string]any{})
	default:
		if m.ID != nil {
			l.fail(m.ID, -32601, "no method "+m.Method)
		}
	}
}

func (l *lister) list(m msg) {
	var p struct {
		Cursor *string `json:"cursor"`
	}
	_ = json.Unmarshal(m.Params, &p)
	f, err := os.OpenFile(filepath.Join(l.cfg.Dir, "lists"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		_, _ = f.WriteString("list\n")
		_ = f.Close()
	}
	tools := l.tools()
	from := 0
	if p.Cursor != nil {
		n, err := strconv.Atoi(*p.Cursor)
		if err != nil || n <= 0 || n >= len(tools) {
			l.fail(m.ID, -32602, "invalid cursor")
			return
		}
		from = n
	}
	to := min(from+ListerPage, len(tools))
	page := []map[string]any{}
	for _, t := range tools[from:to] {
		page = append(page, map[string]any{"name": t, "inputSchema": map[string]any{"type": "object"}})
	}
	res := map[string]any{"tools": page}
	if to < len(tools) {
		res["nextCursor"] = strconv.Itoa(to)
	}
	if l.cfg.TTLMs >= 0 {
		res["ttlMs"] = l.cfg.TTLMs
	}
	if l.cfg.Scope != "" {
		res["cacheScope"] = l.cfg.Scope
	}
	if strings.Contains(string(m.Params), `"io.modelcontextprotocol/protocolVersion"`) {
		res["resultType"] = "complete"
	}
	l.result(m.ID, res)
}

func (l *lister) call(m msg) {
	var p struct {
		Name      string `json:"name"`
		Arguments struct {
			Name string `json:"name"`
		} `json:"arguments"`
	}
	_ = json.Unmarshal(m.Params, &p)
	switch p.Name {
	case "grow":
		tools := append(l.tools(), p.Arguments.Name)
		if err := os.WriteFile(filepath.Join(l.cfg.Dir, "tools"), []byte(strings.Join(tools, "\n")+"\n"), 0o600); err != nil {
			l.fail(m.ID, -32603, err.Error())
			return
		}
		l.text(m.ID, strings.Join(tools, " "))
	case "announce":
		l.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
		l.text(m.ID, "announced")
	case "listed":
		b, _ := os.ReadFile(filepath.Join(l.cfg.Dir, "lists"))
		l.text(m.ID, fmt.Sprint(bytes.Count(b, []byte("\n"))))
	default:
		l.fail(m.ID, -32602, "no tool "+p.Name)
	}
}
