// Package unixsock makes and checks the listening sockets of the mains.
//
// Listen creates one at a path without a moment of a wider mode, and never
// replaces a socket another process still listens on. CheckListener checks
// the sockets systemd hands the mains (socket activation). A socket that
// grants authority to whoever can connect (the switchboard's handles, the
// supervisor's admin API) is served only on a listening unix stream socket,
// where the file's owner and mode decide who that is. It is never served on
// TCP, which every local user can reach.
package unixsock
