package entry

import (
	"errors"

	"toybox/labels"
)

// Errors. A refusal is a labels.Refusal: it matches labels.ErrRefused.
var (
	// ErrNoGrant: the vat has no Handle at all.
	ErrNoGrant = labels.Refuse("this vat has no egress grant")
	// ErrBadRequest: the client spoke something the proxy does not serve.
	ErrBadRequest = errors.New("bad proxy request")
	// ErrUnsupported: the entry only runs on Linux.
	ErrUnsupported = errors.New("toybox-entry runs only on linux")
)
