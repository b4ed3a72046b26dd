// Package schema holds the Cap'n Proto contract and the Go generated from
// it.
//
// It holds the Cap'n Proto contract between the switchboard, the supervisor
// and the vats, and the Go generated from it (committed; `make generate`
// regenerates it and `make check` fails if that changes anything).
//
// toybox.capnp imports only what std/ ships (go-capnp's go.capnp and its
// annotated copies of capnp/stream.capnp and capnp/c++.capnp), so the stock
// capnp tool compiles it for any language with no other import path:
//
//	capnp compile --no-standard-import -Ischema/std -oc++ schema/toybox.capnp
package schema

//go:generate sh -c "PATH=$(cd ../.tools && pwd):$PATH capnp compile --no-standard-import -Istd -ogo toybox.capnp"
