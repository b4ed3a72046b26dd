// Package schema holds the Cap'n Proto contract between the switchboard, the
// supervisor and the vats, and the Go generated from it (committed; `make
// generate` regenerates it and `make check` fails if that changes anything).
package schema

//go:generate sh -c "PATH=$(cd ../.tools && pwd):$PATH capnp compile -I$(go env GOMODCACHE)/capnproto.org/go/capnp/v3@v3.1.0-alpha.2/std -ogo toybox.capnp"
