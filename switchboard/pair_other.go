//go:build !linux

package switchboard

import "os"

func streamPair() (mine, theirs *os.File, err error) { return nil, nil, ErrUnsupported }
