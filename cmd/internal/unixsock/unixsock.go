// Package unixsock checks the sockets systemd hands the mains.
//
// It checks the sockets systemd hands the mains (socket activation): a
// socket that grants authority to whoever can connect (the switchboard's
// handles, the supervisor's admin API) is served only on a listening unix
// stream socket, where the file's owner and mode decide who that is, never
// on TCP, which every local user can reach.
package unixsock
