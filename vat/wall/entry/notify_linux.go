package entry

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"toybox/labels"
	"toybox/schema"
	"toybox/schema/wire/quiet"
	"toybox/vat/procstatus"
)

// Transparent egress. The app runs under a filter of its own (the
// launcher's) whose connect() calls wait for this process's answer through
// a seccomp notification listener. For each one the entry reads the
// address from the app's memory and takes the socket itself (pidfd_getfd),
// checking after each step that the notification is still pending (so a
// reused thread id cannot be read in its place). It never lets the call
// go on in the kernel (SECCOMP_USER_NOTIF_FLAG_CONTINUE would read the
// address and the descriptor again, after the decision): it answers with
// a result of its own.
//
//   - A TCP connect to an address outside the wall (a name's address from
//     the DNS stub, an IP literal, or a loopback port nothing in the wall
//     listens on) is asked of the vat's Handle, as the proxy asks it; the
//     socket the switchboard connected is put in place of the app's
//     (SECCOMP_IOCTL_NOTIF_ADDFD with SETFD) and connect() returns 0. A
//     refusal returns ECONNREFUSED, logged as one record.
//   - A socket that is not of the wall's own network namespace (one put
//     in place before) is never connected again: EISCONN.
//   - Everything else (unix sockets, UDP, the wall's own loopback ports)
//     is connected inside the wall by the connector, on the very socket
//     taken and to the very address read. A UDP connect to the stub's
//     address (resolv.conf's nameserver, port 53) goes to the stub.

// The seccomp user-notification ABI (linux/seccomp.h); x/sys has RECV
// and SEND only.
const (
	ioctlNotifRecv     = 0xc0502100
	ioctlNotifSend     = 0xc0182101
	ioctlNotifIDValid  = 0x40082102
	ioctlNotifAddFD    = 0x40182103
	ioctlNotifSetFlags = 0x40082104
	addFDFlagSetFD     = 1
	notifFDSyncWakeUp  = 1
	pidfdThread        = unix.O_EXCL
	soNetnsCookie      = 71
	maxSockaddr        = 128
)

type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

type seccompAddFD struct {
	ID         uint64
	Flags      uint32
	Srcfd      uint32
	Newfd      uint32
	NewfdFlags uint32
}

// DNSAddr is where the wall's resolv.conf sends lookups (the stub).
var DNSAddr = netip.MustParseAddrPort("127.0.0.53:53")

// notifier answers the app's connect(), bind() and shutdown() calls.
type notifier struct {
	p       *Proxy
	lfd     *os.File        // the listener, in the runtime's poller where it can be
	fd      uintptr         // its descriptor (lfd.Fd would make it blocking again)
	rc      syscall.RawConn // lfd's, nil: lfd is not pollable (serve polls itself)
	conn    *connector
	placed  *placed // the sockets put in place, until the app closes them
	names   *names
	cookie  uint64         // the wall's network namespace
	stub    netip.AddrPort // where the DNS stub listens (UDP)
	stubTCP netip.AddrPort // and over TCP
	schemes *schemes       // connects granted under another scheme alone
	log     *slog.Logger   // the vat's
	ready   chan struct{}  // closed by attach: p, placed and own are set
	schemeL net.Listener   // the scheme listener, served once attached
	refused rateLog        // binds and listens of sockets of other networks
	// listened are the TCP ports something of the app's has listened on
	// in the wall (every listen() is the entry's: listen), or all when
	// that is not known (allListened): a connect to a loopback port not
	// among them asks no one whether something in the wall listens.
	lmu         sync.Mutex
	listened    map[uint16]bool
	allListened bool
	// own are where the entry's own listeners (the proxy, the forwarded
	// ports) listen, for as long as it serves: a connect there stays in
	// the wall without asking the connector whether something listens
	// (a round trip to another process on every proxy client's connect).
	own []netip.AddrPort
}

// ioctlPtr is a quiet ioctl: each one on the listener answers at once
// (RECV is made once poll says a notification is pending). The calls of a
// connect() are quiet ones (package quiet says why).
func ioctlPtr(fd uintptr, req uintptr, p unsafe.Pointer) syscall.Errno {
	return quiet.Ioctl(fd, req, p)
}

// notifWorkers bounds the goroutines kept to answer notifications (each
// idle one holds the stack a connect grew): the app's connects at once,
// as many as it makes, past which each takes a goroutine of its own.
const notifWorkers = 8

// serve receives notifications until the listener has no task left. It
// waits in the runtime's poller, as the entry's sockets do, so that no
// thread sits in a blocking call (with one P, such a thread would hold
// the P from the goroutines it wakes until the runtime took it back).
func (n *notifier) serve(ctx context.Context) {
	// Wake the app's thread on the answering CPU: most of a connect's
	// cost otherwise (kernel 6.6 and later; older ones say EINVAL).
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, n.fd, ioctlNotifSetFlags, notifFDSyncWakeUp)
	pool := newWorkers(notifWorkers, func(sn seccompNotif) { n.handle(ctx, sn) })
	defer pool.close()
	for {
		sn, stop, e := n.recv()
		switch {
		case stop:
			return // no task of the app's is left
		case e == unix.EINTR || e == unix.ENOENT:
			continue
		case e != 0:
			n.log.Warn("transparent egress stopped", keyReason, e.Error())
			return
		}
		pool.run(sn)
	}
}

