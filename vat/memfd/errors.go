package memfd

import "errors"

// ErrUnsupported is returned off Linux, which alone has memfd_create.
var ErrUnsupported = errors.New("memfd: in-memory files need linux")
