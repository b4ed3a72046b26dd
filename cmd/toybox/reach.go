package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"

	"toybox/labels"
)

func init() { commands["reach"] = reachMain }

func reachMain(args []string) int {
	fs := flag.NewFlagSet("reach", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: toybox reach [--admin PATH] [--lang en|es] [--json] VAT\n\nSays what the vat can reach, and why: its grant in plain words, the\nswitchboard handle it is narrowed from, what its manifest asked for and\nwas not granted, its doors, and whether its wall holds it.")
		fs.PrintDefaults()
	}
	admin, lang := langFlags(fs)
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	if code, ok := parseFlags(fs, args, lang); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	if _, err := labels.ParseVatID(fs.Arg(0)); err != nil { // the command line is where the id enters
		fmt.Fprintln(os.Stderr, "toybox reach:", err)
		return 1
	}
	body, err := adminGet(*admin, "/"+url.PathEscape(fs.Arg(0))+"/reach?lang="+url.QueryEscape(*lang))
	if err != nil {
		fmt.Fprintln(os.Stderr, "toybox reach:", err)
		return 1
	}
	if *asJSON {
		_, _ = os.Stdout.Write(jsonForTerminal(body))
		return 0
	}
	var ans struct {
		Lines []string `json:"lines"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		fmt.Fprintln(os.Stderr, "toybox reach: reading the answer:", err)
		return 1
	}
	for _, l := range ans.Lines {
		fmt.Println(term(l))
	}
	return 0
}
