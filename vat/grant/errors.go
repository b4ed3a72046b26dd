package grant

import "errors"

// Errors.
var (
	ErrClosed  = errors.New("the supervisor's switchboard connection is closed")
	ErrRevoked = errors.New("revoked")
	ErrBusy    = errors.New("too many egress calls in flight for this vat")
	ErrSockets = errors.New("too many relayed sockets open for this vat")
)
