package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"toybox/vat/disk"
	"toybox/vat/supervisor"
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
// the data folders' own file systems and the install prepare folders'
// (where the host can make them). The data folders' are open whatever
// --wall-disk-mib says: with it 0, a vat whose owner set a disk limit
// still gets it, and a vat whose data lies in its image (a limit held it
// before) finds the image mounted, not the empty folder under it. What this host cannot enforce is logged once; each vat's status
// says it runs without it, and each install that its prepare folder is
// unbounded.
func openLimits(o serveOptions, log *slog.Logger) (cg *cgroup.Host, disks, prepare *disk.Disks) {
	cg = cgroup.Open(cgroup.Config{Name: cgroupName(o.state)})
	sup := cg.Support()
	if sup.Version > 0 {
		log.Info("walls' cgroups", "version", sup.Version, "where", strings.Join(sup.Where, " "))
	}
	for _, k := range cgroup.Kinds {
		if why, ok := sup.Missing[k]; ok {
			log.Warn("walls run without a "+k+" limit", "reason", why)
		}
	}
	prepare = disk.Open(o.state)
	disks = prepare
	if o.wallDisk > 0 {
		if err := disks.Support(); err != nil {
			log.Warn("data folders run without a disk limit", "reason", err.Error())
		}
	}
	return cg, disks, prepare
}

// serviceUser is the user toybox.service runs as (User=toybox), where
// this host has it.
type serviceUser struct {
	name string
	uid  int
}

// lookupServiceUser returns the toybox user, or nil where there is none.
func lookupServiceUser() *serviceUser {
	u, err := user.Lookup("toybox")
	if err != nil {
		return nil
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil
	}
	return &serviceUser{name: u.Username, uid: uid}
}

// checkedAs is doctor's line saying whose results the checks are: this
// process's uid. Run as another user than toybox.service's (root, say),
// it is a warning: the service's user may get less (limitChecks names
// what, where it can tell).
func checkedAs(euid int, svc *serviceUser) wall.Check {
	c := wall.Check{Name: "checked as"}
	who := fmt.Sprintf("uid %d", euid)
	if u, err := user.LookupId(strconv.Itoa(euid)); err == nil {
		who += " (" + u.Username + ")"
	}
	switch {
	case svc != nil && euid == svc.uid:
		c.OK, c.Detail = true, who+", the user toybox.service runs as; the unit's own settings (its seccomp filter, namespaces and delegated cgroup) still apply only under systemd"
	case svc != nil:
		c.Warn = true
		c.Detail = fmt.Sprintf("%s; toybox.service runs as %s (uid %d): its results may differ, and the limit lines say what it will not get", who, svc.name, svc.uid)
		c.Fix = "read the results for the service's user in toybox serve's log and each vat's unlimited (docs/systemd.md), or run toybox doctor as the user toybox serve runs as"
	default:
		c.OK, c.Detail = true, who+"; toybox serve run as another user may differ"
	}
	return c
}

