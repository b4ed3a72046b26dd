//go:build !linux

package wire

import "errors"

// PeerCred reports the peer's pid, uid and gid. Only Linux has SO_PEERCRED.
func (c *Conn) PeerCred() (pid int32, uid, gid uint32, err error) {
	return 0, 0, 0, errors.ErrUnsupported
}
