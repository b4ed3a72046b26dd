// Package tests holds the end-to-end tests.
//
// They build the real binaries (switchboard, toybox, toybox-entry, the
// examples) and run them as real processes, with real walls, a real
// switchboard and real sockets.
package tests
