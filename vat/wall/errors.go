package wall

import "errors"

// Sentinels. Every error Start or BuildPlan returns wraps one of these (or a
// system error) and says what failed.
var (
	// ErrSpec: the Spec is incomplete or malformed.
	ErrSpec = errors.New("invalid wall spec")
	// ErrRefusedBind: a path may never be a bind source (the state dir,
	// another vat's data, a .env, a hidden entry of a home, ...).
	ErrRefusedBind = errors.New("refused bind")
	// ErrSymlink: a path that must be real is, or contains, a symlink.
	ErrSymlink = errors.New("symlink refused")
	// ErrTreeTooLarge: a tree has too many entries to scan for secrets; it is
	// not bound at all.
	ErrTreeTooLarge = errors.New("tree too large to scan")
	// ErrCommandWritable: the command sits in a folder the vat can write.
	ErrCommandWritable = errors.New("command in a writable folder")
	// ErrChanged: a bind source changed between the plan and the bind.
	ErrChanged = errors.New("bind source changed since the plan")
	// ErrNoSeccomp: the seccomp filter could not be built, or NoSeccomp was
	// asked for where the architecture has a table.
	ErrNoSeccomp = errors.New("seccomp filter unavailable")
	// ErrBwrap: bubblewrap could not start the sandbox.
	ErrBwrap = errors.New("bubblewrap could not start the sandbox")
	// ErrNoBwrap: there is no bubblewrap to run (not installed, or not
	// at the path the operator named).
	ErrNoBwrap = errors.New("bubblewrap is not installed")
	// ErrProbe: the preflight found that walls cannot be built here.
	ErrProbe = errors.New("walls cannot be built on this host")
	// ErrLimits: the wall's cgroup could not be made or its limits set.
	ErrLimits = errors.New("the wall's limits could not be set")
	// ErrOutOfMemory: the kernel killed the wall, or a process of it, for
	// going past its memory limit.
	ErrOutOfMemory = errors.New("it ran out of memory")
	// ErrUnsupported: this platform has no walls.
	ErrUnsupported = errors.New("walls are only supported on linux")
)
