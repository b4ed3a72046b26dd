// Package front is the MCP edge's protocol side, kept free of the
// supervisor.
//
// It decides who may ask (the Host and Origin rules). It reads what a
// request says (its method, id and era) and chooses which headers cross
// into a vat and back. It writes the JSON-RPC errors the edge answers
// itself. Its probe records a server's era, serverInfo and tools at
// install. See docs/mcp.md.
package front
