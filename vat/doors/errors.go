package doors

import "errors"

// Errors. Every refusal wraps one of these and says why after the colon.
var (
	// ErrRefused: a call was not admitted ("door refused: ...").
	ErrRefused = errors.New("door refused")
	// ErrRevoked: the grant the capability came from was revoked
	// ("door revoked: vat kiosk stopped").
	ErrRevoked = errors.New("door revoked")
	// ErrFailed: an admitted call could not be completed by the backend
	// ("door failed: ...").
	ErrFailed = errors.New("door failed")
	// ErrInstallRefused: a manifest names doors it may not have
	// ("doors refused: ...").
	ErrInstallRefused = errors.New("doors refused")
	// ErrBadTable: the operator's door table is malformed or unsafe
	// ("bad door table: ...").
	ErrBadTable = errors.New("bad door table")
)
