// Package entry is what runs first inside a wall (cmd/toybox-entry): it
// takes the vat's Handle from its own capability socket, serves the HTTP
// CONNECT proxy and the forwarded loopback ports on 127.0.0.1 (every
// connection goes out through the Handle, and the socket the switchboard
// hands back is relayed with splice(2)), then runs the app with exactly fds
// 0, 1, 2 and 3 and reaps it as the wall's pid 1. It holds no authority of its
// own: a bug here can never widen what the vat reaches.
package entry