// recv takes the next notification. RECV itself would block until one
// comes, so it is made once poll says one is pending; the wait between
// is the poller's (or a blocking poll where the listener is not pollable).
func (n *notifier) recv() (sn seccompNotif, stop bool, errno syscall.Errno) {
	take := func(fd uintptr, wait int) bool {
		var revents int16
		var err error
		if wait == 0 {
			revents, err = quiet.PollNow(int(fd), unix.POLLIN)
		} else {
			pf := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			_, err = unix.Poll(pf, wait)
			revents = pf[0].Revents
		}
		if err != nil {
			errno = errnoOf(err, unix.EIO)
			return true
		}
		switch {
		case revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0:
			stop = true
		case revents&unix.POLLIN != 0:
			errno = ioctlPtr(fd, ioctlNotifRecv, unsafe.Pointer(&sn))
		default:
			return false
		}
		return true
	}
	if n.rc == nil {
		for !take(n.fd, -1) {
		}
		return sn, stop, errno
	}
	if err := n.rc.Read(func(fd uintptr) bool { return take(fd, 0) }); err != nil {
		return sn, true, 0
	}
	return sn, stop, errno
}

func (n *notifier) valid(id uint64) bool {
	return ioctlPtr(n.fd, ioctlNotifIDValid, unsafe.Pointer(&id)) == 0
}

// answer ends the app's connect() with errno (0: success).
func (n *notifier) answer(id uint64, errno syscall.Errno) {
	r := seccompResp{ID: id, Error: -int32(errno)}
	_ = ioctlPtr(n.fd, ioctlNotifSend, unsafe.Pointer(&r))
}

// handle answers one connect() or shutdown().
func (n *notifier) handle(ctx context.Context, sn seccompNotif) {
	switch sn.Nr {
	case unix.SYS_CONNECT:
		select {
		case <-n.ready:
		case <-ctx.Done():
			n.answer(sn.ID, unix.ECONNREFUSED) // the wall's network was never set up
			return
		}
	case unix.SYS_SHUTDOWN:
		n.shutdown(sn)
		return
	case unix.SYS_BIND:
		n.bind(sn)
		return
	case unix.SYS_LISTEN:
		n.listen(sn)
		return
	default:
		n.answer(sn.ID, unix.ENOSYS)
		return
	}
	tid, fd := int(sn.Pid), int(int32(sn.Args[0]))
	sa, sock, cookie, ok := n.take(sn, true)
	if !ok {
		return
	}
	defer closeTaken(sock)
	if cookie != n.cookie {
		// A socket of the switchboard's network, put in place before:
		// connect(AF_UNSPEC) would free it to connect anywhere from
		// there. It is connected, and stays so.
		n.answer(sn.ID, unix.EISCONN)
		return
	}
	if ap, ok := inetAddr(sa); ok && ap == DNSAddr {
		// The stub, over UDP or TCP (a resolver retries a truncated
		// answer over TCP; some use TCP alone).
		switch typ, _ := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_TYPE); typ {
		case unix.SOCK_DGRAM:
			sa = rewriteInet(sa, n.stub)
		case unix.SOCK_STREAM:
			sa = rewriteInet(sa, n.stubTCP)
		}
	} else if ap, ok := n.outside(sock, sa); ok {
		n.relay(ctx, sn, tid, fd, sock, sa, ap)
		return
	}
	sa, errno := unixPath(sa, tid)
	if errno != 0 {
		n.answer(sn.ID, errno)
		return
	}
	n.answer(sn.ID, n.conn.connect(sock, sa))
}

