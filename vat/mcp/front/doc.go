// Package front is the MCP edge's protocol side, kept free of the
// supervisor: who may ask (the Host and Origin rules), what a request says
// (its method, id and era), which headers cross into a vat and back, the
// JSON-RPC errors the edge answers itself, and the probe that records a
// server's era, serverInfo and tools at install. See docs/mcp.md.
package front
