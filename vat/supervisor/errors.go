package supervisor

import "errors"

// Errors.
var (
	ErrNoVat       = errors.New("no such vat")
	ErrBadInput    = errors.New("bad input")
	ErrNotReady    = errors.New("the app did not start listening")
	ErrShutdown    = errors.New("the supervisor is stopping")
	ErrUnsupported = errors.New("the supervisor runs only on linux")
	// ErrUpgradeRefused: the new version did not come up; the old one
	// runs again.
	ErrUpgradeRefused = errors.New("upgrade refused")
)
