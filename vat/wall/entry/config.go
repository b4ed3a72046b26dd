package entry

import (
	"log/slog"
	"os"
	"slices"
	"time"

	"toybox/vat/mcp"
	"toybox/vat/mcp/bridge"
)

// Config is one entry's work.
type Config struct {
	// ID is the vat's id (for log records).
	ID string
	// Cap is the entry's capability socket (serves the Vat bootstrap). If
	// nil, the vat has no way out: no proxy, no forwards. Run takes
	// ownership.
	Cap *os.File
	// App is the pid of the app, which toybox-entry's launcher started
	// before the Go runtime did (it is this process's child).
	App int
	// Listeners are the loopback ports the launcher bound for
	// ProxyPort and Forwards. Run takes ownership.
	Listeners *Listeners
	// ProxyPort is the CONNECT proxy's port on 127.0.0.1. If zero, no proxy.
	ProxyPort int
	// Forwards are the loopback ports served on 127.0.0.1.
	Forwards []Forward
	// MaxConns bounds the connections the proxy, the forwards and
	// transparent egress (each socket put in place, until the app closes
	// it) hold open together; past it a proxy client is answered 503 and
	// a connect() is refused (ECONNREFUSED), each with the reason logged.
	// If zero, as many as the soft RLIMIT_NOFILE allows beside the entry's
	// own descriptors (read at each connection).
	MaxConns int
	// Logger receives one record per connection decision. If nil, discard.
	Logger *slog.Logger
	// Listen, when set, relays $TOYBOX_LISTEN to the app's own TCP port
	// through the launcher's relay (Run takes ownership). If nil, the
	// app listens on $TOYBOX_LISTEN itself.
	Listen *Listen
	// MCP makes the entry a stdio MCP vat's bridge (RunMCP): no app runs
	// at start; the bridge starts the app's command per session.
	MCP *MCP
}

// MCP is a stdio MCP vat's bridge.
type MCP struct {
	// Listener is the bridge's listening socket, made by the supervisor
	// outside the wall; only the supervisor reaches it. RunMCP takes
	// ownership.
	Listener *os.File
	// Spawner is the launcher's spawner's socket, SpawnerPid its pid.
	// RunMCP takes ownership.
	Spawner    *os.File
	SpawnerPid int
	// Mode, Era, MaxProcs and Idle are the bridge's (bridge.Config).
	Mode     bridge.Mode
	Era      mcp.Era
	MaxProcs int
	Idle     time.Duration
	// Logger receives the bridge's decisions (JSON). If nil, discard.
	Logger *slog.Logger
}

// Listen is an app that listens on a TCP port of the wall's loopback.
type Listen struct {
	// Port is the app's port ($PORT).
	Port int
	// Relay is the launcher's relay's socket, RelayPid its pid. The relay
	// makes $TOYBOX_LISTEN once the port accepts, hands its listening
	// socket over, and connects to the port for each connection.
	Relay    *os.File
	RelayPid int
}

// Forward serves Port on 127.0.0.1 and connects each accepted connection to
// Host:TargetPort through the Handle.
type Forward struct {
	Port       uint16
	Host       string
	TargetPort uint16
}

// Listeners are the wall's loopback ports, bound (blocking, close-on-exec)
// by the launcher before the app started. serveNet makes them net.Listeners
// once the app runs.
type Listeners struct {
	Forwards []*os.File // one per Config.Forwards, in order
	Proxy    *os.File   // nil when Config.ProxyPort is 0
	// Transparent egress (nil: the proxy alone): the app's seccomp
	// notification listener, the DNS stub's UDP socket and the
	// connector's socket. NotifyErr says why the kernel gave no
	// listener when one was asked for (the wall runs with the proxy
	// alone then). DNSTCP is the stub's TCP socket, listening; Scheme
	// the listener a connect granted under another scheme alone (http,
	// https) is put through.
	Notify, DNS, DNSTCP, Scheme, Connector *os.File
	NotifyErr                              error
	// Pending is a notification the launcher received from Notify before
	// the Go half ran and left to it (struct seccomp_notif, nil: none);
	// EarlyRefused counts the binds and listens it refused meanwhile.
	Pending      []byte
	EarlyRefused int
	// EarlyListened are the TCP ports the app listened on before the Go
	// half ran, all of them unless EarlyListenedAll (the launcher could
	// not keep them all).
	EarlyListened    []uint16
	EarlyListenedAll bool
}

func (ls *Listeners) close() {
	for _, f := range append(slices.Clone(ls.Forwards), ls.Proxy, ls.Notify, ls.DNS, ls.DNSTCP, ls.Scheme, ls.Connector) {
		if f != nil {
			_ = f.Close()
		}
	}
}

// MaxForwards is how many ports one wall may forward (toybox-entry's
// launcher holds that many listening sockets).
const MaxForwards = 256

// ForwardHostOK reports whether host may name a forward's target: 1 to 253
// bytes of ASCII letters, digits, '.', '-', '_' and ':' (a DNS name, an IPv4
// address or an IPv6 address without brackets). toybox-entry's launcher,
// which is C and runs before the app, applies the same rule byte for byte,
// so that nothing it lets start is refused afterwards.
func ForwardHostOK(host string) bool {
	if host == "" || len(host) > 253 {
		return false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == ':') {
			return false
		}
	}
	return true
}
