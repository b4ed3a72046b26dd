// Command mcp-stdio is an MCP server vat that speaks stdio.
//
// It is the official Go SDK's server on stdin and stdout, as most MCP
// servers are.
// toybox-entry bridges it inside its wall, and toybox serves it to MCP
// clients at /<vat>/mcp (docs/mcp.md). Its tools:
//
//   - add: the sum of two numbers;
//   - count: a count kept in $TOYBOX_DATA/count, one more each call, across
//     sessions and restarts (each session has a process of its own).
//
// Install it as a single executable with ?mcp=stdio.
package main

import (
	"context"
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
	// Logs go to stderr: stdout is the protocol's.
	log.SetOutput(os.Stderr)
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
