// Command mcplist is a stdio MCP server whose tool list changes.
//
// It is mcptest.Lister, its state in $TOYBOX_DATA (shared by all its
// processes): a test grows its list silently, then has it announce
// notifications/tools/list_changed, and counts the tools/list it was
// asked. --ttl-ms and --scope set what each tools/list page says of
// caching.
package main

import (
	"flag"
	"os"

	"toybox/vat/mcp/mcptest"
)

func main() {
	ttl := flag.Int("ttl-ms", -1, "each page's ttlMs (negative: none)")
	scope := flag.String("scope", "", "each page's cacheScope (empty: none)")
	flag.Parse()
	dir := os.Getenv("TOYBOX_DATA")
	if dir == "" {
		dir = "."
	}
	os.Exit(mcptest.Lister(os.Stdin, os.Stdout, mcptest.ListerConfig{Dir: dir, TTLMs: *ttl, Scope: *scope}))
}
