package packages

import "errors"

// Sentinel errors. Each error names the problem; these say which kind.
var (
	// ErrBadSpec: a package spec or launcher line that cannot be read, or
	// that names an option that could change where the code comes from.
	ErrBadSpec = errors.New("bad package spec")
	// ErrBadLock: a lock that does not describe an installable tree.
	ErrBadLock = errors.New("bad lock")
	// ErrIntegrity: a tarball that does not match its lock's integrity.
	ErrIntegrity = errors.New("integrity mismatch")
	// ErrScripts: a package that needs an install script the owner did
	// not allow.
	ErrScripts = errors.New("needs an install script")
	// ErrBadTarball: a package tarball that cannot be unpacked safely.
	ErrBadTarball = errors.New("bad package tarball")
	// ErrTreeReplaced: a prepare step left a link, a special file or
	// another folder where toybox reads its output or lays out the tree.
	ErrTreeReplaced = errors.New("a prepare step replaced its output")
	// ErrChanged: an installed tree that differs from what was installed.
	ErrChanged = errors.New("installed files changed")
	// ErrBadServerJSON: a server.json toybox cannot install.
	ErrBadServerJSON = errors.New("bad server.json")
	// ErrBadConfig: an MCP client config that cannot be read.
	ErrBadConfig = errors.New("bad client config")
	// ErrNoUV: a PyPI package on a host without uv.
	ErrNoUV = errors.New("uv is not installed on this host: PyPI packages cannot be prepared")
)
