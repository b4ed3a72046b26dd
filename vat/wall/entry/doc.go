// Package entry is what runs first inside a wall (cmd/toybox-entry).
//
// It binds the HTTP CONNECT proxy's and the forwarded ports on 127.0.0.1,
// starts the app with exactly fds 0, 1, 2 and 3 while it takes the vat's
// Handle from its own capability socket (connections wait in the kernel's
// backlog until then; if the Handle cannot be had, the app is killed and the
// entry exits with ExitSetup), then serves the ports (every connection goes
// out through the Handle, and the socket the switchboard hands back is
// relayed with splice(2)) and reaps the app as the wall's pid 1, in every
// wall (with no way out too: then it serves no port). It forwards stop
// requests to the app's process group and reaps every orphan. For an app
// that listens on a TCP port it relays $TOYBOX_LISTEN to that port (Listen).
// It holds no authority of its own: a bug here can never widen what the vat
// reaches.
package entry
