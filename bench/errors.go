package bench

import "errors"

// ErrUnsupported is returned where the benchmarks need Linux (/proc,
// bubblewrap).
var ErrUnsupported = errors.New("the benchmarks run on Linux only")
