// Package owner is the listener-owner check: before a local handle dials a
// loopback address (or one of this host's own addresses), it asks the
// kernel who holds the listening socket there (/proc/net/tcp,
// /proc/net/tcp6, /proc/*/fd) and, for a root-owned socket, asks the Docker
// Engine which running container publishes it and to which compose project
// that container belongs. A port reaches a vat only when it is that vat's
// own service (a process of the toybox user outside toybox's own tree, for
// an address the owner typed) or a port its own compose project (or an
// operator-named exception) publishes. Everything else — nothing listening,
// the supervisor, the switchboard, a wall, a root daemon, another vat's
// container, another user, any error — is refused with a specific reason.
//
// The judgement itself (Judge) is a pure function of gathered Facts; Checker
// gathers them, caches each decision for at most two seconds, and adapts to
// the switchboard's hook (LoopbackFunc).
//
// What the process running the check needs:
//   - the host's network namespace (it reads its own /proc/net/tcp);
//   - to read /proc/<pid>/fd of the toybox user's processes: run it as that
//     user or as root. Where it cannot see a process (hidepid,
//     ProtectProc=invisible, another pid namespace), a socket of the toybox
//     user maps to no process and is refused. A process of the toybox user
//     whose descriptors it cannot read (not dumpable) refuses every socket
//     of that user. Holders of other users it cannot see are not judged: a
//     socket of the toybox user handed to a root process is judged by its
//     visible holders only.
//   - the Docker Engine API (GET /containers/json) on DockerHost; without
//     it every root-owned listener is refused.
//
// A docker daemon run with --userland-proxy=false publishes ports with NAT
// rules and no listening socket: such a port reads as "nothing listens" and
// is refused.
//
// Cost: reading /proc/net/tcp is linear in every TCP socket of the namespace
// (time-wait ones included, about 7µs each here), and finding holders reads
// every process's descriptor table; an uncached decision on a busy host can
// take tens of milliseconds.
//
// The manifest-defaults rule (a loopback default in a manifest is granted
// only when the vat's own compose file publishes that port on 127.0.0.1 over
// TCP) is the supervisor's, in package toybox/vat/compose.
package owner
