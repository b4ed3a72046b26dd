package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"

	"toybox/vat/store"
	"toybox/vat/supervisor"
	"toybox/vat/wall"
)

// diskRoom is what the vats' disk limits and the prepare folders may take
// of the state file system, against its room.
type diskRoom struct {
	size, free int64 // the state file system's bytes, and those free to the supervisor
	vats       int   // vats with a disk limit
	unbounded  int   // vats without one (--wall-disk-mib 0)
	limits     int64 // the sum of the vats' limits
	written    int64 // what their images already take, at most their limits
	installs   int   // --installs
	prepare    int64 // installs × the prepare folder's size
}

// more is what the limits and prepare folders may still take.
func (r diskRoom) more() int64 { return r.limits - r.written + r.prepare }

// readDiskRoom reads stateDir's file system and its vats' records and
// images. opDisk is serve's --wall-disk-mib in bytes, installs its
// --installs.
func readDiskRoom(stateDir string, opDisk int64, installs int) (diskRoom, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(stateDir, &st); err != nil {
		return diskRoom{}, fmt.Errorf("reading the state file system's size: %w", err)
	}
	r := diskRoom{
		size: int64(st.Blocks) * int64(st.Bsize), free: int64(st.Bavail) * int64(st.Bsize),
		installs: installs, prepare: supervisor.DefaultPrepareBytes * int64(installs),
	}
	recs, bad, err := store.ReadRecords(stateDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return diskRoom{}, fmt.Errorf("reading the vats' records: %w", err)
	}
	for _, d := range bad {
		rec := store.Record{ID: d.ID}
		if d.Good != nil {
			rec = *d.Good
		}
		recs = append(recs, rec)
	}
	op := supervisor.Limits{DiskBytes: opDisk}
	for _, rec := range recs {
		l := op.For(rec).DiskBytes
		if l == 0 {
			r.unbounded++
			continue
		}
		r.vats++
		r.limits += l
		var ist unix.Stat_t
		if unix.Stat(filepath.Join(stateDir, "disk", string(rec.ID)+".img"), &ist) == nil {
			r.written += min(ist.Blocks*512, l)
		}
	}
	return r, nil
}

// diskRoomCheck says whether what the vats' disk limits and the prepare
// folders may still take fits in the state file system's free room. The
// images are sparse, so it is never a failure: a warning with the numbers
// and the settings that change them. enforced says whether this host
// gives data folders their limits at all (limit: disk). given says the
// operator named stateDir (--state); otherwise it is a folder of doctor's
// own, which holds no vat, and the line says that it counted none.
func diskRoomCheck(stateDir string, given bool, opDisk int64, installs int, enforced bool) wall.Check {
	c := wall.Check{Name: "limit: disk room", OK: true}
	r, err := readDiskRoom(stateDir, opDisk, installs)
	if err != nil {
		c.OK, c.Warn, c.Detail = false, true, err.Error()
		c.Fix = "give toybox doctor the --state toybox serve uses, a directory it can read"
		return c
	}
	fsys := fmt.Sprintf("the file system of %s has %d MiB free of %d MiB", stateDir, r.free>>20, r.size>>20)
	if !given {
		fsys += " (no --state given: a folder of doctor's own, no vat counted; give serve's --state to count its vats)"
	}
	if !enforced {
		c.Detail = "no disk limits here (limit: disk): the vats and package installs may take all of it; " + fsys
		return c
	}
	c.Detail = fmt.Sprintf("%d vats' disk limits sum to %d MiB, %d MiB of it written; %d package installs at once (--installs) take prepare folders of up to %d MiB; together they may take %d MiB more, and %s",
		r.vats, r.limits>>20, r.written>>20, r.installs, r.prepare>>20, r.more()>>20, fsys)
	if r.unbounded > 0 {
		c.Detail += fmt.Sprintf("; %d vats have no disk limit (--wall-disk-mib 0)", r.unbounded)
	}
	if r.more() > r.free {
		c.OK, c.Warn = false, true
		c.Detail += fmt.Sprintf(": %d MiB short, so vats that fill their data folders could fill it, and every vat, the code store and the records on it would fail", (r.more()-r.free)>>20)
		c.Fix = fmt.Sprintf("give the state dir a larger file system, or lower toybox serve's --wall-disk-mib (each vat's limit unless its owner set less; %d MiB assumed here), a vat's own (POST /<vat>/limits?disk_mib=N) or --installs (%d assumed here); give toybox doctor serve's values of both", opDisk>>20, installs)
	}
	return c
}
