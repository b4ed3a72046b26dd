// Command port-app is a vat that serves HTTP on a TCP port.
//
// It does as most web servers and HTTP MCP servers do: it listens on every address
// of its wall at $PORT and knows nothing of toybox. Installed with ?listen=N
// (or a manifest's "listen": {"port": N}), toybox-entry relays the vat's
// $TOYBOX_LISTEN to that port once it accepts. It answers "port-app on port
// N: GET /path" and, at /pid, its own pid and its parent's: under
// toybox-entry it is pid 2.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		log.Fatal("port-app: $PORT is not set (install it with ?listen=N)")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/pid", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "pid %d ppid %d\n", os.Getpid(), os.Getppid())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "port-app on port %s: %s %s\n", port, r.Method, r.URL.Path)
	})
	srv := &http.Server{Addr: ":" + port, Handler: mux}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
