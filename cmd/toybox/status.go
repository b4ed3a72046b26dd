package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

func init() { commands["status"] = statusMain }

// vatStatus is the part of the admin API's status this command prints. The
// words themselves come from the supervisor (vat/words), never from here.
type vatStatus struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	StatusES  string `json:"status_es"`
	Code      string `json:"code"`
	PID       int    `json:"pid"`
	Restarts  int    `json:"restarts"`
	LastExit  string `json:"last_exit"`
	LastError string `json:"last_error"`
	Damaged   string `json:"damaged"`
}

func statusMain(args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: toybox status --admin PATH [--lang en|es] [VAT]")
		fs.PrintDefaults()
	}
	admin := fs.String("admin", "admin.sock", "the supervisor's admin socket")
	lang := fs.String("lang", "en", "language of the status words: en or es")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *lang != "en" && *lang != "es" {
		fmt.Fprintf(os.Stderr, "toybox status: --lang %q: want en or es\n", *lang)
		return 2
	}
	path := "/"
	if fs.NArg() == 1 {
		path = "/" + fs.Arg(0)
	} else if fs.NArg() > 1 {
		fs.Usage()
		return 2
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", *admin)
		},
	}}
	resp, err := c.Get("http://toybox" + path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toybox status:", err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		fmt.Fprintln(os.Stderr, "toybox status:", err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "toybox status: %s: %s\n", resp.Status, strings.TrimSpace(string(body)))
		return 1
	}
	var list []vatStatus
	if path == "/" {
		err = json.Unmarshal(body, &list)
	} else {
		var one vatStatus
		err = json.Unmarshal(body, &one)
		list = []vatStatus{one}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "toybox status: reading the answer:", err)
		return 1
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	for _, v := range list {
		word := v.Status
		if *lang == "es" {
			word = v.StatusES
		}
		code := v.Code
		if len(code) > 19 {
			code = code[:19] + "…"
		}
		extra := ""
		if v.LastError != "" {
			extra = v.LastError
		} else if v.Damaged != "" {
			extra = v.Damaged
		} else if v.LastExit != "" && v.Restarts > 0 {
			extra = "last exit: " + v.LastExit
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\tpid %d\trestarts %d\t%s\n", v.ID, word, code, v.PID, v.Restarts, extra)
	}
	_ = tw.Flush()
	return 0
}