// take reads what a connect() or bind() names (the address at args 1
// and 2, when addr is set) and takes the socket (arg 0), checking after
// each step that the call is still pending (so a reused thread id is
// never read in its place), and reads the socket's network namespace.
// When it cannot (a descriptor that is no socket is answered ENOTSOCK, as
// each of these calls would be), it has answered (or the call is gone)
// and ok is false; else the caller closes sock (closeTaken) and answers.
func (n *notifier) take(sn seccompNotif, addr bool) (sa []byte, sock int, cookie uint64, ok bool) {
	tid, fd := int(sn.Pid), int(int32(sn.Args[0]))
	fail := func(errno syscall.Errno) ([]byte, int, uint64, bool) {
		if n.valid(sn.ID) {
			n.answer(sn.ID, errno)
		}
		return nil, -1, 0, false
	}
	if addr {
		alen := int(uint32(sn.Args[2]))
		if alen < 2 || alen > maxSockaddr {
			return fail(unix.EINVAL)
		}
		sa = make([]byte, alen)
		if got, err := quiet.ProcessVMReadv(tid, sa, uintptr(sn.Args[1])); err != nil || got != alen {
			return fail(unix.EFAULT)
		}
		// The thread read is still the one that called: the address is its.
		if !n.valid(sn.ID) {
			return nil, -1, 0, false
		}
	}
	sock, errno := n.takeFD(tid, fd)
	if errno != 0 {
		return fail(errno)
	}
	if !n.valid(sn.ID) {
		closeTaken(sock)
		return nil, -1, 0, false
	}
	cookie, err := quiet.GetsockoptUint64(sock, unix.SOL_SOCKET, soNetnsCookie)
	if err != nil {
		closeTaken(sock)
		return fail(errnoOf(err, unix.ENOTSOCK))
	}
	return sa, sock, cookie, true
}

// shutdown answers the app's shutdown(2), made here on the very socket
// taken, as the kernel would have made it, but for one case. On a socket
// of the switchboard's network (one put in place) whose handshake is
// still under way, the kernel's shutdown would disconnect it
// (inet_shutdown on SYN_SENT), and a disconnected socket can be bound and
// listened on again: a listener on the host's network, from inside the
// wall. That one is answered ENOTCONN, as shutdown answers a socket not
// connected, and stays connecting; the app closes it as it would have.
func (n *notifier) shutdown(sn seccompNotif) {
	_, sock, cookie, ok := n.take(sn, false)
	if !ok {
		return
	}
	defer closeTaken(sock)
	if cookie != n.cookie {
		// Such a socket never goes back to connecting (its connect()
		// is answered EISCONN) nor listens: the state read stays true.
		if st, err := quiet.TCPState(sock); err != nil || st == tcpSynSent || st == tcpListen {
			n.answer(sn.ID, unix.ENOTCONN)
			return
		}
	}
	n.answer(sn.ID, errnoOf(quiet.Shutdown(sock, int(int32(sn.Args[1]))), 0))
}

// bind answers the app's bind(2). A socket of the wall's own network is
// bound by the connector (the entry binds nothing: te_lock), on the very
// socket taken and to the very address read, as a connect inside the wall
// is made. A socket of another network is refused with EPERM: a socket
// the entry put in place is of the host's, and once its connection has
// ended the kernel would bind it there (a port of the host's, held from
// inside the wall; an address of the host's, found out by trying), as it
// would a unix socket the supervisor passed in (an abstract name in the
// host's namespace). toybox-entry's launcher answers the app's binds by
// the same rules until this half runs (te_early).
func (n *notifier) bind(sn seccompNotif) {
	sa, sock, cookie, ok := n.take(sn, true)
	if !ok {
		return
	}
	defer closeTaken(sock)
	if cookie != n.cookie {
		n.refuse(sn, "bind")
		return
	}
	n.answer(sn.ID, n.conn.bind(sock, sa, int(sn.Pid)))
}

// refuse answers a bind or listen of a socket of another network EPERM,
// with a warning in the vat's log (at most one a minute).
func (n *notifier) refuse(sn seccompNotif, call string) {
	if unlogged, ok := n.refused.allow(time.Now()); ok {
		n.log.Warn("a "+call+" of a socket of another network refused (EPERM): the wall binds and listens on its own sockets alone", keyReason, "the socket was put in place by the entry, or passed in from outside the wall", "unlogged", unlogged)
	}
	n.answer(sn.ID, unix.EPERM)
}

// listen answers the app's listen(2) as bind is answered: a socket of the
// wall's own network is made to listen by the connector, on that very
// socket, and the port it listens on is kept (listened); any other is
// refused with EPERM (a socket of the host's network, disconnected by
// some way the kernel has, would listen there).
func (n *notifier) listen(sn seccompNotif) {
	_, sock, cookie, ok := n.take(sn, false)
	if !ok {
		return
	}
	defer closeTaken(sock)
	if cookie != n.cookie {
		n.refuse(sn, "listen")
		return
	}
	errno, port := n.conn.listen(sock, int(int32(sn.Args[1])))
	if errno == 0 && port != 0 {
		n.addListened(port)
	}
	n.answer(sn.ID, errno)
}

// addListened keeps port among those something in the wall listens on.
func (n *notifier) addListened(port uint16) {
	n.lmu.Lock()
	n.listened[port] = true
	n.lmu.Unlock()
}

// mayListen reports whether something in the wall may listen on port
// (it may have closed since).
func (n *notifier) mayListen(port uint16) bool {
	n.lmu.Lock()
	defer n.lmu.Unlock()
	return n.allListened || n.listened[port]
}

// TCP states (include/net/tcp_states.h).
const (
	tcpSynSent = 2
	tcpListen  = 10
)

