package switches

import "errors"

// Errors.
var (
	ErrBadSwitch  = errors.New("unknown switch value")
	ErrNoStateDir = errors.New("no state directory for the owner's choices")
	ErrBadTable   = errors.New("the operator's table is refused")
)
