// Package counter is the vat behind counter-v1 and counter-v2.
//
// It counts the requests it answers, keeping the count in its data folder
// ($TOYBOX_DATA/count), so that the count survives restarts and upgrades
// ("v1 count N", then "v2 count N" after an upgrade). Each command is one
// line that names its version.
package counter

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Main serves the counter as version ("v1", "v2") until it fails.
func Main(version string) {
	name := "counter-" + version
	listen, data := os.Getenv("TOYBOX_LISTEN"), os.Getenv("TOYBOX_DATA")
	if listen == "" || data == "" {
		log.Fatal(name + ": TOYBOX_LISTEN and TOYBOX_DATA must be set (run it as a vat)")
	}
	countFile := filepath.Join(data, "count")
	var mu sync.Mutex
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		n := 0
		b, err := os.ReadFile(countFile)
		switch {
		case err == nil:
			n, err = strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				http.Error(w, name+": corrupt count: "+err.Error(), http.StatusInternalServerError)
				return
			}
		case !errors.Is(err, fs.ErrNotExist):
			http.Error(w, name+": "+err.Error(), http.StatusInternalServerError)
			return
		}
		n++
		tmp := countFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(strconv.Itoa(n)), 0o600); err != nil {
			http.Error(w, name+": "+err.Error(), http.StatusInternalServerError)
			return
		}
		if err := os.Rename(tmp, countFile); err != nil {
			http.Error(w, name+": "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%s count %d\n", version, n)
	})
	_ = os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		log.Fatalf("%s: %v", name, err)
	}
	log.Fatal(http.Serve(l, nil))
}
