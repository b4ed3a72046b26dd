package mcptools

import (
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

// ServeUnix serves h on a unix socket at path ($TOYBOX_LISTEN) until
// SIGTERM or SIGINT; a failure ends the program.
func ServeUnix(path string, h http.Handler) { Serve("unix", path, h) }

// Serve serves h on addr of network ("unix", or "tcp" for an app installed
// with ?listen=, on $PORT) until SIGTERM or SIGINT; a failure ends the
// program.
func Serve(network, addr string, h http.Handler) {
	l, err := net.Listen(network, addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		_ = srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
