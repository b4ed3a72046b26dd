package mcp

import "errors"

// Errors.
var (
	// ErrNotJSON: a line that is not JSON at all (a banner, npm's notices).
	ErrNotJSON = errors.New("not JSON")
	// ErrNotJSONRPC: JSON that is not one JSON-RPC 2.0 message, or one
	// that a receiver could read two ways.
	ErrNotJSONRPC = errors.New("not a JSON-RPC message")
)
