// Command netclient is a test vat that runs commands inside its wall.
//
// It is a test vat: it serves HTTP on $TOYBOX_LISTEN and, for each POST
// /run, writes the request's files below $TMPDIR and runs its command inside
// the wall, without any proxy variable, answering with the command's output
// and exit code (JSON). The transparent egress tests use it to run ordinary
// clients (curl, node, python, busybox nc, a C program) as an app would.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

type run struct {
	Argv  []string          `json:"argv"`
	Files map[string]string `json:"files"` // name below $TMPDIR: content
	Proxy bool              `json:"proxy"` // keep the proxy variables
}

type result struct {
	Out  string `json:"out"`
	Code int    `json:"code"`
}

func main() {
	l, err := net.Listen("unix", os.Getenv("TOYBOX_LISTEN"))
	if err != nil {
		panic(err)
	}
	tmp := os.Getenv("TMPDIR")
	http.HandleFunc("POST /run", func(w http.ResponseWriter, r *http.Request) {
		var q run
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil || len(q.Argv) == 0 {
			http.Error(w, "bad request", 400)
			return
		}
		for name, content := range q.Files {
			if err := os.WriteFile(filepath.Join(tmp, filepath.Base(name)), []byte(content), 0o755); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), 40*time.Second)
		defer cancel()
		if q.Argv[0] == "go-get" && len(q.Argv) == 2 {
			// Go's net/http with no proxy at all.
			_ = json.NewEncoder(w).Encode(goGet(ctx, q.Argv[1]))
			return
		}
		cmd := exec.CommandContext(ctx, q.Argv[0], q.Argv[1:]...)
		cmd.Dir = tmp
		cmd.WaitDelay = 5 * time.Second // a child left holding the output
		for _, kv := range os.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			if !q.Proxy && strings.Contains(strings.ToLower(k), "proxy") {
				continue
			}
			cmd.Env = append(cmd.Env, kv)
		}
		out, err := cmd.CombinedOutput()
		res := result{Out: string(out)}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			res.Code = ee.ExitCode()
		} else if err != nil {
			res.Out += err.Error()
			res.Code = -1
		}
		_ = json.NewEncoder(w).Encode(res)
	})
	panic(http.Serve(l, nil))
}

func goGet(ctx context.Context, url string) result {
	c := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 20 * time.Second}
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return result{Out: err.Error(), Code: 1}
	}
	resp, err := c.Do(req)
	if err != nil {
		return result{Out: err.Error(), Code: 1}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{Out: string(b)}
}
