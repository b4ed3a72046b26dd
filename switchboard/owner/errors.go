package owner

import "errors"

// ErrUnsupported is returned by New where the check cannot run (not Linux):
// without /proc there is no way to tell who holds a port, so nothing loopback
// may be admitted.
var ErrUnsupported = errors.New("listener-owner check: unsupported on this platform")

// ErrConfig is wrapped by every error New returns for a Config it refuses.
var ErrConfig = errors.New("listener-owner check: invalid config")

// ErrProcNet is wrapped by every error ParseProcNet returns.
var ErrProcNet = errors.New("malformed /proc/net/tcp table")
