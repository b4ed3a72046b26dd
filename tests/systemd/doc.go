// Package systemd tests the systemd units in systemd/ and make install.
//
// It tests the systemd units in systemd/ and `make install`: systemd-analyze
// verify and security on every unit, an install into a DESTDIR root, both
// binaries started under systemd-socket-activate with the named descriptors
// exactly as the units pass them, READY=1 on a real NOTIFY_SOCKET, and the
// quickstart round (install a vat, reach it, egress allowed and refused).
// With the build tag systemdcontainer (make test-systemd) it also runs the
// installed units under a real systemd as PID 1 in a docker container made
// from a debootstrap root.
package systemd
