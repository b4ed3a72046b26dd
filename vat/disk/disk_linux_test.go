package disk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
)

// fill copies mib MiB of /dev/zero into a new file at p, and returns how
// many whole MiB it wrote before it stopped.
func fill(p string, mib int) (int, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	zero, err := os.Open("/dev/zero")
	if err != nil {
		return 0, err
	}
	defer zero.Close()
	n, err := io.CopyN(f, zero, int64(mib)<<20)
	if err == nil {
		err = f.Sync()
	}
	return int(n >> 20), err
}

// openDisks opens the Disks of state, closed when the test ends, or
// reports that this host has none.
func openDisks(t *testing.T, state string) *Disks {
	t.Helper()
	d := Open(state)
	t.Cleanup(func() { _ = d.Close() })
	if err := d.Support(); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	return d
}

// TestDiskLimit: a data folder given a file system of its own keeps what
// it held, stops a writer at its size (ENOSPC), grows and shrinks to a new
// limit, and goes with Remove.
func TestDiskLimit(t *testing.T) {
	testenv.RequireRoot(t)
	state := t.TempDir()
	d := openDisks(t, state)
	data := filepath.Join(state, "data", "alice")
	if err := os.MkdirAll(filepath.Join(data, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "sub", "old.txt"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	size, err := d.Mount("alice", data, 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	if size != 32<<20 {
		t.Errorf("Mount = %d; want %d", size, 32<<20)
	}
	if on, _ := isMountPoint(data); !on {
		t.Fatal("the data folder is not a mount of its own")
	}
	if b, err := os.ReadFile(filepath.Join(data, "sub", "old.txt")); err != nil || string(b) != "kept" {
		t.Errorf("the folder's file after the move = %q, %v; want kept", b, err)
	}
	n, err := fill(filepath.Join(data, "fill"), 64)
	if !errors.Is(err, unix.ENOSPC) || n > 32 {
		t.Errorf("wrote %d MiB into a 32 MiB data folder (%v); want ENOSPC first", n, err)
	}
	if err := os.Remove(filepath.Join(data, "fill")); err != nil {
		t.Fatal(err)
	}
	// A new limit: resized, its files kept.
	for _, want := range []int64{64 << 20, 24 << 20} {
		if size, err := d.Mount("alice", data, want); err != nil || size != want {
			t.Fatalf("Mount to %d MiB = %d, %v", want>>20, size, err)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(data, &st); err != nil {
			t.Fatal(err)
		}
		if got := int64(st.Blocks) * st.Bsize; got > want || got < want/2 {
			t.Errorf("the file system holds %d bytes; want about %d", got, want)
		}
		if _, err := os.Stat(filepath.Join(data, "sub", "old.txt")); err != nil {
			t.Errorf("after a resize: %v", err)
		}
	}
	if err := d.Remove("alice", data); err != nil {
		t.Fatal(err)
	}
	if on, _ := isMountPoint(data); on {
		t.Error("still mounted after Remove")
	}
	if d.Size("alice") != 0 {
		t.Error("the image is still there after Remove")
	}
}

// TestDiskMoveDeepData: a vat's data folder, filled before its disk
// limit was first set, may hold a chain of folders deeper than the
// supervisor's descriptor limit (the vat's to make). Mount moves it into
// the folder's own file system and then removes the old entries.
// os.RemoveAll holds a descriptor a level: it ran the supervisor out of
// them and failed, so the vat could not start with its limit.
func TestDiskMoveDeepData(t *testing.T) {
	testenv.RequireRoot(t)
	state := t.TempDir()
	// Whatever happens, the chain goes (t.TempDir's os.RemoveAll could not).
	t.Cleanup(func() { _ = exec.Command("rm", "-rf", state).Run() })
	d := openDisks(t, state)
	data := filepath.Join(state, "data", "deep")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	testenv.DeepChain(t, data, 1000)
	testenv.LowNoFile(t, 256)
	if _, err := d.Mount("deep", data, 16<<20); err != nil {
		t.Fatalf("Mount of a data folder holding a chain 1000 deep: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(data, "d", "d", "d")); err != nil || !fi.IsDir() {
		t.Errorf("the chain in the folder's own file system: %v", err)
	}
	if err := d.Remove("deep", data); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(data); err != nil || len(ents) != 0 {
		t.Errorf("the state file system's folder under the mount holds %d entries (%v); want none", len(ents), err)
	}
}

// TestRunFolder: a run folder given a tmpfs of its own stops a writer at
// RunBytes (ENOSPC) and is its owner's; a second MountRun keeps the mount
// (one a killed supervisor left), and UnmountRun removes it.
func TestRunFolder(t *testing.T) {
	testenv.RequireRoot(t)
	state := t.TempDir()
	d := openDisks(t, state)
	run := filepath.Join(state, "run", "alice")
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := d.MountRun(run, 1000042, 1000042); err != nil {
			t.Fatal(err)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(run, &st); err != nil || st.Uid != 1000042 || st.Mode&0o777 != 0o700 {
		t.Errorf("the run folder: uid %d, mode %o (%v); want 1000042, 0700", st.Uid, st.Mode&0o777, err)
	}
	n, err := fill(filepath.Join(run, "fill"), 8)
	if !errors.Is(err, unix.ENOSPC) || n > RunBytes>>20 {
		t.Errorf("writing 8 MiB into the run folder: %d MiB, %v; want ENOSPC within %d bytes", n, err, RunBytes)
	}
	if err := d.UnmountRun(run); err != nil {
		t.Fatal(err)
	}
	if on, err := isMountPoint(run); err != nil || on {
		t.Errorf("after UnmountRun: mounted %v (%v); want not", on, err)
	}
	if _, err := os.Stat(filepath.Join(run, "fill")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("what the vat wrote there outlived UnmountRun: %v", err)
	}
}

// TestSupportAfterAFullDisk: Disks opened on a full state disk cannot make
// their probe's image, and said for the whole run that this host has no
// disk limits: vats ran on their bare data folders, package installs in
// unbounded prepare folders, until toybox started again. A probe that
// failed on a full disk is tried again by the next Support.
func TestSupportAfterAFullDisk(t *testing.T) {
	testenv.RequireRoot(t)
	if err := Open(t.TempDir()).Support(); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	state := t.TempDir()
	if err := unix.Mount("tmpfs", state, "tmpfs", 0, "size=32m,mode=0755"); err != nil {
		testenv.Unavailable(t, "cannot mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(state, unix.MNT_DETACH) })
	filler := filepath.Join(state, "filler")
	if _, err := fill(filler, 64); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("filling the state disk: %v; want ENOSPC", err)
	}
	d := Open(state)
	t.Cleanup(func() { _ = d.Close() })
	if err := d.Support(); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Support on a full disk = %v; want ErrUnsupported", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := d.Support(); err != nil {
		t.Errorf("Support with room again = %v; want nil", err)
	}
}

// TestMoveAfterAKilledMove: the first Mount of a data folder that holds
// files copies them into the new image through a mount beside it
// (<img>.mnt). A supervisor killed during that copy left the mount, and
// the next Mount mounted the new image over it and left both: a loop
// device, a mount and the folder for good. Now it is cleared first.
func TestMoveAfterAKilledMove(t *testing.T) {
	testenv.RequireRoot(t)
	state := t.TempDir()
	d := openDisks(t, state)
	data := filepath.Join(state, "data", "alice")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "old.txt"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What the killed copy left: the half-made image, mounted beside.
	img := d.image("alice")
	mnt := img + ".mnt"
	if err := d.makeImage(img+".new", 16<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mountImage(img+".new", mnt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for unix.Unmount(mnt, unix.MNT_DETACH) == nil {
		}
	})
	if _, err := d.Mount("alice", data, 16<<20); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(data, "old.txt")); err != nil || string(b) != "kept" {
		t.Errorf("old.txt in the folder's own file system = %q, %v; want kept", b, err)
	}
	if on, err := isMountPoint(mnt); err == nil || on {
		t.Errorf("%s after the Mount: mounted %v, %v; want it gone", mnt, on, err)
	}
}

// holdMounts starts a process in a mount namespace of its own, a copy of
// this one's mounts (what bubblewrap makes for a moment as it builds a
// wall), and returns a func that ends it.
func holdMounts(t *testing.T) func() {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.Unavailable(t, "unshare (util-linux) is not installed")
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	end := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(end)
	// The copy is made once unshare has called unshare(2): its mounts
	// are then its own.
	testenv.WaitFor(t, 10*time.Second, func() error {
		own, err := os.Readlink("/proc/self/ns/mnt")
		if err != nil {
			return err
		}
		its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
		if err != nil {
			return err
		}
		if its == own {
			return errors.New("unshare has not made its mount namespace yet")
		}
		return nil
	})
	return end
}

// TestResizeWhileMountedElsewhere: a data folder's file system that
// another mount namespace still holds after the unmount here (a wall of
// another vat being built took a copy of the host's mounts) is not
// checked, resized or mounted again until it lets go: e2fsck on the
// image then would replay the journal under the live file system. The
// resize waits for it; past the wait it fails, naming why, with the
// image and its files as they were.
func TestResizeWhileMountedElsewhere(t *testing.T) {
	testenv.RequireRoot(t)
	state := t.TempDir()
	d := openDisks(t, state)
	data := filepath.Join(state, "data", "alice")
	if _, err := d.Mount("alice", data, 32<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "kept.txt"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Held past the wait: refused, the image untouched.
	defer func(w time.Duration) { detachWait = w }(detachWait)
	detachWait = 300 * time.Millisecond
	end := holdMounts(t)
	_, err := d.Mount("alice", data, 64<<20)
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("resize while another namespace holds the file system = %v; want %v", err, ErrInUse)
	}
	if got := d.Size("alice"); got != 32<<20 {
		t.Errorf("the refused resize left the image at %d bytes; want it untouched", got)
	}

	// Held for a moment: the resize waits for it, and goes through.
	detachWait = 10 * time.Second
	go func() {
		time.Sleep(200 * time.Millisecond)
		end()
	}()
	if size, err := d.Mount("alice", data, 64<<20); err != nil || size != 64<<20 {
		t.Fatalf("resize once the other namespace let go = %d, %v", size, err)
	}
	if b, err := os.ReadFile(filepath.Join(data, "kept.txt")); err != nil || string(b) != "kept" {
		t.Errorf("after the resize: %q, %v; want kept", b, err)
	}
}
