// Command benchmcp is the MCP server the benchmarks measure.
//
// It is the Go SDK's server with one tool, add {a, b}.
//
//	benchmcp                serves MCP on stdin and stdout (a stdio vat)
//	benchmcp -listen PATH   serves Streamable HTTP at /mcp on the unix
//	                        socket PATH (the same server over its own
//	                        HTTP transport: the baseline)
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type addArgs struct {
	A int `json:"a"`
	B int `json:"b"`
}

type addResult struct {
	Sum int `json:"sum"`
}

func add(_ context.Context, _ *mcp.CallToolRequest, in addArgs) (*mcp.CallToolResult, addResult, error) {
	return nil, addResult{Sum: in.A + in.B}, nil
}

func main() {
	listen := flag.String("listen", "", "serve Streamable HTTP on this unix socket instead of stdio")
	flag.Parse()
	log.SetOutput(os.Stderr)
	server := mcp.NewServer(&mcp.Implementation{Name: "toybox-benchmcp", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "add", Description: "Adds two integers"}, add)
	if *listen == "" {
		if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			log.Fatal(err)
		}
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	l, err := net.Listen("unix", *listen)
	if err != nil {
		log.Fatal(err)
	}
	// SIGTERM ends it (the runner's stop): nothing is kept to flush.
	log.Fatal(http.Serve(l, mux))
}
