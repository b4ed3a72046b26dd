package sockpair

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPair(t *testing.T) {
	mine, theirs, err := Pair("test-pair")
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	defer theirs.Close()
	if theirs.Name() != "test-pair" {
		t.Errorf("theirs.Name() = %q; want test-pair", theirs.Name())
	}
	// Theirs is already bound: its holder cannot bind it to a name.
	fd := int(theirs.Fd())
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := sa.(*unix.SockaddrUnix); !ok || u.Name == "" {
		t.Errorf("theirs is bound to %#v; want an autobound abstract name", sa)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@toybox-squat-test"}); err == nil {
		t.Error("binding theirs to a chosen name succeeded; want EINVAL")
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("theirs: FD_CLOEXEC not set (%#x, %v)", flags, err)
	}
	// Bytes flow both ways.
	tc, err := net.FileConn(theirs)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	go func() { _, _ = mine.Write([]byte("ping")) }()
	buf := make([]byte, 4)
	if _, err := io.ReadFull(tc, buf); err != nil || string(buf) != "ping" {
		t.Errorf("read %q, %v; want ping", buf, err)
	}
	_ = tc.Close()
	_ = theirs.Close()
	if _, err := mine.Read(buf); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after their end closed = %v; want EOF", err)
	}
}
