package quiet

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSocketCalls connects a socket of its own to a loopback listener
// with the quiet calls alone, and reads back what the kernel says of it.
func TestSocketCalls(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ap := l.Addr().(*net.TCPAddr).AddrPort()
	fd, err := Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(fd)
	if err := SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		t.Fatal(err)
	}
	if v, err := GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY); err != nil || v != 1 {
		t.Fatalf("TCP_NODELAY = %d, %v; want 1", v, err)
	}
	if ok, err := Connected(fd); err != nil || ok {
		t.Fatalf("Connected before connect = %v, %v; want false", ok, err)
	}
	if err := Connect(fd, ap); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		t.Fatalf("Connect: %v", err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st, err := TCPState(fd); err != nil || st != 1 { // TCP_ESTABLISHED
		t.Fatalf("TCPState = %d, %v; want 1 (established)", st, err)
	}
	if ok, err := Connected(fd); err != nil || !ok {
		t.Fatalf("Connected = %v, %v; want true", ok, err)
	}
	if Lingers(fd) {
		t.Fatal("Lingers on a fresh socket")
	}
	if err := Shutdown(fd, unix.SHUT_WR); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the peer read %d, %v after SHUT_WR; want EOF", n, err)
	}
	if err := Shutdown(fd, 7); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("Shutdown(how 7) = %v; want EINVAL", err)
	}
	if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 5}); err != nil {
		t.Fatal(err)
	}
	if !Lingers(fd) {
		t.Fatal("Lingers is false with SO_LINGER on")
	}
	l6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Logf("no IPv6 loopback, IPv6 connect not tried: %v", err)
		return
	}
	defer l6.Close()
	fd6, err := Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(fd6)
	if err := Connect(fd6, l6.Addr().(*net.TCPAddr).AddrPort()); err != nil {
		t.Fatalf("Connect over IPv6: %v", err)
	}
	if err := Connect(fd6, netip.MustParseAddrPort("[::1]:1")); !errors.Is(err, unix.EISCONN) {
		t.Fatalf("a second connect = %v; want EISCONN", err)
	}
	fl, err := FcntlInt(fd, unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK == 0 {
		t.Fatalf("F_GETFL = %#x, %v; want O_NONBLOCK", fl, err)
	}
	ino, err := Inode(fd)
	var st unix.Stat_t
	if err != nil || unix.Fstat(fd, &st) != nil || ino != st.Ino {
		t.Fatalf("Inode = %d, %v; fstat says %d", ino, err, st.Ino)
	}
}

// TestMessages passes bytes and a descriptor over a unix socket pair
// with Sendmsg and Recvmsg.
func TestMessages(t *testing.T) {
	sv, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sv[0])
	defer unix.Close(sv[1])
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	n, err := Sendmsg(sv[0], [][]byte{[]byte("hel"), nil, []byte("lo")}, unix.UnixRights(int(w.Fd())), unix.MSG_DONTWAIT)
	if err != nil || n != 5 {
		t.Fatalf("Sendmsg = %d, %v; want 5", n, err)
	}
	p := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, err := Recvmsg(sv[1], p, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil || !bytes.Equal(p[:n], []byte("hello")) {
		t.Fatalf("Recvmsg = %q, %v; want hello", p[:n], err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages: %v, %v", msgs, err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("rights: %v, %v", fds, err)
	}
	if _, err := unix.Write(fds[0], []byte("x")); err != nil {
		t.Fatalf("writing the pipe passed: %v", err)
	}
	Close(fds[0])
	if _, _, _, err := Recvmsg(sv[1], p, nil, unix.MSG_DONTWAIT); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("Recvmsg on an empty socket = %v; want EAGAIN", err)
	}
	if rev, err := PollNow(sv[1], unix.POLLIN); err != nil || rev&unix.POLLIN != 0 {
		t.Fatalf("PollNow = %#x, %v; want no POLLIN", rev, err)
	}
}
