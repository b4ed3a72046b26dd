package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"toybox/vat/disk"
	"toybox/vat/wall"
	"toybox/vat/wall/cgroup"
)

// cgroupName is the walls' cgroup folder of the supervisor of stateDir:
// one per state dir, so that supervisors sharing a cgroup (tests, a
// developer's shell) never touch each other's walls.
func cgroupName(stateDir string) string {
	real, err := filepath.EvalSymlinks(stateDir)
	if err != nil {
		real = stateDir
	}
	if abs, err := filepath.Abs(real); err == nil {
		real = abs
	}
	sum := sha256.Sum256([]byte(real))
	return "toybox-" + hex.EncodeToString(sum[:6])
}

// openLimits opens what holds each wall to its limits: the host's cgroups,
// and (when the operator set a disk limit) the data folders' own file
// systems. What this host cannot enforce is logged once; each vat's status
// says it runs without it.
func openLimits(o serveOptions, log *slog.Logger) (*cgroup.Host, *disk.Disks) {
	cg := cgroup.Open(cgroup.Config{Name: cgroupName(o.state)})
	sup := cg.Support()
	if sup.Version > 0 {
		log.Info("walls' cgroups", "version", sup.Version, "where", strings.Join(sup.Where, " "))
	}
	for _, k := range cgroup.Kinds {
		if why, ok := sup.Missing[k]; ok {
			log.Warn("walls run without a "+k+" limit", "reason", why)
		}
	}
	var disks *disk.Disks
	if o.wallDisk > 0 {
		disks = disk.Open(o.state)
		if err := disks.Support(); err != nil {
			log.Warn("data folders run without a disk limit", "reason", err.Error())
		}
	}
	return cg, disks
}

// limitChecks are doctor's lines for the limits this host can enforce on
// each wall: as this process finds them (a supervisor under systemd uses
// its unit's delegated cgroup instead). A limit it cannot enforce is a
// warning: walls still run, and their status says they run without it.
func limitChecks(stateDir string) []wall.Check {
	cg := cgroup.Open(cgroup.Config{Name: fmt.Sprintf("toybox-doctor-%d", os.Getpid())})
	defer cg.Close()
	sup := cg.Support()
	var out []wall.Check
	if sup.Version > 0 {
		out = append(out, wall.Check{Name: "limits: cgroups", OK: true, Detail: fmt.Sprintf("cgroup v%d; a wall's group would be made in %s", sup.Version, strings.Join(sup.Where, ", "))})
	}
	for _, k := range cgroup.Kinds {
		c := wall.Check{Name: "limit: " + k, OK: true, Detail: "enforced"}
		if why, missing := sup.Missing[k]; missing {
			c.OK, c.Warn, c.Detail = false, true, "not enforced here: "+why
		}
		out = append(out, c)
	}
	c := wall.Check{Name: "limit: disk", OK: true}
	if err := disk.Open(stateDir).Support(); err != nil {
		c.OK, c.Warn, c.Detail = false, true, "not enforced here: "+err.Error()
	} else {
		c.Detail = "enforced (each data folder a loop-mounted ext4 image of its own)"
	}
	return append(out, c)
}