// limitChecks are doctor's lines for the limits this host can enforce on
// each wall, as this process (euid) finds them. A limit it cannot
// enforce is a warning: walls still run, and their status says they run
// without it. Run as root where toybox.service runs as svc, a limit the
// service never gets is a warning too (docs/systemd.md): no disk limit
// (a loop mount needs root), and on cgroup v1 no cgroup limit (systemd
// delegates no v1 controller to a service that is not root).
func limitChecks(stateDir string, euid int, svc *serviceUser) []wall.Check {
	cg := cgroup.Open(cgroup.Config{Name: fmt.Sprintf("toybox-doctor-%d", os.Getpid())})
	defer cg.Close()
	sup := cg.Support()
	notService := svc != nil && euid == 0 && svc.uid != 0
	service := ""
	if notService {
		service = fmt.Sprintf("not for toybox.service (User=%s", svc.name)
	}
	var out []wall.Check
	if sup.Version > 0 {
		out = append(out, wall.Check{Name: "limits: cgroups", OK: true, Detail: fmt.Sprintf("cgroup v%d; a wall's group would be made in %s", sup.Version, strings.Join(sup.Where, ", "))})
	}
	for _, k := range cgroup.Kinds {
		c := wall.Check{Name: "limit: " + k, OK: true, Detail: "enforced (" + howLimited(k, sup.Version) + ")"}
		if why, missing := sup.Missing[k]; missing {
			c.OK, c.Warn, c.Detail = false, true, "not enforced here: "+why
			c.Fix = "run toybox on cgroup v2 (systemd.unified_cgroup_hierarchy=1 on the kernel command line) under toybox.service, whose Delegate=yes hands it the controllers; or as root with the controller mounted"
			if k == cgroup.Tasks {
				c.Detail += fmt.Sprintf("; each wall's RLIMIT_NPROC still holds it, and the entry's reserve of %d is only the app's soft RLIMIT_NPROC, which the app may raise", wall.TaskReserve)
			}
		} else if notService && sup.Version == 1 {
			c.OK, c.Warn = false, true
			c.Detail = fmt.Sprintf("enforced for uid %d here, %s): systemd delegates no cgroup v1 controller to a service that is not root", euid, service)
			c.Fix = "run the host on cgroup v2 (systemd.unified_cgroup_hierarchy=1 on the kernel command line): toybox.service's Delegate=yes then hands it the controllers"
		}
		out = append(out, c)
	}
	c := wall.Check{Name: "limit: disk", OK: true}
	p := wall.Check{Name: "limit: prepare folders", OK: true}
	diskFix := "give <state>/data a file system of its own, so that a vat that fills it leaves the store and the records room; a limit per vat needs toybox serve run as root on a writable state dir, with loop devices (modprobe loop) and mkfs.ext4 (apt-get install e2fsprogs)"
	if err := disk.Open(stateDir).Support(); err != nil {
		c.OK, c.Warn, c.Detail = false, true, "not enforced here: "+err.Error()
		p.OK, p.Warn, p.Detail = false, true, "not enforced here: a package install's script or registry may fill the state file system: "+err.Error()
		c.Fix, p.Fix = diskFix, diskFix
	} else if notService {
		c.OK, c.Warn = false, true
		c.Detail = fmt.Sprintf("enforced for uid %d here, %s): a loop-mounted file system per data folder needs root, so no vat of the service gets a disk limit", euid, service)
		p.OK, p.Warn = false, true
		p.Detail = fmt.Sprintf("enforced for uid %d here, %s): a package install's script or registry may fill the state file system", euid, service)
		c.Fix, p.Fix = diskFix, diskFix
	} else {
		c.Detail = fmt.Sprintf("enforced (each data folder a loop-mounted ext4 image of its own; each run folder a %d KiB tmpfs of %d inodes)", disk.RunBytes>>10, disk.RunInodes)
		p.Detail = fmt.Sprintf("enforced (each package install's prepare folder a loop-mounted ext4 image of %d MiB)", supervisor.DefaultPrepareBytes>>20)
	}
	return append(out, c, p)
}

// howLimited says which files of a wall's cgroup hold it to limit kind on
// cgroup version v (docs/walls.md).
func howLimited(kind string, v int) string {
	switch {
	case kind == cgroup.Memory && v == 2:
		return "memory.max; the whole wall is killed at it: memory.oom.group"
	case kind == cgroup.Memory:
		return "memory.limit_in_bytes"
	case kind == cgroup.Swap && v == 2:
		return "memory.swap.max 0"
	case kind == cgroup.Swap:
		return "memory.memsw.limit_in_bytes equal to the memory limit"
	case kind == cgroup.CPU && v == 2:
		return "cpu.max per 100 ms"
	case kind == cgroup.CPU:
		return "cpu.cfs_quota_us per 100 ms"
	case kind == cgroup.Tasks:
		return fmt.Sprintf("pids.max, beside RLIMIT_NPROC; the app's folder holds %d fewer, the entry's reserve", wall.TaskReserve)
	}
	return kind
}
