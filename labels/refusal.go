package labels

import (
	"errors"
	"fmt"
	"strings"
)

// RefusedPrefix starts the text of every refusal, on the wire and in logs.
// Clients and tests read it: it never changes.
const RefusedPrefix = "egress refused: "

// ErrRefused is matched (errors.Is) by every Refusal.
var ErrRefused = errors.New("egress refused")

// Refusal is an egress refusal. Its text is RefusedPrefix and the reason.
// The switchboard, the supervisor and toybox-entry all refuse with it.
type Refusal struct {
	// Reason says why, in words a person can act on. It carries no
	// RefusedPrefix.
	Reason string
	err    error // the error the reason was formatted from, if any
}

// Error returns RefusedPrefix and the reason.
func (r *Refusal) Error() string { return RefusedPrefix + r.Reason }

// Is reports whether target is ErrRefused.
func (r *Refusal) Is(target error) bool { return target == ErrRefused }

// Unwrap returns the error Refusef formatted the reason from, or nil.
func (r *Refusal) Unwrap() error { return r.err }

// Refuse returns a refusal for reason.
func Refuse(reason string) error { return &Refusal{Reason: reason} }

// Refusef returns a refusal whose reason is formatted as fmt.Errorf
// formats: an error given with %w stays reachable with errors.Is and As.
func Refusef(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Refusal{Reason: err.Error(), err: err}
}

// RefusalReason returns the reason of the refusal err carries, and whether
// it carries one. A refusal that crossed a Cap'n Proto connection arrives
// as text, often inside the transport's own words ("remote error: egress
// refused: ..."). Its reason is what follows the first RefusedPrefix.
func RefusalReason(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	if r, ok := errors.AsType[*Refusal](err); ok {
		return r.Reason, true
	}
	return RefusalText(err.Error())
}

// RefusalText returns the reason in msg, the text of an error that may
// carry a refusal, and whether it carries one.
func RefusalText(msg string) (string, bool) {
	if _, reason, ok := strings.Cut(msg, RefusedPrefix); ok {
		return reason, true
	}
	return "", false
}
