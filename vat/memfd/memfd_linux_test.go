package memfd

import (
	"io"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSealedCannotChange: every way of changing a sealed file fails, for
// this descriptor and for a writable one opened through /proc (what a
// holder of a copy could try).
func TestSealedCannotChange(t *testing.T) {
	f, err := Sealed("test", []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !IsSealed(f) {
		t.Error("IsSealed = false; want true")
	}
	b, err := io.ReadAll(f)
	if err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v; want hello from the start", b, err)
	}
	if _, err := f.WriteAt([]byte("HELLO"), 0); err == nil {
		t.Error("a write to the sealed file succeeded")
	}
	if err := f.Truncate(1); err == nil {
		t.Error("shrinking the sealed file succeeded")
	}
	if err := f.Truncate(1 << 20); err == nil {
		t.Error("growing the sealed file succeeded")
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_FUTURE_WRITE); err == nil {
		t.Error("adding a seal succeeded; want the seals sealed")
	}
	w, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), os.O_WRONLY, 0)
	if err == nil {
		defer w.Close()
		if _, err := w.Write([]byte("HELLO")); err == nil {
			t.Error("a write through a reopened descriptor succeeded")
		}
	}
	if _, err := unix.Mmap(int(f.Fd()), 0, 5, unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		t.Error("a shared writable mapping of the sealed file succeeded")
	}
	b, _ = io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if string(b) != "hello" {
		t.Errorf("the file now holds %q; want hello", b)
	}
}

// TestCreateIsNotSealed: Create's file is a scratch file: writable and
// unsealed, close-on-exec.
func TestCreateIsNotSealed(t *testing.T) {
	f, err := Create("scratch")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsSealed(f) {
		t.Error("IsSealed(Create) = true; want false")
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Errorf("writing the scratch file: %v", err)
	}
	if flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("FD_CLOEXEC not set (%#x, %v)", flags, err)
	}
}
