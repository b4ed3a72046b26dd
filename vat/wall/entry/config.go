package entry

import (
	"log/slog"
	"os"
)

// Config is one entry's work.
type Config struct {
	// ID is the vat's id (for log records).
	ID string
	// Cap is the entry's capability socket (serves the Vat bootstrap). If
	// nil, the vat has no way out: no proxy, no forwards. Run takes
	// ownership.
	Cap *os.File
	// AppCap becomes the app's fd 3. Run takes ownership.
	AppCap *os.File
	// ProxyPort is the CONNECT proxy's port on 127.0.0.1. If zero, no proxy.
	ProxyPort int
	// Forwards are the loopback ports served on 127.0.0.1.
	Forwards []Forward
	// Argv is the app's command; Argv[0] is an absolute path.
	Argv []string
	// Logger receives one record per connection decision. If nil, discard.
	Logger *slog.Logger
}

// Forward serves Port on 127.0.0.1 and connects each accepted connection to
// Host:TargetPort through the Handle.
type Forward struct {
	Port       uint16
	Host       string
	TargetPort uint16
}
