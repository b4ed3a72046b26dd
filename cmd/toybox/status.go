package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"toybox/labels"
)

func init() { commands["status"] = statusMain }

// pageStatus is the part of the status page's JSON (GET /ui/status.json)
// this command prints. The words come from the supervisor (vat/words),
// never from here.
type pageStatus struct {
	Host struct {
		Walls       string `json:"walls"`
		Switchboard string `json:"switchboard"`
	} `json:"host"`
	Notices []struct {
		Title string `json:"title"`
	} `json:"notices"`
	Vats []struct {
		ID    string   `json:"id"`
		Word  string   `json:"word"`
		Code  string   `json:"code"`
		Grant []string `json:"grant"`
		Facts []struct {
			Key    string   `json:"key"`
			Values []string `json:"values"`
		} `json:"facts"`
	} `json:"vats"`
}

// adminGet GETs path on the admin socket and returns the body of a 200.
func adminGet(admin, path string) ([]byte, error) {
	code, body, err := newAdmin(admin, 10*time.Second).do(http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, adminError(code, body)
	}
	return body, nil
}

// langFlags adds --admin and --lang to fs.
func langFlags(fs *flag.FlagSet) (admin, lang *string) {
	admin = fs.String("admin", "admin.sock", "the supervisor's admin socket")
	lang = fs.String("lang", "en", "language of the words: en or es")
	return admin, lang
}

func parseFlags(fs *flag.FlagSet, args []string, lang *string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if *lang != "en" && *lang != "es" {
		fmt.Fprintf(os.Stderr, "toybox %s: --lang %q: want en or es\n", fs.Name(), *lang)
		return 2, false
	}
	return 0, true
}

func statusMain(args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: toybox status [--admin PATH] [--lang en|es] [--json] [VAT]\n\nPrints each vat's status word, code, grant and why it is off; the first\nlines say whether walls are on and whether the switchboard answers.\n--json prints everything the status page shows (GET /ui/status.json).")
		fs.PrintDefaults()
	}
	admin, lang := langFlags(fs)
	asJSON := fs.Bool("json", false, "print the status page's JSON")
	if code, ok := parseFlags(fs, args, lang); !ok {
		return code
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return 2
	}
	if fs.NArg() == 1 {
		if _, err := labels.ParseVatID(fs.Arg(0)); err != nil { // the command line is where the id enters
			fmt.Fprintln(os.Stderr, "toybox status:", err)
			return 1
		}
	}
	body, err := adminGet(*admin, "/ui/status.json?lang="+url.QueryEscape(*lang))
	if err != nil {
		fmt.Fprintln(os.Stderr, "toybox status:", err)
		return 1
	}
	var page pageStatus
	if err := json.Unmarshal(body, &page); err != nil {
		fmt.Fprintln(os.Stderr, "toybox status: reading the answer:", err)
		return 1
	}
	one := fs.Arg(0)
	if one != "" {
		found := false
		for _, v := range page.Vats {
			found = found || v.ID == one
		}
		if !found {
			fmt.Fprintf(os.Stderr, "toybox status: no vat %q\n", one)
			return 1
		}
	}
	if *asJSON {
		_, _ = os.Stdout.Write(jsonForTerminal(body))
		return 0
	}
	// Every field printed below is the supervisor's, and may hold a
	// vat's bytes: each goes through term.
	if one == "" {
		fmt.Printf("walls: %s\nswitchboard: %s\n", term(page.Host.Walls), term(page.Host.Switchboard))
		for _, n := range page.Notices {
			fmt.Printf("notice: %s\n", term(n.Title))
		}
	}
	printVats(os.Stdout, page, one, *lang)
	return 0
}

// printVats writes one line per vat of page (only vat one, if not empty):
// its word, code, restarts, grant and why it is off, in lang's words. A
// line ends at its last word: no blanks trail it.
func printVats(w io.Writer, page pageStatus, one, lang string) {
	restarts, lastExit := "restarts", "last exit"
	if lang == "es" {
		restarts, lastExit = "reinicios", "última salida"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, v := range page.Vats {
		if one != "" && v.ID != one {
			continue
		}
		code := v.Code
		if len(code) > 19 {
			code = strings.ToValidUTF8(code[:19], "") + "…"
		}
		facts := map[string]string{}
		for _, f := range v.Facts {
			facts[f.Key] = strings.Join(f.Values, "; ")
		}
		extra := facts["last_error"]
		if extra == "" {
			extra = facts["damaged"]
		}
		if extra == "" && facts["last_exit"] != "" && facts["restarts"] != "0" {
			extra = lastExit + ": " + facts["last_exit"]
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s %s\t%s", term(v.ID), term(v.Word), term(code), restarts, term(facts["restarts"]), term(strings.Join(v.Grant, "; ")))
		if extra != "" {
			line += "\t" + term(extra)
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
}
