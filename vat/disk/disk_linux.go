//go:build linux

package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Disks makes, mounts and resizes the data folders' images. Its methods
// are safe for concurrent use (each vat's calls come one at a time).
type Disks struct {
	dir  string // <state>/disk
	mkfs string // set once, by the first probe that finds it

	probeMu sync.Mutex
	why     string // why there are no disk limits here ("": there are)
	// roomless says the state file system was full when the probe failed:
	// Support probes again, so that a disk full at start does not leave
	// the whole run without disk limits.
	roomless bool

	mu      sync.Mutex
	mounted map[string]string // data folder → its image ("tmpfs": a run folder), mounted by this process
}

// Open finds whether this host can give data folders a file system of
// their own (it makes and mounts a small image in stateDir/disk, then
// removes it) and returns Disks that do it, or that say why not.
func Open(stateDir string) *Disks {
	d := &Disks{dir: filepath.Join(stateDir, "disk"), mounted: map[string]string{}}
	d.reprobe()
	return d
}

// reprobe finds again whether data folders can be limited (probeMu held,
// or d not yet shared).
func (d *Disks) reprobe() {
	d.why = d.probe()
	d.roomless = d.why != "" && Full(filepath.Dir(d.dir))
}

// Support returns nil where data folders can be limited, else why not
// (wrapping ErrUnsupported) and the fix.
func (d *Disks) Support() error {
	if d == nil {
		return fmt.Errorf("%w: no disk limits were asked for", ErrUnsupported)
	}
	d.probeMu.Lock()
	defer d.probeMu.Unlock()
	if d.why != "" && d.roomless {
		d.reprobe()
	}
	if d.why != "" {
		return fmt.Errorf("%w: %s", ErrUnsupported, d.why)
	}
	return nil
}

func (d *Disks) probe() string {
	if os.Geteuid() != 0 {
		return "mounting a file system of its own on each data folder needs root (fix: run toybox as root; else give <state>/data a file system of its own, so that a vat that fills it leaves the store and the records room)"
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Sprintf("this host has no loop devices (%v; fix: modprobe loop)", err)
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
			if _, serr := os.Stat(p); serr == nil {
				mkfs, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return "mkfs.ext4 is not installed (fix: apt-get install e2fsprogs)"
	}
	if d.mkfs == "" {
		d.mkfs = mkfs
	}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return fmt.Sprintf("making %s: %v", d.dir, err)
	}
	img := filepath.Join(d.dir, ".probe.img")
	mnt := filepath.Join(d.dir, ".probe")
	defer os.Remove(img)
	defer os.Remove(mnt)
	if err := d.makeImage(img, MinBytes); err != nil {
		return err.Error()
	}
	if err := os.Mkdir(mnt, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err.Error()
	}
	if err := mountImage(img, mnt); err != nil {
		return err.Error()
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		return fmt.Sprintf("unmounting %s: %v", mnt, err)
	}
	return ""
}

// image is the image of vat id's data folder.
func (d *Disks) image(id string) string { return filepath.Join(d.dir, id+".img") }

// Image is where vat id's image lies, whether or not there is one ("":
// no disks).
func (d *Disks) Image(id string) string {
	if d == nil {
		return ""
	}
	return d.image(id)
}

