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
func ServeUnix(path string, h http.Handler) {
	l, err := net.Listen("unix", path)
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
