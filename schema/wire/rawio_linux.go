package wire

import (
	"errors"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"toybox/schema/wire/quiet"
)

// recvmsg reads one message's bytes and descriptors into p and c.oob,
// waiting in the runtime's poller, with the call itself a quiet one
// (package quiet says why).
func (c *Conn) recvmsg(p []byte) (n, oobn, flags int, err error) {
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return 0, 0, 0, err
	}
	var rerr error
	werr := rc.Read(func(fd uintptr) bool {
		n, oobn, flags, rerr = quiet.Recvmsg(int(fd), p, c.oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	if werr != nil {
		return 0, 0, 0, werr
	}
	if rerr != nil {
		return 0, 0, 0, os.NewSyscallError("recvmsg", rerr)
	}
	if n == 0 && oobn == 0 && len(p) > 0 {
		return 0, 0, 0, io.EOF
	}
	return n, oobn, flags, nil
}

// sendmsgNow is one non-blocking sendmsg(2), a quiet one.
func sendmsgNow(fd int, bufs net.Buffers, oob []byte) (int, error) {
	return quiet.Sendmsg(fd, bufs, oob, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
}