// Mount makes dataDir, vat id's data folder, a file system of its own of
// bytes (at least MinBytes): its image is made (the folder's files moved
// in) or resized to that size, and mounted on dataDir unless it is
// already. Call it while no wall of the vat runs. It returns the size in
// force.
func (d *Disks) Mount(id, dataDir string, bytes int64) (int64, error) {
	if err := d.Support(); err != nil {
		return 0, err
	}
	bytes = max(bytes, MinBytes) &^ (4096 - 1)
	img := d.image(id)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return 0, err
	}
	on, err := isMountPoint(dataDir)
	if err != nil {
		return 0, err
	}
	fi, ierr := os.Stat(img)
	if on && ierr == nil && fi.Size() == bytes {
		return bytes, nil
	}
	if on {
		// A new size: resized while nothing has it mounted.
		if err := unix.Unmount(dataDir, 0); err != nil {
			return 0, fmt.Errorf("unmounting %s to resize it: %w", dataDir, err)
		}
		delete(d.mounted, dataDir)
	}
	switch {
	case errors.Is(ierr, fs.ErrNotExist):
		if err := d.fresh(img, dataDir, bytes); err != nil {
			return 0, err
		}
	case ierr != nil:
		return 0, ierr
	case fi.Size() != bytes:
		if err := resize(img, fi.Size(), bytes); err != nil {
			return 0, err
		}
	}
	if err := mountImage(img, dataDir); err != nil {
		return 0, err
	}
	d.mounted[dataDir] = img
	return bytes, nil
}

// fresh makes vat id's image and moves what its data folder holds into it.
func (d *Disks) fresh(img, dataDir string, bytes int64) error {
	tmp := img + ".new"
	_ = os.Remove(tmp)
	if err := d.makeImage(tmp, bytes); err != nil {
		return err
	}
	defer os.Remove(tmp)
	ents, err := os.ReadDir(dataDir)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		mnt := img + ".mnt"
		// A copy cut short (the supervisor killed) left its mount, one
		// or more: gone first, or each try would add one.
		for {
			on, err := isMountPoint(mnt)
			if err != nil || !on {
				break
			}
			if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("unmounting %s, left by a copy cut short: %w", mnt, err)
			}
		}
		if err := os.Mkdir(mnt, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		defer os.Remove(mnt)
		if err := mountImage(tmp, mnt); err != nil {
			return err
		}
		out, cerr := exec.Command("cp", "-a", "--", dataDir+"/.", mnt+"/").CombinedOutput()
		if uerr := unix.Unmount(mnt, 0); cerr == nil && uerr != nil {
			cerr = uerr
		}
		if cerr != nil {
			return fmt.Errorf("moving the data of %s into its own file system (%d MiB): %w: %s", dataDir, bytes>>20, cerr, strings.TrimSpace(string(out)))
		}
	}
	// The copy is kept before the old entries go: a removal cut short
	// leaves them hidden under the mount, never the data lost.
	if err := os.Rename(tmp, img); err != nil {
		return err
	}
	return removeOld(dataDir, ents)
}

