// Command switchboard serves egress Handles on unix sockets.
//
// They are the only way out to the network for everything toybox runs (see
// docs/switchboard.md).
//
//	switchboard [--config FILE] [--listen NAME=PATH]... [--mode 0600]
//
// Sockets come from systemd socket activation (LISTEN_FDS, with
// FileDescriptorName=public or local) and/or --listen. It sends READY=1
// when NOTIFY_SOCKET is set, logs one JSON record per decision on stderr,
// reads its config's deny list again on SIGHUP (reload.go), and shuts down
// cleanly on SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"

	"toybox/cmd/internal/unixsock"
	"toybox/labels"
	"toybox/switchboard"
	"toybox/switchboard/owner"
)

type listenFlag []string

func (l *listenFlag) String() string     { return strings.Join(*l, ",") }
func (l *listenFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	// Signals first: a SIGTERM that arrives once a socket exists must
	// still shut down cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fs := flag.NewFlagSet("switchboard", flag.ContinueOnError)
	var listens listenFlag
	fs.Var(&listens, "listen", "NAME=PATH: create a unix socket at PATH serving the root handle NAME (public or local); repeatable")
	mode := fs.String("mode", "0600", "file mode of sockets created by --listen (0600 or 0660)")
	configPath := fs.String("config", "", "JSON configuration file (docs/switchboard.md)")
	debug := fs.Bool("debug", false, "log RPC chatter too")
	loopback := fs.String("loopback", "owner", "how a local handle's loopback and own-address targets are judged: owner (the listener-owner check of the config's \"owner\" section; without it every such target is refused) or unchecked (no check: tests and development only)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "switchboard: unexpected arguments %q\n", fs.Args())
		return 2
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	// Decision records are written off the calls' path (logWriter).
	lw := newLogWriter(os.Stderr)
	defer lw.Close()
	log := slog.New(slog.NewJSONHandler(lw, &slog.HandlerOptions{Level: level}))
	perm, err := parseMode(*mode)
	if err != nil {
		fmt.Fprintf(os.Stderr, "switchboard: %v\n", err)
		return 2
	}

	file := &switchboard.File{}
	var rootCAs []byte
	if *configPath != "" {
		data, err := os.ReadFile(*configPath)
		if err != nil {
			fmt.Fprintf(os.Stderr, "switchboard: reading config: %v\n", err)
			return 1
		}
		if file, err = switchboard.ParseFile(data); err != nil {
			fmt.Fprintf(os.Stderr, "switchboard: %s: %v\n", *configPath, err)
			return 1
		}
		if file.RootCAs != "" {
			if rootCAs, err = os.ReadFile(file.RootCAs); err != nil {
				fmt.Fprintf(os.Stderr, "switchboard: reading rootCAs: %v\n", err)
				return 1
			}
		}
	}
	if n := file.ThreadsFor(os.Getenv); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	log.Info("starting", "threads", runtime.GOMAXPROCS(0))
	cfg, err := file.Config(log, rootCAs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "switchboard: %v\n", err)
		return 1
	}

	switch {
	case *loopback == "unchecked" && file.Owner != nil:
		fmt.Fprintln(os.Stderr, "switchboard: --loopback unchecked contradicts the config's \"owner\" section")
		return 2
	case *loopback == "unchecked":
		log.Warn("--loopback unchecked: local handles reach every loopback listener their labels admit, whoever holds it (tests and development only)")
	case *loopback != "owner":
		fmt.Fprintf(os.Stderr, "switchboard: --loopback %q: want owner or unchecked\n", *loopback)
		return 2
	case file.Owner != nil:
		checker, err := newOwnerChecker(file.Owner, log)
		if err != nil {
			fmt.Fprintf(os.Stderr, "switchboard: listener-owner check: %v\n", err)
			return 1
		}
		defer checker.Close()
		// A handle whose labels carry origin "manifest" (a grant the add-on's
		// author wrote) is judged as a manifest default: its own containers,
		// never a process of toybox's user. Any other address was typed by
		// whoever holds the handle (the owner, through the supervisor).
		cfg.LoopbackCheck = checker.LoopbackFunc(func(h labels.Set) bool { return h.Origin == "" })
	default:
		// Fail closed: who holds a loopback port cannot be judged without
		// the operator's facts (toybox's uid, its directories, docker).
		cfg.LoopbackCheck = func(context.Context, netip.AddrPort, labels.Set) (bool, string) {
			return false, "no listener-owner check is configured (switchboard config \"owner\"), so no listener on this host is reachable"
		}
		log.Info("no listener-owner check configured (config key \"owner\"): local handles reach no listener on this host")
	}

	sockets := map[string]*net.UnixListener{}
	closeAll := func() {
		for _, l := range sockets {
			_ = l.Close()
		}
	}
	activated, err := activatedListeners()
	if err != nil {
		fmt.Fprintf(os.Stderr, "switchboard: socket activation: %v\n", err)
		return 1
	}
	for name, l := range activated {
		sockets[name] = l
	}
	for _, spec := range listens {
		name, path, ok := strings.Cut(spec, "=")
		if !ok || path == "" || (name != "public" && name != "local") {
			closeAll()
			fmt.Fprintf(os.Stderr, "switchboard: --listen %q: want public=PATH or local=PATH\n", spec)
			return 2
		}
		if _, dup := sockets[name]; dup {
			closeAll()
			fmt.Fprintf(os.Stderr, "switchboard: socket %q given twice\n", name)
			return 2
		}
		l, err := unixsock.Listen(path, perm)
		if err != nil {
			closeAll()
			fmt.Fprintf(os.Stderr, "switchboard: --listen %s: %v\n", spec, err)
			return 1
		}
		l.SetUnlinkOnClose(true)
		sockets[name] = l
	}
	if len(sockets) == 0 {
		fmt.Fprintln(os.Stderr, "switchboard: no sockets: use socket activation (FileDescriptorName=public|local) or --listen NAME=PATH")
		return 2
	}

	srv, err := switchboard.New(cfg)
	if err != nil {
		closeAll()
		fmt.Fprintf(os.Stderr, "switchboard: %v\n", err)
		return 1
	}
	defer srv.Close()

	var wg sync.WaitGroup
	errs := make(chan error, len(sockets))
	for name, l := range sockets {
		root, err := file.Root(name)
		if err != nil {
			closeAll()
			fmt.Fprintf(os.Stderr, "switchboard: %v\n", err)
			return 1
		}
		log.Info("serving", "socket", name, "path", l.Addr().String(), "labels", root.String())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ctx, name, l, root); err != nil {
				errs <- err
				stop()
			}
		}()
	}
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("sd_notify READY=1 failed", "error", err.Error())
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload(srv, *configPath, file, log)
			}
		}
	}()
	<-ctx.Done()
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	wg.Wait()
	select {
	case err := <-errs:
		fmt.Fprintf(os.Stderr, "switchboard: %v\n", err)
		return 1
	default:
	}
	log.Info("stopped")
	return 0
}

