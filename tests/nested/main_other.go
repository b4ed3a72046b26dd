//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "nested: seccomp notifiers exist only on linux")
	os.Exit(2)
}
