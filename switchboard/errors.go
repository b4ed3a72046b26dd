package switchboard

import "errors"

// Errors.
var (
	// ErrRevoked is wrapped when a handle (or one it derives from) was
	// released, or its connection closed.
	ErrRevoked = errors.New("handle revoked")
	// ErrLimit is wrapped when a peer exceeds a per-connection limit.
	ErrLimit = errors.New("per-connection limit reached")
	// ErrResolve is wrapped when a name cannot be resolved.
	ErrResolve = errors.New("name resolution failed")
	// ErrConfig is wrapped by configuration errors.
	ErrConfig = errors.New("bad switchboard config")
	// ErrUnsupported is returned where the platform lacks what the
	// switchboard needs (fd passing and shutdown tracking are Linux only).
	ErrUnsupported = errors.New("switchboard: unsupported on this platform")
)
