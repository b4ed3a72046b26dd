// Command toybox-entry is the first program inside a wall. bubblewrap runs it
// as the wall's pid 1; it serves the vat's CONNECT proxy and forwarded ports
// through the vat's Handle (from --cap-fd) and runs the app with exactly fds
// 0, 1, 2 and 3 (fd 3 from --app-cap-fd):
//
//	toybox-entry --vat ID [--cap-fd N --proxy-port P [--forward PORT=HOST:PORT]...] --app-cap-fd N -- APP [ARGS...]
//
// Its configuration is flags only, so nothing of it reaches the app's
// environment.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"unicode"

	"toybox/vat/wall/entry"
)

type forwards []entry.Forward

func (f *forwards) String() string { return fmt.Sprint(*f) }

func (f *forwards) Set(s string) error {
	portText, hostPort, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want PORT=HOST:PORT, got %q", s)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return fmt.Errorf("bad port %q", portText)
	}
	host, tp, err := net.SplitHostPort(hostPort)
	if err != nil {
		return err
	}
	tport, err := strconv.ParseUint(tp, 10, 16)
	if err != nil || tport == 0 || host == "" {
		return fmt.Errorf("bad target %q", hostPort)
	}
	if strings.ContainsFunc(host, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) || strings.ContainsRune(`/\@`, r) }) {
		return fmt.Errorf("bad host %q", host)
	}
	*f = append(*f, entry.Forward{Port: uint16(port), Host: host, TargetPort: uint16(tport)})
	return nil
}

func main() {
	// Before anything else: nothing inherited may reach the app.
	if err := entry.CloexecAll(); err != nil {
		fmt.Fprintln(os.Stderr, "toybox-entry:", err)
		os.Exit(entry.ExitSetup)
	}
	fs := flag.NewFlagSet("toybox-entry", flag.ContinueOnError)
	id := fs.String("vat", "", "the vat's id")
	capFD := fs.Int("cap-fd", -1, "the entry's capability socket (absent: no way out)")
	appCapFD := fs.Int("app-cap-fd", -1, "the socket that becomes the app's fd 3")
	proxyPort := fs.Int("proxy-port", 0, "the CONNECT proxy's port on 127.0.0.1 (0: none)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	var fwd forwards
	fs.Var(&fwd, "forward", "PORT=HOST:PORT: serve 127.0.0.1:PORT, connect through the Handle (repeatable)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(entry.ExitSetup)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "toybox-entry: --log-level:", err)
		os.Exit(entry.ExitSetup)
	}
	cfg := entry.Config{
		ID:        *id,
		ProxyPort: *proxyPort,
		Forwards:  fwd,
		Argv:      fs.Args(),
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	}
	if *appCapFD < 3 {
		fmt.Fprintln(os.Stderr, "toybox-entry: --app-cap-fd is required")
		os.Exit(entry.ExitSetup)
	}
	// Hold only what is ours: the two capability sockets.
	if err := entry.CloseInherited(*capFD, *appCapFD); err != nil {
		fmt.Fprintln(os.Stderr, "toybox-entry:", err)
		os.Exit(entry.ExitSetup)
	}
	cfg.AppCap = os.NewFile(uintptr(*appCapFD), "app-cap")
	if *capFD >= 3 {
		cfg.Cap = os.NewFile(uintptr(*capFD), "entry-cap")
	}
	os.Exit(entry.Run(context.Background(), cfg))
}
