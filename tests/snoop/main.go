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
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

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

// reconnect asks the vat's Handle (fd 3) for a socket connected to the
// granted address (wantFd), then tries to turn it elsewhere:
// connect(AF_UNSPEC) disconnects a TCP socket, after which it could
// connect, bind or listen anew from wherever it was made. Each step's
// outcome is one line; "ok: reached" means the attack worked.
//
//	GET /reconnect?granted=HOST:PORT&target=IPV4:PORT
func reconnect(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	say := func(f string, a ...any) { fmt.Fprintf(w, f+"\n", a...) }
	gh, gp, _ := net.SplitHostPort(q.Get("granted"))
	gport, _ := strconv.Atoi(gp)
	target, err := netip.ParseAddrPort(q.Get("target"))
	if err != nil || !target.Addr().Is4() {
		say("denied: target must be IPV4:PORT")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	conn, h, done, err := egress(ctx)
	if err != nil {
		say("denied: %v", err)
		return
	}
	defer done()
	cf, crel := h.Connect(ctx, func(ps schema.Handle_connect_Params) error {
		t, err := ps.NewTarget()
		if err != nil {
			return err
		}
		_ = t.SetScheme("tcp")
		_ = t.SetHost(gh)
		t.SetPort(uint16(gport))
		ps.SetWantFd(true)
		return nil
	})
	defer crel()
	cres, err := cf.Struct()
	if err != nil {
		say("denied: the granted connect: %v", err)
		return
	}
	sock, err := conn.TakeFD(cres.Fd())
	if err != nil {
		say("denied: no socket: %v", err)
		return
	}
	defer sock.Close()
	fd := int(sock.Fd())
	domain, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	say("socket: domain %d", domain)
	var unspec [16]byte // a sockaddr whose family is AF_UNSPEC (0)
	for i := range 2 {
		_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&unspec[0])), uintptr(len(unspec)))
		say("connect(AF_UNSPEC) %d: errno %d", i+1, e)
		time.Sleep(300 * time.Millisecond) // the switchboard notices a hang-up
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@toybox-snoop-squat"}); err == nil {
		say("ok: bound an abstract name in the supervisor's network")
	} else {
		say("bind(@toybox-snoop-squat): %v", err)
	}
	_ = unix.SetNonblock(fd, false)
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 3})
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(target.Port()), Addr: target.Addr().As4()}); err != nil {
		say("denied: connect(%s): %v", target, err)
		return
	}
	_, _ = unix.Write(fd, []byte("snoop\n"))
	buf := make([]byte, 512)
	n, err := unix.Read(fd, buf)
	if n <= 0 {
		say("denied: connected to %s but read nothing: %v", target, err)
		return
	}
	say("ok: reached %s: %q", target, buf[:n])
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
