// Command mcpfetch is a stdio MCP server whose tool fetches a URL.
// Its one tool, fetch, GETs the URL with Go's net/http and no proxy at all
// (Transport.Proxy nil). From inside a wall it gets out only if its plain
// connect() does. It answers the body, or the error's text.
package main

import (
	"context"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type fetchArgs struct {
	URL string `json:"url" jsonschema:"the URL to GET"`
}

type fetched struct {
	Body  string `json:"body,omitempty"`
	Error string `json:"error,omitempty"`
}

func fetch(ctx context.Context, _ *mcp.CallToolRequest, a fetchArgs) (*mcp.CallToolResult, fetched, error) {
	c := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 20 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	if err != nil {
		return nil, fetched{Error: err.Error()}, nil
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fetched{Error: err.Error()}, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fetched{Error: err.Error()}, nil
	}
	return nil, fetched{Body: string(b)}, nil
}

func main() {
	server := mcp.NewServer(&mcp.Implementation{Name: "toybox-test-mcpfetch", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "fetch", Description: "GETs a URL without a proxy"}, fetch)
	log.SetOutput(os.Stderr)
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
