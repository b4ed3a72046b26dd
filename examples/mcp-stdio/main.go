// Command mcp-stdio is an MCP server vat that speaks stdio.
//
// It is the official Go SDK's server on stdin and stdout, as most MCP
// servers are.
// toybox-entry bridges it inside its wall, and toybox serves it to MCP
// clients at /<vat>/mcp (docs/mcp.md). Its tools:
//
//   - add: the sum of two numbers;
//   - count: a count kept in $TOYBOX_DATA/count, one more each call, across
//     sessions and restarts (each session has a process of its own);
//   - key: which $API_KEY this process holds, as the start of its SHA-256
//     (never the key). Given per token (docs/mcp.md, "secrets per token"),
//     each client's processes hold only that client's key.
//
// Install it as a single executable with ?mcp=stdio.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"toybox/examples/internal/mcptools"
)

func main() {
	data := os.Getenv("TOYBOX_DATA")
	if data == "" {
		data = "."
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "toybox-example-mcp-stdio", Version: "1.0.0"}, nil)
	mcptools.Add(server, data)
	mcp.AddTool(server, &mcp.Tool{Name: "key", Description: "Which API key this server holds: the start of its SHA-256, or none"}, key)
	// Logs go to stderr: stdout is the protocol's.
	log.SetOutput(os.Stderr)
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}

type keyResult struct {
	// SHA256 is the first 12 hex digits of the key's SHA-256; "" for no key.
	SHA256 string `json:"sha256"`
}

func key(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, keyResult, error) {
	k := os.Getenv("API_KEY")
	if k == "" {
		return nil, keyResult{}, nil
	}
	sum := sha256.Sum256([]byte(k))
	return nil, keyResult{SHA256: hex.EncodeToString(sum[:6])}, nil
}
