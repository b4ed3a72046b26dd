// Package owner is the listener-owner check: before a local handle dials a
// loopback address, it asks the kernel who holds the listening socket there
// (/proc/net/tcp, /proc/net/tcp6, /proc/*/fd) and, for a root-owned socket,
// asks the Docker Engine which running container publishes it and to which
// compose project that container belongs. A loopback port reaches a vat only
// when it is that vat's own service (a process of the toybox user outside
// toybox's own tree, for an address the owner typed) or a port its own compose
// project (or an operator-named exception) publishes. Everything else —
// nothing listening, the supervisor, the switchboard, a wall, a root daemon,
// another vat's container, another user, any error — is refused with a
// specific reason.
//
// The package also holds the manifest-defaults rule as a pure function,
// ComposePublishes: a loopback default in a manifest is granted only when the
// vat's own compose file publishes that port on 127.0.0.1 over TCP.
package owner
