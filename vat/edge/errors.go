package edge

import "errors"

// ErrBadHost: a public name the operator gave cannot be served (a port, a
// path, a wildcard, a malformed name).
var ErrBadHost = errors.New("bad public host")
