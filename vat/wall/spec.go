// Package wall builds and starts the bubblewrap sandbox ("wall") a vat runs in.
//
// BuildPlan turns a Spec into a Plan: the mounts, the environment, the command.
// It reads the filesystem to resolve paths and find secrets, and changes nothing.
// Start renders the Plan as bwrap's options and descriptors, then launches it.
// It fails closed: a wall that cannot be built returns an error and nothing runs.
//
// A wall has new user, pid, ipc, uts, cgroup and network namespaces.
// Its network is loopback only.
// It has no capabilities and the seccomp filter of package seccomp.
// Its root is read-only, with the system folders and a few /etc files.
// passwd and group are made for the vat.
// Its code is read-only, its data folder read-write by fd.
// Its run folder is at /run/toybox.
// The owner's files are bound where the owner named them.
// Every .env and .mcp.json in a bound tree is masked.
// When the supervisor is root, bwrap runs as Spec.UID (65534 by default).
// So nothing in the wall maps onto host root.
//
// Descriptors: fdTable numbers everything bwrap inherits.
// toybox-entry is every wall's pid 1 (bubblewrap keeps no init of its own).
// It runs from its own descriptor.
// --cap-fd is its own capability, absent for a vat with no way out.
// --app-cap-fd is the app's, which it makes the app's fd 3.
// It serves the proxy. The app holds exactly fds 0-3.
//
// The files, by concern:
//   - policy.go: what every wall binds, shows in /etc and masks.
//   - plan.go: Spec to Plan. binds.go, hostbind.go: the binds and masks.
//   - env.go: the app's environment.
//   - etcview*.go, devdir_linux.go: the /etc view and /dev folder walls share.
//   - render_linux.go, gate_linux.go: bwrap's options, its fds, the seccomp pipe.
//   - start_linux.go: Start and its block. process_linux.go: Stop, Wait, reap.
//   - limits_linux.go: the cgroup, task limit and oom_score_adj.
//   - host.go: what one supervisor's walls share (Host).
package wall

import (
	"os"

	"toybox/labels"
	"toybox/vat/wall/cgroup"
)

// Tiers: how walled a running vat is. The supervisor's words module turns
// these into status words.
const (
	TierWalled          = "walled"
	TierWalledNoSeccomp = "walled-noseccomp"
)

// Spec is everything the supervisor knows about one spawn. CONTRACT between
// vat/wall (owner) and the supervisor: fields may be added; do not rename or
// remove without updating the supervisor.
type Spec struct {
	// ID is the vat's id, parsed where it entered (labels.ParseVatID).
	ID labels.VatID
	// InstallDir is the vat's code (<state>/code/<sha256> or an unpacked
	// bundle), bound read-only at its real path; the working directory.
	InstallDir string
	// Command is the argv. Command[0] is absolute, or relative to InstallDir.
	Command []string
	// DataDir is <state>/data/<id>, bound read-write by fd at its real path.
	// HOME and the cache variables point below it.
	DataDir string
	// RunDir is <state>/run/<id> (0700), bound as /run/toybox; the app
	// listens on /run/toybox/app.sock ($TOYBOX_LISTEN).
	RunDir string
	// Host is the state the supervisor's walls share (NewHost). Required:
	// BuildPlan and Start refuse a Spec without one.
	Host *Host
	// StateDir is the supervisor's state dir: never a bind source outside
	// this vat's own folders, masked wherever it sits inside a bound tree.
	StateDir string
	// Env holds the keys the manifest declares, with the owner's values.
	Env map[string]string
	// HostEnv is where the allowlisted slice (PATH, LANG, LC_*, TZ) is
	// taken from. If nil, os.Environ().
	HostEnv []string
	// Files are the owner-chosen binds (manifest sandbox.files), already
	// resolved to the values the owner typed.
	Files Files
	// Shares are the host folders this vat shares with the host (the
	// operator's table, never a manifest).
	Shares []Share
	// State are the host folders this vat keeps state in (the operator's
	// table, never a manifest): each a real folder, bound read-write by
	// fd at its path.
	State []string
	// OwnEnvFile binds <InstallDir>/.env read-only (manifest ownEnvFile).
	OwnEnvFile bool
	// Net is what toybox-entry serves on loopback inside the wall.
	Net Net
	// ListenPort, when not zero, is the app's TCP port on loopback
	// (1-65535; $PORT): the app listens there instead of on
	// $TOYBOX_LISTEN, and toybox-entry makes $TOYBOX_LISTEN once the port
	// accepts and relays each connection to it. It may be no port the
	// entry serves (a forward); the proxy's moves past it.
	ListenPort int
	// EntryPath is the host path of the toybox-entry binary, opened at
	// each spawn. Entry, if set, wins.
	EntryPath string
	// Entry is toybox-entry as the caller opened it once (OpenEntry): the
	// wall runs that file, whatever EntryPath names now. The caller keeps
	// it. If nil, the file at EntryPath.
	Entry *Entry
	// Bwrap is the bubblewrap binary the wall runs (toybox serve --bwrap).
	// If empty, bwrap on $PATH.
	Bwrap string
	// EntryCap is the entry's own capability socket (serves the Vat
	// bootstrap). AppCap becomes the app's fd 3. Start takes ownership of
	// both and closes its copies once the wall has them.
	EntryCap, AppCap *os.File
	// Stdout and Stderr receive the app's output. If nil, discarded.
	Stdout, Stderr *os.File
	// Inotify lets the wall use inotify (manifest sandbox.inotify); if
	// false, the seccomp filter refuses it (seccomp.Options).
	Inotify bool
	// NoSeccomp skips the seccomp filter (tier walled-noseccomp). Only where
	// the architecture has no table; never as a fallback after a failure.
	NoSeccomp bool
	// UID and GID are the host ids the wall runs as when the supervisor is
	// root (the app must never run as a uid mapped onto host root). If zero
	// and the supervisor is root, 65534.
	UID, GID int
	// CodeGroup, when positive and the supervisor is root, is a
	// supplementary group the wall keeps: the group stored code belongs to
	// (vat/store seals it 0640/0750, owner and group only).
	CodeGroup int
	// ScanLimit bounds the entries scanned for secrets in one bound tree;
	// a larger tree is not bound (the plan fails). If zero, MaxScanEntries.
	ScanLimit int
	// TmpBytes is the size of the wall's /tmp, a tmpfs: memory the vat can
	// fill, and no more. If zero, TmpBytes.
	TmpBytes int64
	// MaxTasks is the most tasks (processes and threads) the wall may have
	// at once: the app, its children and toybox-entry together. If zero,
	// MaxTasks.
	MaxTasks int
	// MCP, when set, makes the vat a stdio MCP server: toybox-entry runs
	// in every such wall (a vat with no way out included) and serves the
	// bridge on MCP.Listener, starting Command once per session; nothing
	// runs before the first client. Its processes hold fds 0-2 only (no
	// capability) and have no $TOYBOX_LISTEN.
	MCP *MCP
	// Cgroups makes the wall's cgroup, which holds it to Limits. If nil,
	// or where it makes none (Enabled), the wall has no cgroup of its own
	// (Process.Limits says none).
	Cgroups *cgroup.Host
	// Limits are what the wall's cgroup holds it to, where the host
	// enforces each; a zero field sets none. If Limits.Tasks is zero, the
	// wall's task limit (MaxTasks).
	Limits cgroup.Limits
}

