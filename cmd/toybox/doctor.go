package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"toybox/vat/wall"
)

func init() { commands["doctor"] = doctorMain }

// doctorMain prints the walls checklist and exits 1 if any check failed.
func doctorMain(args []string) int {
	fs := flag.NewFlagSet("toybox doctor", flag.ContinueOnError)
	entry := fs.String("entry", "", "path of toybox-entry (default: next to this binary, then PATH)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	checks := wall.Doctor(ctx)
	checks = append(checks, entryCheck(*entry))
	return printChecks(os.Stdout, checks)
}

func entryCheck(path string) wall.Check {
	c := wall.Check{Name: "toybox-entry"}
	if path == "" {
		if self, err := os.Executable(); err == nil {
			if p := filepath.Join(filepath.Dir(self), "toybox-entry"); fileExists(p) {
				path = p
			}
		}
	}
	if path == "" {
		if p, err := exec.LookPath("toybox-entry"); err == nil {
			path = p
		}
	}
	if path == "" || !fileExists(path) {
		c.Detail = "not found next to toybox or on PATH"
		c.Fix = "make build (it puts toybox-entry in ./bin), or pass --entry"
		return c
	}
	c.OK, c.Detail = true, path
	return c
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func printChecks(w io.Writer, checks []wall.Check) int {
	code := 0
	for _, c := range checks {
		mark := "ok  "
		if !c.OK {
			mark, code = "FAIL", 1
		}
		fmt.Fprintf(w, "%s %s: %s\n", mark, c.Name, c.Detail)
		if !c.OK && c.Fix != "" {
			fmt.Fprintf(w, "     fix: %s\n", c.Fix)
		}
	}
	if code == 0 {
		fmt.Fprintln(w, "walls can be built on this host")
	} else {
		fmt.Fprintln(w, "walls cannot be built on this host until the checks above pass")
	}
	return code
}
