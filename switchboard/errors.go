package switchboard

import (
	"errors"
	"fmt"
)

// Errors.
var (
	// ErrRefused is wrapped by every refusal; the text of a refusal starts
	// with RefusedPrefix.
	ErrRefused = errors.New("egress refused")
	// ErrRevoked is wrapped when a handle (or one it derives from) was
	// released, or its connection closed.
	ErrRevoked = errors.New("handle revoked")
	// ErrLimit is wrapped when a peer exceeds a per-connection limit.
	ErrLimit = errors.New("per-connection limit reached")
	// ErrResolve is wrapped when a name cannot be resolved.
	ErrResolve = errors.New("name resolution failed")
	// ErrConfig is wrapped by configuration errors.
	ErrConfig = errors.New("bad switchboard config")
	// ErrUnsupported is returned where the platform lacks what the
	// switchboard needs (fd passing and shutdown tracking are Linux only).
	ErrUnsupported = errors.New("switchboard: unsupported on this platform")
)

// RefusedPrefix starts the text of every refusal.
const RefusedPrefix = "egress refused: "

// refusal is an error whose text is RefusedPrefix + reason.
type refusal struct{ reason string }

func (r *refusal) Error() string        { return RefusedPrefix + r.reason }
func (r *refusal) Is(target error) bool { return target == ErrRefused }

func refuse(format string, args ...any) error {
	return &refusal{reason: fmt.Sprintf(format, args...)}
}
