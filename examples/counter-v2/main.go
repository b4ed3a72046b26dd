// Command counter-v2 is a vat that counts the requests it answers, keeping
// the count in its data folder ($TOYBOX_DATA/count), so that the count
// survives restarts and upgrades: "v2 count N".
package main

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

func main() {
	listen, data := os.Getenv("TOYBOX_LISTEN"), os.Getenv("TOYBOX_DATA")
	if listen == "" || data == "" {
		log.Fatal("counter-v2: TOYBOX_LISTEN and TOYBOX_DATA must be set (run it as a vat)")
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
				http.Error(w, "counter-v2: corrupt count: "+err.Error(), http.StatusInternalServerError)
				return
			}
		case !errors.Is(err, fs.ErrNotExist):
			http.Error(w, "counter-v2: "+err.Error(), http.StatusInternalServerError)
			return
		}
		n++
		tmp := countFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(strconv.Itoa(n)), 0o600); err != nil {
			http.Error(w, "counter-v2: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if err := os.Rename(tmp, countFile); err != nil {
			http.Error(w, "counter-v2: "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "v2 count %d\n", n)
	})
	_ = os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		log.Fatalf("counter-v2: %v", err)
	}
	log.Fatal(http.Serve(l, nil))
}