// MCP is a stdio MCP vat's bridge (docs/mcp.md, "Bridge").
//
// CONTRACT between the wall (owner) and the supervisor: the supervisor
// makes Listener, a listening unix stream socket bound at a host path
// no wall shows (never in RunDir), and reaches the bridge there with plain
// HTTP: path /mcp, and the header Toybox-Principal on every request (its
// own value; a client's copy stripped). GET /toybox/mcp-stats answers the
// bridge's counters. No process in the wall can reach the socket: it is
// held by toybox-entry alone (not dumpable, its descriptors closed to
// the wall's processes), and its path is in no mount of the wall.
type MCP struct {
	// Listener is the bridge's listening socket. Start hands the wall a
	// duplicate; the caller keeps its own (connections wait in its
	// backlog across restarts).
	Listener *os.File
	// Mode is "session" (one process per session), "shared" (one per
	// principal) or "single" (one for all). If empty, "session".
	Mode string
	// Era is the vat's era from the install probe: "legacy", "modern" or
	// "dual". If empty, the bridge finds out on the first modern request.
	Era string
	// MaxProcs bounds the vat's processes. If zero, 8.
	MaxProcs int
	// IdleSeconds ends a session with no request for this long. If zero,
	// 600.
	IdleSeconds int
}

// OOMScoreAdj is every wall's oom_score_adj: above the supervisor's own
// (systemd's default is 0), so that when the host runs out of memory the
// kernel kills a vat's process first.
const OOMScoreAdj = 500

// The sizes of the tmpfs a wall gets. A tmpfs holds memory no process is
// charged for (the OOM killer would pick some other process while a wall's
// files stay), and without a size each one may take half the machine's
// memory: each has a size. A folder masked with a tmpfs holds one page.
const (
	TmpBytes    = 256 << 20 // /tmp (Spec.TmpBytes)
	VarTmpBytes = 64 << 20  // /var/tmp
	ShmBytes    = 64 << 20  // /dev/shm (Docker's default); /dev itself where it is a tmpfs
	MaskBytes   = 4096      // a masked folder
)

// MaxTasks is a wall's task limit by default: well above what an app with
// its helpers runs (a Go or Node server has about ten threads), far below
// the host's pids.
const MaxTasks = 1024

// Files are the owner-chosen files and folders a vat may see.
type Files struct {
	Read     []string // bound read-only
	Write    []string // bound read-write
	OAuthDir []string // folders bound read-write
}

// Net describes the loopback services toybox-entry runs inside the wall.
type Net struct {
	// None: the vat has no way out at all (no proxy, no forwards, and
	// no proxy variables). toybox-entry runs without a capability of its
	// own, and EntryCap is closed unused.
	None bool
	// ProxyPort is the HTTP CONNECT proxy's port on 127.0.0.1. If zero,
	// 39080 (bumped when a forwarded port needs it).
	ProxyPort int
	// Forwards are listed loopback ports forwarded through the Handle.
	Forwards []Forward
}

// Forward serves Port on 127.0.0.1 inside the wall and connects each
// accepted connection to Host:TargetPort through the vat's Handle.
type Forward struct {
	Port       uint16
	Host       string
	TargetPort uint16
}
