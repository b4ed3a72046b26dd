package memfd

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// seals make a file's contents final: no write, no growing, no shrinking,
// and no removing or adding seals.
const seals = unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL

// Create returns an empty, writable in-memory file named name,
// close-on-exec, that may be sealed later. The caller must close it.
func Create(name string) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// Sealed returns an in-memory file named name holding data, sealed against
// every change and positioned at its start. The caller must close it.
func Sealed(name string, data []byte) (*os.File, error) {
	f, err := Create(name)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("writing %s: %w", name, err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("sealing %s: %w", name, os.NewSyscallError("fcntl F_ADD_SEALS", err))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("rewinding %s: %w", name, err)
	}
	return f, nil
}

// IsSealed reports whether f carries every seal Sealed sets.
func IsSealed(f *os.File) bool {
	got, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	return err == nil && got&seals == seals
}
