// Command toybox is the supervisor and its operator tools:
//
//	toybox serve   run the supervisor (see serve.go)
//	toybox status  print the vats' status words (status.go)
//	toybox egress  ask a switchboard socket what it would admit (egress.go)
//	toybox doctor  check that walls can be built on this host (doctor.go)
package main

import (
	"fmt"
	"os"
)

// commands maps a subcommand to its main; each file registers its own in init.
var commands = map[string]func(args []string) int{}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: toybox serve|status|egress|doctor [flags]")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	run, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "toybox: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	os.Exit(run(os.Args[2:]))
}
