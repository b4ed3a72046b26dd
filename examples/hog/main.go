// Command hog is a vat that takes what it is told to.
//
// It shows that its wall's limits hold:
// GET /eat?mib=N allocates N MiB and keeps it (the kernel kills the wall
// past its memory limit), /fill?mib=N writes N MiB into its data folder
// (answering how much fit, and why it stopped; with &in=run, into its run
// folder, where $TOYBOX_LISTEN is), /spin?s=N spins every CPU it sees for
// N seconds.
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"
)

func main() {
	listen, data := os.Getenv("TOYBOX_LISTEN"), os.Getenv("TOYBOX_DATA")
	if listen == "" || data == "" {
		log.Fatal("hog: TOYBOX_LISTEN and TOYBOX_DATA must be set (run it as a vat)")
	}
	var mu sync.Mutex
	var kept [][]byte
	http.HandleFunc("/eat", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("mib"))
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < n; i++ {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			kept = append(kept, b)
		}
		fmt.Fprintf(w, "hog: holding %d MiB\n", len(kept))
	})
	http.HandleFunc("/fill", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("mib"))
		dir := data
		if r.URL.Query().Get("in") == "run" {
			dir = filepath.Dir(listen)
		}
		wrote, err := fill(filepath.Join(dir, "fill"), n)
		fmt.Fprintf(w, "hog: wrote %d MiB: %v\n", wrote, err)
	})
	http.HandleFunc("/spin", func(w http.ResponseWriter, r *http.Request) {
		s, _ := strconv.Atoi(r.URL.Query().Get("s"))
		end := time.Now().Add(time.Duration(s) * time.Second)
		var wg sync.WaitGroup
		for range runtime.NumCPU() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
				}
			}()
		}
		wg.Wait()
		fmt.Fprintln(w, "hog: spun")
	})
	_ = os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.Serve(l, nil))
}

// fill appends zeros to p, 1 MiB at a time, until mib MiB are written or
// a write fails; it returns how many MiB it wrote.
func fill(p string, mib int) (int, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := range mib {
		if _, err := f.Write(chunk); err != nil {
			return i, err
		}
	}
	return mib, f.Sync()
}