// closeTaken closes a descriptor taken from the app. Ours may be the
// socket's last (the app's was replaced, or the app closed it meanwhile),
// and a last close waits when the app set SO_LINGER: then it is the
// runtime's kind of call, which lets the other goroutines run; else a
// quiet one.
func closeTaken(sock int) {
	if quiet.Lingers(sock) {
		_ = unix.Close(sock)
	} else {
		_ = quiet.Close(sock)
	}
}

// takeFD duplicates fd of thread tid into this process.
func (n *notifier) takeFD(tid, fd int) (int, syscall.Errno) {
	pfd, err := quiet.PidfdOpen(tid, pidfdThread)
	if errors.Is(err, unix.EINVAL) {
		// Before Linux 6.9: the thread's process, which shares its
		// descriptors (a thread with a table of its own is refused
		// below by the notification check failing, or reads its own).
		pfd, err = quiet.PidfdOpen(tgid(tid), 0)
	}
	if err != nil {
		return -1, errnoOf(err, unix.ESRCH)
	}
	defer quiet.Close(pfd)
	sock, err := quiet.PidfdGetfd(pfd, fd, 0)
	if err != nil {
		return -1, errnoOf(err, unix.EBADF)
	}
	return sock, 0
}

// tgid is the process of thread tid (tid itself if unknown).
func tgid(tid int) int {
	st, err := procstatus.Read(tid)
	if err != nil {
		return tid
	}
	if n, ok := st.Int("Tgid"); ok {
		return n
	}
	return tid
}

func errnoOf(err error, def syscall.Errno) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return def
}

// inetAddr reads an AF_INET or AF_INET6 address (a v4-mapped one as v4).
func inetAddr(sa []byte) (netip.AddrPort, bool) {
	fam := binary.NativeEndian.Uint16(sa)
	switch {
	case fam == unix.AF_INET && len(sa) >= 16:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), binary.BigEndian.Uint16(sa[2:4])), true
	case fam == unix.AF_INET6 && len(sa) >= 24:
		a := netip.AddrFrom16([16]byte(sa[8:24]))
		return netip.AddrPortFrom(a.Unmap(), binary.BigEndian.Uint16(sa[2:4])), true
	}
	return netip.AddrPort{}, false
}

// rewriteInet returns sa aimed at to (a loopback v4 address), in sa's own
// family.
func rewriteInet(sa []byte, to netip.AddrPort) []byte {
	out := bytes.Clone(sa)
	binary.BigEndian.PutUint16(out[2:4], to.Port())
	if binary.NativeEndian.Uint16(sa) == unix.AF_INET {
		copy(out[4:8], to.Addr().AsSlice())
		return out
	}
	a := netip.AddrFrom16(to.Addr().As16()) // v4-mapped
	copy(out[8:24], a.AsSlice())
	return out
}

// unixPath makes a relative unix socket path the calling thread's: the
// connector runs in another working folder.
func unixPath(sa []byte, tid int) ([]byte, syscall.Errno) {
	if binary.NativeEndian.Uint16(sa) != unix.AF_UNIX || len(sa) <= 2 || sa[2] == 0 || sa[2] == '/' {
		return sa, 0
	}
	path := sa[2:]
	if i := bytes.IndexByte(path, 0); i >= 0 {
		path = path[:i]
	}
	abs := "/proc/" + strconv.Itoa(tid) + "/cwd/" + string(path)
	if len(abs) >= 108 {
		return nil, unix.ENAMETOOLONG
	}
	out := make([]byte, 2+len(abs)+1)
	copy(out, sa[:2])
	copy(out[2:], abs)
	return out, 0
}

// outside reports whether a connect of sock to sa leaves the wall: a TCP
// socket of the inet families, to an address that is not the wall's own
// (loopback with nothing listening on that port inside counts as outside:
// the host's, if the owner granted it). Whether something listens is
// asked of the connector only for a port the app has listened on.
func (n *notifier) outside(sock int, sa []byte) (netip.AddrPort, bool) {
	ap, ok := inetAddr(sa)
	if !ok || ap.Port() == 0 || ap.Addr().IsUnspecified() {
		return netip.AddrPort{}, false
	}
	dom, err1 := quiet.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_DOMAIN)
	typ, err2 := quiet.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_TYPE)
	if err1 != nil || err2 != nil || typ != unix.SOCK_STREAM || (dom != unix.AF_INET && dom != unix.AF_INET6) {
		return netip.AddrPort{}, false
	}
	if dom == unix.AF_INET && binary.NativeEndian.Uint16(sa) != unix.AF_INET {
		return netip.AddrPort{}, false // the kernel's own error
	}
	if ap.Addr().IsLoopback() && (slices.Contains(n.own, ap) || (n.mayListen(ap.Port()) && n.conn.listening(ap))) {
		return netip.AddrPort{}, false
	}
	return ap, true
}

