// Command snoop is a hostile vat for the isolation tests.
//
// On request it tries to read a file, list a folder, dial a unix socket,
// turn a socket its Handle gave it towards an address it was not granted, or
// make the supervisor copy or walk far more than it sends (amplify.go), and
// reports what happened ("ok: ..." or "denied: ..."). It must only ever
// succeed on its own things.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"capnproto.org/go/capnp/v3"
	"golang.org/x/sys/unix"

	"toybox/schema"
	"toybox/schema/wire"
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
	http.HandleFunc("/reconnect", reconnect)
	http.HandleFunc("/amplify/unserved", amplifyUnserved)
	http.HandleFunc("/amplify/relay", amplifyRelay)
	http.HandleFunc("/bind3", func(w http.ResponseWriter, r *http.Request) {
		// fd 3 is a unix socket of the supervisor's network namespace:
		// binding it to a name would squat that name there.
		if err := unix.Bind(3, &unix.SockaddrUnix{Name: "@" + r.URL.Query().Get("name")}); err != nil {
			fmt.Fprintf(w, "denied: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok: bound")
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

// egress asks fd 3 (which a vat has once) for its egress Handle. The
// caller must call done once it no longer uses conn or the Handle.
func egress(ctx context.Context) (conn *wire.Conn, h schema.Handle, done func(), err error) {
	conn, err = wire.FromFile(os.NewFile(3, "vat-cap"), true)
	if err != nil {
		return nil, schema.Handle{}, nil, fmt.Errorf("fd 3: %w", err)
	}
	rc := conn.RPC(capnp.Client{}, nil)
	vat := schema.Vat(rc.Bootstrap(ctx))
	ef, erel := vat.Egress(ctx, nil)
	done = func() {
		erel()
		vat.Release()
		_ = rc.Close()
	}
	eres, err := ef.Struct()
	if err != nil {
		done()
		return nil, schema.Handle{}, nil, fmt.Errorf("egress: %w", err)
	}
	return conn, eres.Handle(), done, nil
}