// removeOld removes ents, the entries of dataDir moved into its image. The
// vat made them, to any depth: rm, which holds a few descriptors however
// deep a tree is (os.RemoveAll holds one a level, and ran the supervisor
// out of them). A batch of names per rm keeps each command line short.
func removeOld(dataDir string, ents []os.DirEntry) error {
	const batch = 256
	for len(ents) > 0 {
		n := min(len(ents), batch)
		args := []string{"-rf", "--one-file-system", "--"}
		for _, e := range ents[:n] {
			args = append(args, filepath.Join(dataDir, e.Name()))
		}
		ents = ents[n:]
		if out, err := exec.Command("rm", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("removing the data of %s moved into its own file system: %w: %s", dataDir, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// makeImage makes an ext4 image of bytes at path (sparse: it takes room
// only as it fills), with no blocks kept back for root and no lost+found.
func (d *Disks) makeImage(path string, bytes int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("making the disk image: %w", err)
	}
	err = f.Truncate(bytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("sizing the disk image: %w", err)
	}
	out, err := exec.Command(d.mkfs, "-q", "-F", "-m", "0", "-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1", path).CombinedOutput()
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("mkfs.ext4 %s: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// resize makes the image at path bytes long (its file system too): it
// grows, or shrinks where its files fit.
func resize(path string, from, bytes int64) error {
	run := func(name string, args ...string) error {
		out, err := exec.Command(name, args...).CombinedOutput()
		// e2fsck: 1 means it fixed something, which is fine.
		if ee, ok := errors.AsType[*exec.ExitError](err); ok && name == "e2fsck" && ee.ExitCode() == 1 {
			err = nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := waitDetached(path); err != nil {
		return fmt.Errorf("resizing %s: %w", path, err)
	}
	if err := run("e2fsck", "-f", "-p", path); err != nil {
		return fmt.Errorf("checking %s before resizing it: %w", path, err)
	}
	if bytes > from {
		if err := os.Truncate(path, bytes); err != nil {
			return err
		}
	}
	if err := run("resize2fs", path, strconv.FormatInt(bytes>>10, 10)+"K"); err != nil {
		if bytes > from {
			_ = os.Truncate(path, from)
			return fmt.Errorf("resizing %s to %d MiB: %w", path, bytes>>20, err)
		}
		return fmt.Errorf("%w: resizing %s to %d MiB: %w", ErrTooSmall, path, bytes>>20, err)
	}
	if bytes < from {
		return os.Truncate(path, bytes)
	}
	return nil
}

// mountImage loop-mounts the ext4 image img on dir (nosuid, nodev).
func mountImage(img, dir string) error {
	if err := waitDetached(img); err != nil {
		return fmt.Errorf("mounting %s on %s: %w", img, dir, err)
	}
	out, err := exec.Command("mount", "-t", "ext4", "-o", "loop,nosuid,nodev", "--", img, dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mounting %s on %s: %w: %s", img, dir, err, strings.TrimSpace(string(out)))
	}
	// No lost+found: the vat's folder holds what the vat put there.
	_ = os.Remove(filepath.Join(dir, "lost+found"))
	return nil
}

// isMountPoint reports whether dir is the root of a mount (another device
// than its parent's, or the same device's root).
func isMountPoint(dir string) (bool, error) {
	var st, pst unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Lstat(filepath.Dir(dir), &pst); err != nil {
		return false, err
	}
	return st.Dev != pst.Dev || st.Ino == pst.Ino, nil
}

// Unmount unmounts vat id's data folder, dataDir, if it is mounted (its
// data stays in its image).
func (d *Disks) Unmount(dataDir string) error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.unmount(dataDir)
}

func (d *Disks) unmount(dataDir string) error {
	on, err := isMountPoint(dataDir)
	if err != nil || !on {
		delete(d.mounted, dataDir)
		return nil
	}
	if err := unix.Unmount(dataDir, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		// Still in use (a wall ending): detached now, gone once it is.
		if err := unix.Unmount(dataDir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", dataDir, err)
		}
	}
	delete(d.mounted, dataDir)
	return nil
}

// MountRun mounts a tmpfs of RunBytes and RunInodes on runDir, a vat's
// run folder, owned by uid:gid (mode 0700; nosuid, nodev, noexec), unless
// one is mounted there already. Call it while no wall of the vat runs,
// after its folders are made, and UnmountRun once its wall has ended.
func (d *Disks) MountRun(runDir string, uid, gid int) error {
	if err := d.Support(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	on, err := isMountPoint(runDir)
	if err != nil {
		return err
	}
	if on {
		d.mounted[runDir] = "tmpfs"
		return nil
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d", RunBytes, RunInodes, uid, gid)
	if err := unix.Mount("tmpfs", runDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mounting a tmpfs of %d bytes on %s: %w", RunBytes, runDir, os.NewSyscallError("mount", err))
	}
	d.mounted[runDir] = "tmpfs"
	return nil
}

// UnmountRun unmounts the tmpfs MountRun mounted on runDir, if it is
// mounted (what the vat left there goes with it).
func (d *Disks) UnmountRun(runDir string) error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.unmount(runDir)
}

// Remove unmounts dataDir and removes vat id's image: its data is gone.
func (d *Disks) Remove(id, dataDir string) error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.unmount(dataDir); err != nil {
		return err
	}
	if err := os.Remove(d.image(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Close unmounts every data folder this process mounted.
func (d *Disks) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for dir := range d.mounted {
		errs = append(errs, d.unmount(dir))
	}
	return errors.Join(errs...)
}

// MountScratch gives dir, a folder of one job (a package install's
// prepare folder), a file system of its own of bytes (at least MinBytes):
// a new image at img, which must not exist, mounted on dir (nosuid,
// nodev). The image lies beside dir, outside the data folders' images, so
// no vat id names it. Call RemoveScratch when the job ends. It returns
// the size in force.
func (d *Disks) MountScratch(img, dir string, bytes int64) (int64, error) {
	if err := d.Support(); err != nil {
		return 0, err
	}
	bytes = max(bytes, MinBytes) &^ (4096 - 1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.makeImage(img, bytes); err != nil {
		return 0, err
	}
	if err := mountImage(img, dir); err != nil {
		_ = os.Remove(img)
		return 0, err
	}
	d.mounted[dir] = img
	return bytes, nil
}

// RemoveScratch unmounts dir if it is mounted (detached while a process
// still holds it) and removes img, what the job wrote with it. It also
// serves a scratch folder an earlier process left mounted: d may be nil,
// or have no disk limits now.
func (d *Disks) RemoveScratch(img, dir string) error {
	if d != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
	} else {
		d = &Disks{mounted: map[string]string{}}
	}
	if err := d.unmount(dir); err != nil {
		return err
	}
	if err := os.Remove(img); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Full reports whether the file system of dir is full: less than
// fullSlack left to write, or no inode free. A writer there has met
// ENOSPC, or is about to.
func Full(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Bavail*uint64(st.Bsize) < fullSlack || st.Ffree == 0
}

// Size returns the size of vat id's image, or 0 when it has none.
func (d *Disks) Size(id string) int64 {
	if d == nil {
		return 0
	}
	fi, err := os.Stat(d.image(id))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// detachWait is how long mountImage and resize wait for an image's old
// loop device to let go of it after its unmount.
var detachWait = 10 * time.Second

// ErrInUse is wrapped by the error of a mount or resize of an image that a
// loop device still holds after its unmount here.
var ErrInUse = errors.New("the image's file system is still mounted elsewhere")

// waitDetached waits until no loop device holds img. An unmount here
// ends this mount namespace's copy only: a namespace made while the image
// was mounted (a wall of another vat being built, in the moment before
// bubblewrap lets go of the host's mounts) keeps the file system alive,
// and its loop device with it, until it too lets go. An e2fsck or a second
// mount of the image in that moment would work on a file system in use,
// and could tear it (e2fsck has been seen to find "journal has data" and
// replay it under the live file system).
func waitDetached(img string) error {
	var st unix.Stat_t
	if err := unix.Stat(img, &st); err != nil {
		return err
	}
	deadline := time.Now().Add(detachWait)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		dev, err := loopHolding(st.Dev, st.Ino)
		if err != nil || dev == "" {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s still holds %s %v after its unmount here (another mount namespace has it); try again once that ends", ErrInUse, dev, img, detachWait)
		}
		time.Sleep(pause)
	}
}

// loopHolding returns the loop device (/dev/loopN) whose backing file is
// the file dev, ino, or "" when none is.
func loopHolding(dev, ino uint64) (string, error) {
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "loop") {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/block", name, "loop")); err != nil {
			continue // nothing attached
		}
		f, err := os.Open(filepath.Join("/dev", name))
		if err != nil {
			return "", fmt.Errorf("asking %s what it holds: %w", name, err)
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		_ = f.Close()
		if errors.Is(err, unix.ENXIO) {
			continue // detached meanwhile
		}
		if err != nil {
			return "", fmt.Errorf("asking /dev/%s what it holds: %w", name, err)
		}
		if info.Device == dev && info.Inode == ino {
			return "/dev/" + name, nil
		}
	}
	return "", nil
}