// relay asks the Handle for ap and puts the connected socket in place of
// fd; a refusal is ECONNREFUSED. A target granted under another scheme
// alone goes through the scheme listener (throughScheme).
func (n *notifier) relay(ctx context.Context, sn seccompNotif, tid, fd, sock int, sa []byte, ap netip.AddrPort) {
	host := ap.Addr().String()
	if name, ok := n.names.name(ap.Addr()); ok {
		host = name
	} else if n.names.fake(ap.Addr()) {
		t := target{scheme: "tcp", host: host, port: ap.Port()}
		n.p.log(t, false, "the wall's DNS stub gave no name this address", pathTransparent)
		n.answer(sn.ID, unix.ECONNREFUSED)
		return
	}
	t := target{scheme: "tcp", host: host, port: ap.Port()}
	if n.schemes.only(t) {
		n.throughScheme(sn, sock, sa, t)
		return
	}
	// A non-blocking connect is answered once the switchboard has
	// decided and started its dial: the socket comes back with the
	// handshake under way, and the app's thread (an event loop) waits no
	// longer than the decision.
	fl, _ := quiet.FcntlInt(sock, unix.F_GETFL, 0)
	nonblock := fl&unix.O_NONBLOCK != 0
	// The entry keeps the socket it puts in place until the app has
	// closed it (placed): a place for it first, as a proxy client takes.
	done, err := n.placed.reserve()
	if err != nil {
		n.p.log(t, false, err.Error(), pathTransparent)
		if n.valid(sn.ID) {
			n.answer(sn.ID, unix.ECONNREFUSED)
		}
		return
	}
	up, err := n.p.dialFile(ctx, t, nonblock)
	if err != nil {
		done()
		if strings.Contains(err.Error(), labels.SchemeRefused("tcp")) {
			// Granted as http or https alone: the stream is read
			// first (below), and asked for as what it opens with.
			n.schemes.setOnly(t)
			n.throughScheme(sn, sock, sa, t)
			return
		}
		if n.valid(sn.ID) {
			n.answer(sn.ID, unix.ECONNREFUSED)
		}
		return
	}
	kept := false
	defer func() {
		if !kept {
			// Never put in place: ended, so that the switchboard lets go
			// of its duplicate too.
			_ = unix.Shutdown(up, unix.SHUT_RDWR)
			_ = quiet.Close(up)
			done()
		}
	}()
	// The socket keeps the switchboard's options (TCP_NODELAY and
	// SO_KEEPALIVE on); what the app sets once connected acts on it as on
	// its own. Its mode is the app's (the flag lives on the open file:
	// the app's, shared with our dup). Each syscall here is on the app's
	// connect, so none is made that changes nothing.
	if nonblock {
		_, _ = quiet.FcntlInt(up, unix.F_SETFL, unix.O_NONBLOCK)
	} else {
		_, _ = quiet.FcntlInt(up, unix.F_SETFL, 0)
	}
	// Still connecting: the app's non-blocking connect says so, as the
	// kernel's would (POLLOUT and SO_ERROR then tell the end of it).
	var errno syscall.Errno
	if nonblock {
		if ok, err := quiet.Connected(up); err == nil && !ok {
			errno = unix.EINPROGRESS
		}
	}
	add := seccompAddFD{ID: sn.ID, Flags: addFDFlagSetFD, Srcfd: uint32(up), Newfd: uint32(fd)}
	if cloexec(tid, fd) {
		add.NewfdFlags = unix.O_CLOEXEC
	}
	if e := ioctlPtr(n.fd, ioctlNotifAddFD, unsafe.Pointer(&add)); e != 0 {
		n.p.logger.Debug("putting the connected socket in place failed", keyVat, n.p.id, keyTarget, t.String(), keyReason, e.Error())
		if n.valid(sn.ID) {
			n.answer(sn.ID, unix.ECONNABORTED)
		}
		return
	}
	n.answer(sn.ID, errno)
	kept = true
	n.placed.add(up, done)
}

// cloexec reports whether tid's fd is close-on-exec: its fdinfo's flags,
// read with three syscalls (os.ReadFile makes twice as many).
func cloexec(tid, fd int) bool {
	path := "/proc/" + strconv.Itoa(tid) + "/fdinfo/" + strconv.Itoa(fd)
	var buf [512]byte
	n, err := quiet.ReadSmallFile(path, buf[:])
	if err != nil || n <= 0 {
		return true
	}
	for line := range strings.Lines(string(buf[:n])) {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			fl, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err != nil || fl&unix.O_CLOEXEC != 0
		}
	}
	return true
}

// connector is the launcher's connector: it connects sockets of the wall's
// own network (the entry makes no connect itself). Its socket waits in
// the runtime's poller where it can (serve says why).
type connector struct {
	f    *os.File
	rc   syscall.RawConn // f's, nil: f is blocking
	mu   sync.Mutex
	next uint64
	wait map[uint64]chan connReply
	dead bool
}