// parseMode reads an octal socket mode; others may never have access.
func parseMode(s string) (os.FileMode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("--mode %q: want an octal mode such as 0600", s)
	}
	if m&0o007 != 0 {
		return 0, fmt.Errorf("--mode %s would let every user on the host reach the socket; use 0600 or 0660", s)
	}
	if m&0o600 != 0o600 {
		return 0, fmt.Errorf("--mode %s: the owner needs read and write", s)
	}
	return os.FileMode(m), nil
}

// activatedListeners takes the sockets systemd passed (LISTEN_FDS), each
// named public or local, each a listening unix stream socket. Anything
// else is an error, not a silent skip. The descriptors are close-on-exec.
func activatedListeners() (map[string]*net.UnixListener, error) {
	files := activation.Files(true) // sets CloseOnExec, unsets the variables
	out := map[string]*net.UnixListener{}
	fail := func(err error) (map[string]*net.UnixListener, error) {
		for _, f := range files {
			_ = f.Close()
		}
		for _, l := range out {
			_ = l.Close()
		}
		return nil, err
	}
	for i, f := range files {
		name := f.Name()
		if name != "public" && name != "local" {
			return fail(fmt.Errorf("activated fd %d is named %q; want FileDescriptorName=public or local", 3+i, name))
		}
		if _, dup := out[name]; dup {
			return fail(fmt.Errorf("two activated sockets named %q", name))
		}
		if err := unixsock.CheckListener(f); err != nil {
			return fail(fmt.Errorf("activated fd %d (%s): %w", 3+i, name, err))
		}
		l, err := net.FileListener(f)
		if err != nil {
			return fail(fmt.Errorf("activated fd %d (%s): %w", 3+i, name, err))
		}
		ul, ok := l.(*net.UnixListener)
		if !ok {
			_ = l.Close()
			return fail(fmt.Errorf("activated fd %d (%s) is not a unix listener", 3+i, name))
		}
		ul.SetUnlinkOnClose(false) // systemd owns the path
		out[name] = ul
	}
	for _, f := range files {
		_ = f.Close() // net.FileListener duplicated each
	}
	return out, nil
}

// newOwnerChecker builds the listener-owner check from the config file.
func newOwnerChecker(o *switchboard.OwnerFile, log *slog.Logger) (*owner.Checker, error) {
	var ttl time.Duration
	if o.CacheTTL != "" {
		var err error
		if ttl, err = time.ParseDuration(o.CacheTTL); err != nil {
			return nil, err
		}
		if ttl == 0 {
			ttl = -1 // "0s" keeps no decision (owner.Config reads 0 as its default)
		}
	}
	cfg := owner.Config{
		ToyboxUID:  o.ToyboxUID,
		OwnRoots:   o.OwnRoots,
		DockerHost: o.DockerHost,
		Exceptions: o.Exceptions,
		CacheTTL:   ttl,
		Logger:     log,
	}
	if o.StateDir != "" {
		cfg.InstalledVats = owner.StateVats(o.StateDir, log)
	}
	return owner.New(cfg)
}
