package manifest

import "errors"

// Errors.
var (
	ErrBadManifest = errors.New("bad manifest")
	ErrBadGrant    = errors.New("bad grant")
	// ErrBadMCP is a bad mcp key (or ?mcp=); a manifest's also wraps
	// ErrBadManifest.
	ErrBadMCP = errors.New("bad mcp")
)
