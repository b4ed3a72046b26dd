// Package owner is the listener-owner check.
//
// Before a local handle dials a loopback address (or one of this host's own
// addresses), it asks the kernel who holds the listening socket there
// (/proc/net/tcp, /proc/net/tcp6, /proc/*/fd) and, for a root-owned socket,
// asks the Docker Engine which running container publishes it and to which
// compose project that container belongs. A port reaches a vat only when it
// is that vat's own service (a process of the toybox user outside toybox's
// own tree, for an address the owner typed) or a port its own compose
// project (or an operator-named exception) publishes. Everything else —
// nothing listening, the supervisor, the switchboard, a wall, a root daemon,
// another vat's container, another user, any error — is refused with a
// specific reason.
//
// The judgement itself (Judge) is a pure function of gathered Facts; Checker
// gathers them, caches each decision for at most two seconds, and adapts to
// the switchboard's hook (LoopbackFunc).
//
// What the process running the check needs:
//   - the host's network namespace (it asks the kernel for its own
//     namespace's listening sockets: netlink sock_diag, or /proc/net/tcp
//     where an AF_NETLINK socket is refused);
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
// Cost: the listening sockets are asked of sock_diag for the LISTEN state
// only, so the kernel walks its listening table alone: about 0.1 ms whatever
// the host's connections (/proc/net/tcp, the fallback, lists every TCP
// socket of the namespace, time-wait ones included: 10 to 150 ms here on an
// idle or busy host). Finding holders, done only when something listens on
// the target, reads every process's descriptor table: a few ms, tens with
// thousands of connections. These looks at the host, and the question to
// Docker, are shared: each is made once for every uncached check asked
// within SnapshotWindow (100 ms, or the cache TTL if shorter), one at a time,
// so a burst of checks of new addresses costs about one look, not one each
// (see Checker). A decision rests on no look begun more than the window
// before it was asked, and is cached from the oldest look it rests on: a
// port that changes hands within the window may be judged on the look
// before, the trade-off the decision cache makes for its TTL.
//
// The manifest-defaults rule (a loopback default in a manifest is granted
// only when the vat's own compose file publishes that port on 127.0.0.1 over
// TCP) is the supervisor's, in package toybox/vat/compose.
package owner
