package labels

import "errors"

var (
	// ErrBadLabel is wrapped by every parse and validation error. The
	// wrapping error names the problem (unknown key "x", empty host,
	// port 0 out of range, ...).
	ErrBadLabel = errors.New("bad label")

	// ErrConflict is wrapped when two label sets set the same key to
	// different values, so no request could satisfy both.
	ErrConflict = errors.New("labels conflict")

	// ErrWiden is wrapped when a constraint would widen a handle: a public
	// handle asked to become local.
	ErrWiden = errors.New("labels would widen the handle")
)
