package seccomp

import "errors"

// ErrUnsupported means this build or architecture has no filter table: the
// wall's tier is then walled-noseccomp.
var ErrUnsupported = errors.New("seccomp: no filter table for this architecture")
