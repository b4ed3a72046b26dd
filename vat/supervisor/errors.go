package supervisor

import (
	"errors"
	"fmt"
)

// Errors.
var (
	ErrNoVat       = errors.New("no such vat")
	ErrBadInput    = errors.New("bad input")
	ErrNotReady    = errors.New("the app did not start listening")
	ErrShutdown    = errors.New("the supervisor is stopping")
	ErrUnsupported = errors.New("the supervisor runs only on linux")
	// ErrAppSocket: the app's socket is not one (a symlink the vat put in
	// its run folder, say); the supervisor does not connect.
	ErrAppSocket = errors.New("not connecting to the app")
	// ErrUpgradeRefused: the new version did not come up; the old one
	// is started again (the error says whether it came up).
	ErrUpgradeRefused = errors.New("upgrade refused")
	// ErrUpgradeFailed: the host failed the upgrade (its record could not
	// be saved); the old version is started again. Not the request's
	// fault.
	ErrUpgradeFailed = errors.New("upgrade failed")
	// ErrExists: an install of a new vat only (InstallRequest.OnlyNew)
	// found one installed under its id; nothing changed.
	ErrExists = errors.New("already installed")
	// ErrPrepareFull: a package install wrote more than its prepare
	// folder holds (PackagesConfig.PrepareBytes).
	ErrPrepareFull = errors.New("the prepare folder is full")
	// ErrBusy: a package install found as many installs preparing and
	// waiting their turn as the supervisor takes (PackagesConfig.Installs,
	// InstallQueue); nothing changed.
	ErrBusy = errors.New("too many package installs at once")
)

// prepareFullError: a package install filled its prepare folder, a file
// system of bytes.
type prepareFullError struct{ bytes int64 }

func (e *prepareFullError) Error() string {
	return fmt.Sprintf("the install wrote more than its %d MiB prepare folder holds", e.bytes>>20)
}

func (e *prepareFullError) Unwrap() error { return ErrPrepareFull }

// appSocketError: a vat's app.sock is not a socket (what it is instead);
// the supervisor does not connect to it.
type appSocketError struct {
	path string
	what string // "a symlink", "a folder", ...
}

func (e *appSocketError) Error() string {
	return fmt.Sprintf("%v: %s is %s, not a socket", ErrAppSocket, e.path, e.what)
}

func (e *appSocketError) Unwrap() error { return ErrAppSocket }
