//go:build !linux || !cgo

package main

// launched says the launcher is missing: it is C, built only with cgo on
// Linux. main then fails closed.
func launched() launch {
	return launch{State: launchNotRun, Why: "toybox-entry was built without cgo, so without its launcher"}
}
