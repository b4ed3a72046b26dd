// Package mcp holds the pure pieces of toybox's MCP bridge.
//
// They include reading a JSON-RPC message without re-encoding it, replacing its id and
// other values in place, newline framing with no 64 KiB limit, the protocol
// eras and their header checks, session and event ids. It does no I/O beyond
// reading the io.Reader it is given.
package mcp
