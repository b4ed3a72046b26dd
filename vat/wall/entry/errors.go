package entry

import "errors"

// Errors.
var (
	// ErrRefused: the Handle refused a connection; the text that follows
	// starts "egress refused:".
	ErrRefused = errors.New("egress refused")
	// ErrNoGrant: the vat has no Handle at all.
	ErrNoGrant = errors.New("egress refused: this vat has no egress grant")
	// ErrBadRequest: the client spoke something the proxy does not serve.
	ErrBadRequest = errors.New("bad proxy request")
	// ErrUnsupported: the entry only runs on Linux.
	ErrUnsupported = errors.New("toybox-entry runs only on linux")
)
