package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"toybox/labels"
)

func init() { commands["install"] = installMain }

const installUsage = `usage: toybox install --admin PATH [--egress GRANT] [--env JSON] [--unset-env KEY[,KEY]] [--allow-scripts NAME[,NAME]] VAT SPEC
       toybox install --admin PATH [flags] --server-json FILE VAT
       toybox install --admin PATH [flags] VAT -- npx -y NAME [ARG...]

Installs a package as vat VAT: PUT /VAT?package=SPEC on the admin socket
(docs/packages.md). SPEC is npm:NAME[@VERSION|RANGE|TAG] or
pypi:NAME[==VERSION]; after --, a launcher line (npx or uvx) as people
paste it, its arguments kept.

Installing an installed VAT upgrades it: its env values carry over. A key
in --env replaces that key alone; --unset-env takes keys away.
`

// packageQuery is ?package= and the options every package install takes,
// as PUT /<vat> reads them.
type packageQuery struct {
	egress, env, unsetEnv, allowScripts string
	envSet                              bool
}

func (o packageQuery) values(pkg string) url.Values {
	q := url.Values{"package": {pkg}}
	if o.egress != "" {
		q.Set("egress", o.egress)
	}
	if o.envSet {
		q.Set("env", o.env)
	}
	if o.unsetEnv != "" {
		q.Set("unset-env", o.unsetEnv)
	}
	if o.allowScripts != "" {
		q.Set("allow-scripts", o.allowScripts)
	}
	return q
}

// launcherParam is a launcher line in ?package='s form: a JSON list.
func launcherParam(argv []string) string {
	b, _ := json.Marshal(argv)
	return string(b)
}

// installPackage sends one package install and returns the vat's status
// (PUT's answer) or the refusal.
func installPackage(a admin, id string, q url.Values, body []byte) (map[string]any, error) {
	code, b, err := a.do(http.MethodPut, "/"+id+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	return installAnswer(code, b)
}

func installMain(args []string) int {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), installUsage)
		fs.PrintDefaults()
	}
	adminPath := fs.String("admin", "admin.sock", "the supervisor's admin socket")
	var o packageQuery
	fs.StringVar(&o.egress, "egress", "", "the vat's egress grant (labels as JSON), as ?egress=")
	env := fs.String("env", "", "the owner's env values, a JSON object, as ?env=")
	fs.StringVar(&o.unsetEnv, "unset-env", "", "env keys an upgrade takes away, comma-separated, as ?unset-env=")
	fs.StringVar(&o.allowScripts, "allow-scripts", "", "packages whose install scripts may run, as ?allow-scripts=")
	serverJSON := fs.String("server-json", "", "install from this MCP registry server.json")
	timeout := fs.Duration("timeout", 15*time.Minute, "how long the install may take")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	o.env, o.envSet = *env, *env != ""
	rest := fs.Args()
	var (
		pkg  string
		body []byte
	)
	switch {
	case len(rest) == 0:
		fs.Usage()
		return exitUsage
	case *serverJSON != "":
		if len(rest) != 1 {
			fs.Usage()
			return exitUsage
		}
		b, err := os.ReadFile(*serverJSON)
		if err != nil {
			fmt.Fprintln(os.Stderr, "toybox install:", err)
			return exitError
		}
		pkg, body = "server.json", b
	case len(rest) == 2 && !strings.HasPrefix(rest[1], "-"):
		pkg = rest[1]
	case len(rest) >= 3 && rest[1] == "--":
		pkg = launcherParam(rest[2:])
	default:
		fs.Usage()
		return exitUsage
	}
	// The command line is where the id enters: it becomes a path on the
	// admin socket, so it is parsed before it is sent.
	if _, err := labels.ParseVatID(rest[0]); err != nil {
		fmt.Fprintln(os.Stderr, "toybox install:", err)
		return exitError
	}
	st, err := installPackage(newAdmin(*adminPath, *timeout), rest[0], o.values(pkg), body)
	if err != nil {
		fmt.Fprintf(os.Stderr, "toybox install %s: %s\n", rest[0], term(err.Error()))
		return exitError
	}
	fmt.Printf("%s\t%s\t%s\n", rest[0], term(fmt.Sprint(st["status"])), term(fmt.Sprint(st["code"])))
	return exitOK
}
