package manifest

import "errors"

// Errors.
var (
	ErrBadManifest = errors.New("bad manifest")
	ErrBadGrant    = errors.New("bad grant")
	// ErrBadMCP is a bad mcp key (or ?mcp=); a manifest's also wraps
	// ErrBadManifest.
	ErrBadMCP = errors.New("bad mcp")
	// ErrBadListen is a bad listen key (or ?listen=); a manifest's also
	// wraps ErrBadManifest.
	ErrBadListen = errors.New("bad listen")
)
