//go:build !linux

package wire

import (
	"net"

	"golang.org/x/sys/unix"
)

// recvmsg reads one message's bytes and descriptors into p and c.oob.
func (c *Conn) recvmsg(p []byte) (n, oobn, flags int, err error) {
	n, oobn, flags, _, err = c.uc.ReadMsgUnix(p, c.oob)
	return n, oobn, flags, err
}

// sendmsgNow is one non-blocking sendmsg(2).
func sendmsgNow(fd int, bufs net.Buffers, oob []byte) (int, error) {
	return unix.SendmsgBuffers(fd, bufs, oob, nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
}
