package sockpair

import "errors"

// ErrUnsupported is returned by Pair off Linux: the far end's autobound
// abstract name is a Linux feature.
var ErrUnsupported = errors.New("sockpair: socket pairs for children need linux")
