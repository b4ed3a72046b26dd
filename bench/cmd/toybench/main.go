// Command toybench runs toybox's benchmarks beside their baselines and
// writes the table.
//
// It runs toybox's benchmarks side by side with their baselines and writes
// the table (docs/benchmarks.md, between its markers) and its JSON twin
// (bench/results.json). `make bench` builds the binaries and runs it from
// the repository root.
//
//	toybench [-bin DIR] [-md FILE] [-json FILE] [-quick] [-commit TEXT]
//	toybench helper targets|proxy   (started by the runner itself)
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"toybox/bench"
)

func main() {
	if len(os.Args) >= 3 && os.Args[1] == "helper" {
		if err := bench.RunHelper(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "toybench helper:", err)
			os.Exit(1)
		}
		return
	}
	bin := flag.String("bin", "bin", "directory holding switchboard, toybox, toybox-entry and benchvat")
	md := flag.String("md", "docs/benchmarks.md", "markdown file whose generated part is rewritten")
	js := flag.String("json", "bench/results.json", "JSON results file")
	quick := flag.Bool("quick", false, "small sizes, to try the runner (not for committed results)")
	commit := flag.String("commit", "", "what code is measured (default: git rev-parse HEAD of the current directory)")
	only := flag.String("only", "", "comma-separated sections to run (install, bulk, latency, spawn, packages, held, mcp); prints the table, writes no file")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "toybench:", err)
		os.Exit(1)
	}
	cfg := bench.Config{Bin: *bin, Self: self, Logger: log, Commit: *commit}
	if *quick {
		cfg.Repeats, cfg.Bytes, cfg.LatencyRounds, cfg.LatencyPerRound = 2, 64<<20, 2, 50
		cfg.Spawns, cfg.Vats, cfg.HeldConns = 3, 3, 500
		cfg.MCPSessions, cfg.MCPCalls = 5, 500
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
		if !slices.Contains(cfg.Only, "install") {
			cfg.Vats = 1 // the supervisor still installs the vat the wall path needs
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toybench:", err)
		os.Exit(1)
	}
	table := bench.Table(res)
	fmt.Print(table)
	if *only != "" {
		return
	}
	if err := bench.WriteJSON(*js, res); err != nil {
		fmt.Fprintln(os.Stderr, "toybench: writing", *js+":", err)
		os.Exit(1)
	}
	if err := bench.WriteMarkdown(*md, table); err != nil {
		fmt.Fprintln(os.Stderr, "toybench: writing", *md+":", err)
		os.Exit(1)
	}
}
