package schema

import "errors"

// ErrHeaders is the error of headers a peer sent past MaxHeaders or
// MaxHeaderBytes, or that cannot be read.
var ErrHeaders = errors.New("bad headers")
