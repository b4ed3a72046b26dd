package manifest

import "errors"

// Errors.
var (
	ErrBadManifest = errors.New("bad manifest")
	ErrBadGrant    = errors.New("bad grant")
)
