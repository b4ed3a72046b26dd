package store

import "errors"

// Errors. Every one of them means nothing was stored or changed.
var (
	ErrNoStateDir     = errors.New("no state directory")
	ErrBadBundle      = errors.New("bad bundle")
	ErrTooLarge       = errors.New("too large")
	ErrDigestMismatch = errors.New("digest mismatch")
	ErrBadID          = errors.New("bad vat id")
	ErrNoCode         = errors.New("no such code")
	ErrBadState       = errors.New("bad state directory")
)
