package grant

import "errors"

// Errors.
var (
	ErrClosed  = errors.New("the supervisor's switchboard connection is closed")
	ErrRevoked = errors.New("revoked")
	ErrBusy    = errors.New("too many egress calls in flight for this vat")
	ErrSockets = errors.New("too many relayed sockets open for this vat")
	// ErrRevokeUnconfirmed: SetGrants put the new grant in force, but the
	// switchboard did not answer the old handles' revocation in time, so
	// what was made through them may still stand.
	ErrRevokeUnconfirmed = errors.New("the switchboard did not confirm the revocation in time")
)
