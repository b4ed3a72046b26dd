// Command snoop is a hostile vat for the isolation tests: on request it tries
// to read a file, list a folder or dial a unix socket, and reports what
// happened ("ok: ..." or "denied: ..."). It must only ever succeed on its own
// things.
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	listen := os.Getenv("TOYBOX_LISTEN")
	if listen == "" {
		log.Fatal("snoop: TOYBOX_LISTEN must be set")
	}
	http.HandleFunc("/read", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(r.URL.Query().Get("path"))
		if err != nil {
			fmt.Fprintf(w, "denied: %v\n", err)
			return
		}
		fmt.Fprintf(w, "ok: %s\n", strings.TrimSpace(string(b)))
	})
	http.HandleFunc("/write", func(w http.ResponseWriter, r *http.Request) {
		err := os.WriteFile(r.URL.Query().Get("path"), []byte("snooped"), 0o600)
		if err != nil {
			fmt.Fprintf(w, "denied: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok: written")
	})
	http.HandleFunc("/list", func(w http.ResponseWriter, r *http.Request) {
		ents, err := os.ReadDir(r.URL.Query().Get("path"))
		if err != nil {
			fmt.Fprintf(w, "denied: %v\n", err)
			return
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		fmt.Fprintf(w, "ok: %s\n", strings.Join(names, " "))
	})
	http.HandleFunc("/dial", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		network := q.Get("net")
		if network == "" {
			network = "unix"
		}
		c, err := net.DialTimeout(network, q.Get("addr"), 2*time.Second)
		if err != nil {
			fmt.Fprintf(w, "denied: %v\n", err)
			return
		}
		c.Close()
		fmt.Fprintln(w, "ok: connected")
	})
	http.HandleFunc("/swap", func(w http.ResponseWriter, r *http.Request) {
		// Its listening socket moves aside and $TOYBOX_LISTEN becomes a
		// symlink to the path asked for, which the supervisor would
		// follow on the host. The connection closes, so the next request
		// makes a new one.
		w.Header().Set("Connection", "close")
		if err := os.Rename(listen, listen+".real"); err != nil {
			fmt.Fprintf(w, "denied: %v\n", err)
			return
		}
		if err := os.Symlink(r.URL.Query().Get("to"), listen); err != nil {
			fmt.Fprintf(w, "denied: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok: swapped")
	})
	http.HandleFunc("/bigheader", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("x", 1<<20)) // 1 MiB of header
		fmt.Fprintln(w, "ok: big")
	})
	http.HandleFunc("/fds", func(w http.ResponseWriter, r *http.Request) {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			fmt.Fprintf(w, "denied: %v\n", err)
			return
		}
		var out []string
		for _, e := range ents {
			t, _ := os.Readlink("/proc/self/fd/" + e.Name())
			out = append(out, e.Name()+" -> "+t)
		}
		fmt.Fprintf(w, "ok: %s\n", strings.Join(out, "\n"))
	})
	http.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers: holds the supervisor's connection
	})
	http.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ok: %s\n", strings.Join(os.Environ(), "\n"))
	})
	_ = os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.Serve(l, nil))
}
