// Package disk gives each vat's data folder a file system of its own.
//
// A vat's data folder lies on the state file system, beside the code store
// and the records: a vat that filled it would leave the others, installs and
// upgrades no room. So each data folder is an ext4 image of the size its
// limit names (<state>/disk/<id>.img, sparse), loop-mounted on the folder
// (nosuid, nodev). A vat that fills it gets ENOSPC; nothing else does.
// Its run folder gets a small tmpfs of its own (MountRun).
// Mounting needs root (CAP_SYS_ADMIN), loop devices and mkfs.ext4: Open
// tries it once, for real, and a host where it fails has no disk limits
// (Disks.Support says why).
package disk

import "errors"

// MinBytes is the smallest disk limit: room for ext4's own metadata and a
// small app's data.
const MinBytes = 16 << 20

// A vat's run folder (<state>/run/<id>, its /run/toybox) is bound
// read-write too, on the state file system. Where data folders have file
// systems of their own it gets one as well: a tmpfs this small, whose
// pages count against the vat's memory limit.
const (
	RunBytes  = 1 << 20 // its socket, and an app's pid or lock files
	RunInodes = 1024    // the same, with room
)

// fullSlack is what a full file system may still show free (Full): ext4
// keeps a little back, and a writer stops at a chunk that no longer fits.
const fullSlack = 4 << 20

// ErrUnsupported: this host cannot give data folders a file system of
// their own.
var ErrUnsupported = errors.New("data folders cannot be limited here")

// ErrTooSmall: a data folder's files do not fit the smaller size asked
// for; its image is left as it was.
var ErrTooSmall = errors.New("its files do not fit the disk limit")
