package wire

import (
	"os"
	"syscall"
)

// PeerCred reports the peer's pid, uid and gid (SO_PEERCRED).
func (c *Conn) PeerCred() (pid int32, uid, gid uint32, err error) {
	raw, err := c.uc.SyscallConn()
	if err != nil {
		return 0, 0, 0, err
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, 0, err
	}
	if serr != nil {
		return 0, 0, 0, os.NewSyscallError("getsockopt SO_PEERCRED", serr)
	}
	return cred.Pid, cred.Uid, cred.Gid, nil
}
