package wire

import (
	"golang.org/x/sys/unix"

	"toybox/schema/wire/quiet"
)

// The duplicate a descriptor is sent as, and its close once sent, are on
// every hand-over's path: quiet calls.

func fcntlDupCloexec(fd int) (int, error) { return quiet.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }

func closeFD(fd int) error { return quiet.Close(fd) }
