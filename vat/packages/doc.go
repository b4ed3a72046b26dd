// Package packages turns a package spec into a locked, checked bundle.
//
// It holds the pure parts of installing an npm or uv package as a vat: the
// one reader of package specs and launcher lines (npx, uvx), the lock
// derived from npm's package-lock.json, integrity checks of tarballs before
// they are unpacked, the deterministic bundle toybox stores by SHA-256, the
// check of an installed tree against that bundle before every start, the
// reader of the MCP registry's server.json, and the reader of MCP client
// configs for import. Running npm (inside a wall) is the supervisor's; see
// docs/packages.md.
package packages