// connReply is the connector's answer (struct tn_rep): the call's errno
// and, for a listen, the port the socket listens on (0: not an inet one).
type connReply struct {
	errno syscall.Errno
	val   uint32
}

func newConnector(f *os.File) (*connector, error) {
	d, err := unix.Dup(int(f.Fd()))
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(d)
	c := &connector{wait: map[uint64]chan connReply{}}
	c.f, c.rc = polled(os.NewFile(uintptr(d), "connector"), "connector")
	go c.read()
	return c, nil
}

func (c *connector) read() {
	buf := make([]byte, 16)
	for {
		n, err := c.readOne(buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n != 16 {
			c.mu.Lock()
			c.dead = true
			for id, ch := range c.wait {
				ch <- connReply{errno: unix.EACCES}
				delete(c.wait, id)
			}
			c.mu.Unlock()
			return
		}
		id := binary.NativeEndian.Uint64(buf)
		r := connReply{errno: syscall.Errno(int32(binary.NativeEndian.Uint32(buf[8:]))), val: binary.NativeEndian.Uint32(buf[12:])}
		c.mu.Lock()
		if ch, ok := c.wait[id]; ok {
			ch <- r
			delete(c.wait, id)
		}
		c.mu.Unlock()
	}
}

// send writes one request, waiting in the poller while the socket is full.
func (c *connector) send(req, rights []byte) error {
	sendmsg := func(fd uintptr) error {
		for {
			err := unix.Sendmsg(int(fd), req, rights, nil, unix.MSG_NOSIGNAL)
			if err != unix.EINTR {
				return err
			}
		}
	}
	if c.rc == nil {
		return sendmsg(c.f.Fd())
	}
	// Non-blocking here: a quiet call (package quiet says why).
	var err error
	if werr := c.rc.Write(func(fd uintptr) bool {
		_, err = quiet.Sendmsg(int(fd), [][]byte{req}, rights, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
		return !errors.Is(err, unix.EAGAIN)
	}); werr != nil {
		return werr
	}
	return err
}

// readOne reads one answer into buf, waiting in the poller where it can;
// the read itself is then a quiet call.
func (c *connector) readOne(buf []byte) (int, error) {
	if c.rc == nil {
		return c.f.Read(buf)
	}
	var n int
	var rerr error
	if err := c.rc.Read(func(fd uintptr) bool {
		n, _, _, rerr = quiet.Recvmsg(int(fd), buf, nil, unix.MSG_DONTWAIT)
		return !errors.Is(rerr, unix.EAGAIN)
	}); err != nil {
		return 0, err
	}
	if rerr == nil && n == 0 {
		return 0, io.EOF
	}
	return n, rerr
}

// Connector requests (struct tn_req's op).
const (
	opConnect = 0
	opProbe   = 1
	opBind    = 2
	opListen  = 3
)

// listening reports whether something in the wall listens where a
// connect to ap would reach it: a bind there (SO_REUSEADDR) fails. (The
// kernel's /proc/net/tcp would tell too, at the cost of a walk over every
// connection of the host's: measured, 3 ms a connect with the bench's
// 4,000 host connections, against the connector's round trip.)
func (c *connector) listening(ap netip.AddrPort) bool {
	var sa []byte
	if ap.Addr().Is4() {
		sa = make([]byte, 16)
		binary.NativeEndian.PutUint16(sa, unix.AF_INET)
		copy(sa[4:8], ap.Addr().AsSlice())
	} else {
		sa = make([]byte, 28)
		binary.NativeEndian.PutUint16(sa, unix.AF_INET6)
		copy(sa[8:24], ap.Addr().AsSlice())
	}
	binary.BigEndian.PutUint16(sa[2:4], ap.Port())
	return c.call(opProbe, -1, sa, 0, 0).errno == unix.EADDRINUSE
}

// connect connects sock to sa in the wall and returns connect's errno.
// Without a connector (it ended) every connect fails: EACCES.
func (c *connector) connect(sock int, sa []byte) syscall.Errno {
	return c.call(opConnect, sock, sa, 0, 0).errno
}

// bind binds sock to sa as thread tid would (a relative unix path from
// its working folder, the file under its umask) and returns bind's errno.
// Without a connector every bind fails: EACCES.
func (c *connector) bind(sock int, sa []byte, tid int) syscall.Errno {
	return c.call(opBind, sock, sa, tid, 0).errno
}

// listen makes sock listen with backlog and returns listen's errno and
// the port it listens on (0: not an inet socket). Without a connector
// every listen fails: EACCES.
func (c *connector) listen(sock, backlog int) (syscall.Errno, uint16) {
	r := c.call(opListen, sock, nil, 0, uint32(int32(backlog)))
	return r.errno, uint16(r.val)
}

// call sends one request: op on sock with sa, for thread tid, with arg
// (the backlog of a listen).
func (c *connector) call(op uint32, sock int, sa []byte, tid int, arg uint32) connReply {
	ch := make(chan connReply, 1)
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return connReply{errno: unix.EACCES}
	}
	c.next++
	id := c.next
	c.wait[id] = ch
	c.mu.Unlock()
	req := make([]byte, 8+4+4+4+4+maxSockaddr) // struct tn_req
	binary.NativeEndian.PutUint64(req, id)
	binary.NativeEndian.PutUint32(req[8:], uint32(len(sa)))
	binary.NativeEndian.PutUint32(req[12:], op)
	binary.NativeEndian.PutUint32(req[16:], uint32(tid))
	binary.NativeEndian.PutUint32(req[20:], arg)
	copy(req[24:], sa)
	var rights []byte
	if sock >= 0 {
		rights = unix.UnixRights(sock)
	}
	if err := c.send(req, rights); err != nil {
		c.mu.Lock()
		delete(c.wait, id)
		c.mu.Unlock()
		return connReply{errno: unix.EACCES}
	}
	return <-ch
}

// pathTransparent is the log's path of a connection put in place of the
// app's own socket.
const pathTransparent = "transparent"

// dialFile asks the Handle for a connection to t and returns the socket
// the switchboard connected (with inProgress, perhaps still connecting).
// Every decision is logged (path transparent).
func (p *Proxy) dialFile(ctx context.Context, t target, inProgress bool) (int, error) {
	if !p.handle.IsValid() {
		p.log(t, false, ErrNoGrant.Error(), pathTransparent)
		return -1, ErrNoGrant
	}
	if f, err := p.dialDirect(ctx, t, nil, inProgress, pathTransparent); !errors.Is(err, errRelay) {
		return f, err
	}
	fut, rel := p.handle.Connect(ctx, func(ps schema.Handle_connect_Params) error {
		if err := setTarget(ps.NewTarget, t); err != nil {
			return err
		}
		ps.SetWantFd(true)
		ps.SetInProgress(inProgress)
		return nil
	})
	defer rel()
	res, err := fut.Struct()
	if err != nil {
		p.log(t, false, err.Error(), pathTransparent)
		return -1, err
	}
	seq := res.Fd()
	if seq == 0 {
		if up := res.Upstream(); up.IsValid() {
			up.Release()
		}
		p.log(t, false, "the Handle returned no socket", pathTransparent)
		return -1, errors.New("the Handle returned no socket")
	}
	fd, err := p.conn.TakeRawFD(seq)
	if err != nil {
		p.log(t, false, "taking the connected socket: "+err.Error(), pathTransparent)
		return -1, err
	}
	p.log(t, true, "", pathTransparent)
	return fd, nil
}

// startTransparent serves the app's notified calls and the DNS stub when
// ls holds a notification listener (nil and a no-op func when it holds
// none); it takes ls.Notify, ls.DNS, ls.DNSTCP, ls.Scheme and
// ls.Connector (closed on error, and by the returned func). It starts as
// the entry does, before the supervisor has answered: the app's bind()
// (a server's first call) and shutdown() are answered from then on; its
// connect() calls wait until attach gives the proxy.
func startTransparent(ctx context.Context, id string, logger *slog.Logger, ls *Listeners) (*notifier, func(), error) {
	if ls.Notify == nil {
		for _, f := range []*os.File{ls.DNS, ls.DNSTCP, ls.Scheme, ls.Connector} {
			if f != nil {
				_ = f.Close()
			}
		}
		if ls.NotifyErr != nil {
			logger.Warn("transparent egress unavailable: the proxy alone serves this wall", keyVat, id, keyReason, ls.NotifyErr.Error())
		}
		return nil, func() {}, nil
	}
	fail := func(err error) (*notifier, func(), error) {
		for _, f := range []*os.File{ls.Notify, ls.DNS, ls.DNSTCP, ls.Scheme, ls.Connector} {
			if f != nil {
				_ = f.Close()
			}
		}
		return nil, nil, err
	}
	if ls.DNS == nil || ls.DNSTCP == nil || ls.Scheme == nil || ls.Connector == nil {
		return fail(errors.New("a notification listener without the DNS sockets, the scheme listener or the connector"))
	}
	ssa, err := unix.Getsockname(int(ls.Scheme.Fd()))
	if err != nil {
		return fail(fmt.Errorf("the scheme listener's address: %w", err))
	}
	sin4, ok := ssa.(*unix.SockaddrInet4)
	if !ok {
		return fail(fmt.Errorf("the scheme listener is bound to %T, not an IPv4 address", ssa))
	}
	tsa, err := unix.Getsockname(int(ls.DNSTCP.Fd()))
	if err != nil {
		return fail(fmt.Errorf("the DNS TCP socket's address: %w", err))
	}
	tin4, ok := tsa.(*unix.SockaddrInet4)
	if !ok {
		return fail(fmt.Errorf("the DNS TCP socket is bound to %T, not an IPv4 address", tsa))
	}
	cookie, err := unix.GetsockoptUint64(int(ls.DNS.Fd()), unix.SOL_SOCKET, soNetnsCookie)
	if err != nil {
		return fail(fmt.Errorf("the wall's network namespace: %w", os.NewSyscallError("getsockopt SO_NETNS_COOKIE", err)))
	}
	sa, err := unix.Getsockname(int(ls.DNS.Fd()))
	if err != nil {
		return fail(fmt.Errorf("the DNS socket's address: %w", err))
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		return fail(fmt.Errorf("the DNS socket is bound to %T, not an IPv4 address", sa))
	}
	pc, err := net.FilePacketConn(ls.DNS)
	if err != nil {
		return fail(fmt.Errorf("the DNS socket: %w", err))
	}
	_ = ls.DNS.Close()
	tl, err := net.FileListener(ls.DNSTCP)
	if err != nil {
		_ = pc.Close()
		ls.DNS = nil
		return fail(fmt.Errorf("the DNS TCP socket: %w", err))
	}
	_ = ls.DNSTCP.Close()
	sl, err := net.FileListener(ls.Scheme)
	if err != nil {
		_ = pc.Close()
		_ = tl.Close()
		ls.DNS, ls.DNSTCP = nil, nil
		return fail(fmt.Errorf("the scheme listener: %w", err))
	}
	_ = ls.Scheme.Close()
	conn, err := newConnector(ls.Connector)
	if err != nil {
		_ = pc.Close()
		_ = tl.Close()
		_ = sl.Close()
		_ = ls.Notify.Close()
		return nil, nil, fmt.Errorf("the connector's socket: %w", err)
	}
	log := logger.With(keyVat, id)
	n := &notifier{
		conn: conn, names: newNames(), cookie: cookie, log: log,
		ready:   make(chan struct{}),
		stub:    netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port)),
		stubTCP: netip.AddrPortFrom(netip.AddrFrom4(tin4.Addr), uint16(tin4.Port)),
		schemes: newSchemes(netip.AddrPortFrom(netip.AddrFrom4(sin4.Addr), uint16(sin4.Port))),
		schemeL: sl,
		// The launcher's own listeners, and those the app listened on
		// before this half ran.
		listened:    map[uint16]bool{uint16(tin4.Port): true, uint16(sin4.Port): true},
		allListened: ls.EarlyListenedAll,
	}
	for _, port := range ls.EarlyListened {
		n.listened[port] = true
	}
	n.lfd, n.rc = polled(ls.Notify, "seccomp-notify")
	n.fd = uintptr(n.fdOf())
	if ls.EarlyRefused > 0 {
		log.Warn("binds or listens of sockets of another network refused (EPERM) before the entry served: the wall binds and listens on its own sockets alone", "refused", ls.EarlyRefused)
	}
	go serveDNS(pc, n.names, log)
	go serveDNSTCP(tl, n.names, log)
	if len(ls.Pending) == int(unsafe.Sizeof(seccompNotif{})) {
		var sn seccompNotif
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&sn)), len(ls.Pending)), ls.Pending)
		go n.handle(ctx, sn)
	}
	go n.serve(ctx)
	return n, func() { _ = pc.Close(); _ = tl.Close(); _ = sl.Close() }, nil
}

