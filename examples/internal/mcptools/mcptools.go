// Package mcptools holds the tools the example MCP server vats share.
//
// They are add, and count, a count kept in the vat's data folder.
package mcptools

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type addArgs struct {
	A float64 `json:"a" jsonschema:"the first number"`
	B float64 `json:"b" jsonschema:"the second number"`
}

type sum struct {
	Sum float64 `json:"sum"`
}

func add(_ context.Context, _ *mcp.CallToolRequest, a addArgs) (*mcp.CallToolResult, sum, error) {
	return nil, sum{a.A + a.B}, nil
}

// counter keeps its count in a file of the vat's data folder, which
// sessions, restarts and upgrades share.
type counter struct {
	mu   sync.Mutex
	path string
}

func (c *counter) count(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	if b, err := os.ReadFile(c.path); err == nil {
		n, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	n++
	if err := os.WriteFile(c.path, []byte(strconv.Itoa(n)), 0o600); err != nil {
		return nil, nil, err
	}
	return nil, map[string]int{"count": n}, nil
}

// Add registers add and count on server, count keeping its file in data.
func Add(server *mcp.Server, data string) {
	mcp.AddTool(server, &mcp.Tool{Name: "add", Description: "Adds two numbers"}, add)
	c := &counter{path: filepath.Join(data, "count")}
	mcp.AddTool(server, &mcp.Tool{Name: "count", Description: "Counts its calls, across sessions and restarts"}, c.count)
}
