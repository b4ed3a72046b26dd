package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"toybox/schema"
)

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