// attach gives the notifier the proxy its connects go through, and own,
// the entry's listeners (the proxy, the forwards): the connects waiting
// go on. A nil notifier (no transparent egress) does nothing.
func (n *notifier) attach(ctx context.Context, p *Proxy, own []net.Listener) {
	if n == nil {
		return
	}
	n.p = p
	n.placed = newPlaced(p.gate, n.log)
	for _, l := range own {
		if a, ok := l.Addr().(*net.TCPAddr); ok {
			ap := a.AddrPort()
			n.own = append(n.own, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		}
	}
	go n.serveSchemes(ctx, n.schemeL)
	close(n.ready)
}

// polled returns f in the runtime's poller (non-blocking), with its
// RawConn, or f as it was and nil where it cannot be (the poller refuses
// what epoll cannot wait on).
func polled(f *os.File, name string) (*os.File, syscall.RawConn) {
	d, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return f, nil
	}
	if err := unix.SetNonblock(d, true); err != nil {
		_ = unix.Close(d)
		return f, nil
	}
	nf := os.NewFile(uintptr(d), name)
	if nf.SetReadDeadline(time.Time{}) != nil { // not in the poller
		_ = nf.Close()
		return f, nil
	}
	rc, err := nf.SyscallConn()
	if err != nil {
		_ = nf.Close()
		return f, nil
	}
	_ = f.Close()
	return nf, rc
}

// fdOf is the listener's descriptor, read without making it blocking.
func (n *notifier) fdOf() int {
	if n.rc == nil {
		return int(n.lfd.Fd())
	}
	fd := -1
	_ = n.rc.Control(func(d uintptr) { fd = int(d) })
	return fd
}
