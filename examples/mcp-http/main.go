// Command mcp-http is an MCP server vat that serves Streamable HTTP.
//
// It is the official Go SDK's handler at /mcp on the unix socket $TOYBOX_LISTEN,
// or, installed with ?listen=N (a manifest's "listen"), on the TCP port
// $PORT, as most HTTP MCP servers do. toybox serves it to MCP clients at
// /<vat>/mcp, after its edge checks (docs/mcp.md). Its tools:
//
//   - add: the sum of two numbers;
//   - count: a count kept in $TOYBOX_DATA/count, one more each call;
//   - whoami: who toybox says asks (the Toybox-Principal header) and every
//     header that reached the vat: what crosses the edge, and nothing else.
//
// Install it as a single executable with ?mcp=http.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"toybox/examples/internal/mcptools"
)

func whoami(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "principal: %s\n", req.Extra.Header.Get("Toybox-Principal"))
	if u := os.Getenv("MCP_PUBLIC_URL"); u != "" {
		fmt.Fprintf(&b, "public url: %s\n", u) // told to an mcp.auth "vat" server
	}
	keys := make([]string, 0, len(req.Extra.Header))
	for k := range req.Extra.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(req.Extra.Header[k], ", "))
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, nil, nil
}

func main() {
	sock, port, data := os.Getenv("TOYBOX_LISTEN"), os.Getenv("PORT"), os.Getenv("TOYBOX_DATA")
	if (sock == "" && port == "") || data == "" {
		log.Fatal("mcp-http runs as a toybox vat: $TOYBOX_LISTEN (or $PORT) and $TOYBOX_DATA are not set")
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "toybox-example-mcp-http", Version: "1.0.0"}, nil)
	mcptools.Add(server, data)
	mcp.AddTool(server, &mcp.Tool{Name: "whoami", Description: "Says who toybox says asks, and which headers reached the vat"}, whoami)

	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	if sock == "" {
		mcptools.Serve("tcp", net.JoinHostPort("127.0.0.1", port), mux)
		return
	}
	mcptools.ServeUnix(sock, mux)
}
