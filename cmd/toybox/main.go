// Command toybox is the supervisor and its operator tools.
//
// `toybox help` lists the commands:
//
//	toybox serve       run the supervisor (see serve.go)
//	toybox status      print the vats' status words (status.go)
//	toybox reach       say what a vat can reach, and why (reach.go)
//	toybox install     install a package as a vat (install.go)
//	toybox import      install an MCP client config's servers; --undo (import.go)
//	toybox egress      ask a switchboard socket what it would admit (egress.go)
//	toybox doctor      check that walls can be built on this host (doctor.go)
//	toybox completion  print a shell completion script (help.go)
//	toybox help        list the commands, or show one's flags (help.go)
//
// Exit codes: 0 done; 1 it failed (the reason on stderr); 2 bad usage;
// toybox egress also exits 3 when the switchboard refused.
package main

import (
	"fmt"
	"os"
)

// commands maps a subcommand to its main; each file registers its own in init.
var commands = map[string]func(args []string) int{}

func main() {
	if len(os.Args) < 2 {
		listCommands(os.Stderr)
		os.Exit(2)
	}
	name := os.Args[1]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	}
	run, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "toybox: unknown command %q\n\n", os.Args[1])
		listCommands(os.Stderr)
		os.Exit(2)
	}
	os.Exit(run(os.Args[2:]))
}
