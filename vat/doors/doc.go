// Package doors gives a first-party vat the host functions the operator
// allows it.
//
// Each is a Cap'n Proto capability.
//
// A door is something only the host can do (a kiosk display state, the
// restart of a companion container), served by a backend of the operator's
// (a host unix socket or a loopback HTTP service). The operator's core table
// (LoadTable) lists, per vat id, the door set: whether the vat is
// first-party, the backend, and the exact "METHOD /path" entries. A manifest
// can only name its own id's set (CheckManifest); it never adds entries.
//
// Grant mints a fresh DoorSet for one spawn of a vat. A Door accepts a call
// only for a method and path of its own entries, with a request target that
// cannot be rewritten, and forwards it to the backend with filtered headers,
// bounded bodies and a timeout. Revoke makes every Door and DoorSet of that
// grant fail, wherever the references went. Every call is one structured log
// record.
package doors
