//go:build !linux

package main

import (
	"errors"
	"fmt"
	"net/http"
)

// errUnsupported: the reconnect attack uses Linux socket calls.
var errUnsupported = errors.New("the reconnect attack runs only on linux")

// reconnect says the attack cannot run here.
func reconnect(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintf(w, "denied: %v\n", errUnsupported)
}
