// Package memfd makes in-memory files, sealed for handing to bubblewrap.
//
// Sealed returns a file whose contents can never change again: not by this
// process, not by whoever is handed a copy of the descriptor. bubblewrap
// reads its options (--args), the seccomp filter (--seccomp) and the files
// it copies into a wall (--file) from such files.
package memfd
