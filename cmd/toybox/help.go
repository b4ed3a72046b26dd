package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func init() {
	commands["help"] = helpMain
	commands["completion"] = completionMain
}

// summaries are the one-line descriptions toybox help lists, in order.
var summaries = []struct{ name, what string }{
	{"serve", "run the supervisor: install, wall and serve the vats; the admin socket, the status page, the metrics"},
	{"status", "print every vat's status word, or one vat's (--json: all the status page shows)"},
	{"reach", "say what a vat can reach, and why"},
	{"install", "install an npm package (or a server.json, or a pasted npx line) as a vat"},
	{"import", "install each server of an MCP client config as a vat; --undo puts them back"},
	{"stdio", "serve a vat's MCP endpoint on stdin and stdout, for clients that launch stdio servers only"},
	{"egress", "ask a switchboard socket what it would admit, and use it (check, fetch, connect)"},
	{"doctor", "check that walls can be built on this computer"},
	{"completion", "print a bash or zsh completion script"},
	{"help", "list the commands, or show one command's flags (toybox help CMD)"},
}

// listCommands writes every command with its summary.
func listCommands(w io.Writer) {
	fmt.Fprintln(w, "usage: toybox COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, s := range summaries {
		fmt.Fprintf(w, "  %-11s %s\n", s.name, s.what)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each command takes --help. Exit codes: 0 done, 1 failed (the reason on")
	fmt.Fprintln(w, "stderr), 2 bad usage; toybox egress exits 3 when the switchboard refused.")
	fmt.Fprintln(w, "Docs: README.md, docs/operator.md.")
}

func helpMain(args []string) int {
	switch len(args) {
	case 0:
		listCommands(os.Stdout)
		return 0
	case 1:
		switch args[0] {
		case "help", "-h", "-help", "--help":
			fmt.Println("usage: toybox help [COMMAND]")
			fmt.Println()
			listCommands(os.Stdout)
			return 0
		}
		run, ok := commands[args[0]]
		if !ok {
			fmt.Fprintf(os.Stderr, "toybox help: unknown command %q\n\n", args[0])
			listCommands(os.Stderr)
			return 2
		}
		return run([]string{"--help"})
	}
	fmt.Fprintln(os.Stderr, "usage: toybox help [COMMAND]")
	return 2
}

// commandNames are the commands, sorted.
func commandNames() []string {
	var out []string
	for n := range commands {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

const bashCompletion = `# toybox completion for bash: source <(toybox completion bash)
_toybox() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "%s" -- "$cur"))
    return
  fi
  case ${COMP_WORDS[1]} in
    help) COMPREPLY=($(compgen -W "%s" -- "$cur")) ;;
    completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")) ;;
    egress) COMPREPLY=($(compgen -W "check fetch connect --socket --constrain --timeout" -- "$cur")) ;;
    status) COMPREPLY=($(compgen -W "--admin --lang --json" -- "$cur")) ;;
    reach) COMPREPLY=($(compgen -W "--admin --lang --json" -- "$cur")) ;;
    import) COMPREPLY=($(compgen -W "--admin --state --backups --rewrite --allow-scripts --undo --timeout" -- "$cur")) ;;
    install) COMPREPLY=($(compgen -W "--admin --egress --env --unset-env --allow-scripts --server-json --timeout" -- "$cur")) ;;
    doctor) COMPREPLY=($(compgen -W "--entry --bwrap --walls-table --state --wall-disk-mib --installs" -- "$cur")) ;;
    *) COMPREPLY=($(compgen -f -- "$cur")) ;;
  esac
}
complete -F _toybox toybox
`

func completionMain(args []string) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Println("usage: toybox completion bash|zsh\n\nPrints a completion script: source <(toybox completion bash)")
		return 0
	}
	if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
		fmt.Fprintln(os.Stderr, "usage: toybox completion bash|zsh")
		return 2
	}
	names := strings.Join(commandNames(), " ")
	if args[0] == "zsh" {
		fmt.Println("autoload -U +X bashcompinit && bashcompinit")
	}
	fmt.Printf(bashCompletion, names, names)
	return 0
}
