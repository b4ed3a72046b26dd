package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"toybox/vat/store"
	"toybox/vat/supervisor"
	"toybox/vat/switches"
	"toybox/vat/wall"
	"toybox/vat/wall/seccomp"
	"toybox/vat/words"
)

func init() { commands["doctor"] = doctorMain }

// doctorMain prints the walls checklist and exits 1 if any check failed.
func doctorMain(args []string) int {
	fs := flag.NewFlagSet("toybox doctor", flag.ContinueOnError)
	entry := fs.String("entry", "", "path of toybox-entry (default: next to this binary, as serve looks)")
	bwrap := fs.String("bwrap", "", "the bubblewrap binary, as toybox serve --bwrap (default: bwrap on PATH)")
	table := fs.String("walls-table", "", "the operator's table, as toybox serve --walls-table (default: "+switches.TablePath+")")
	state := fs.String("state", "", "the state dir, as toybox serve --state: whether it can be written, where the disk limit is tried and its room counted (default: a temporary folder)")
	wallDisk := fs.Int64("wall-disk-mib", DefaultWallDiskMiB, "as toybox serve --wall-disk-mib: each vat's disk limit, counted against the state dir's room")
	installs := fs.Int("installs", supervisor.DefaultInstalls, "as toybox serve --installs: the package installs that prepare at once, each a prepare folder counted against the state dir's room")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: toybox doctor [--entry PATH] [--bwrap PATH] [--walls-table FILE] [--state DIR] [--wall-disk-mib N] [--installs N]\n\nChecks that walls can be built on this computer, as the user it runs as; exits 1 if a check failed.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc := lookupServiceUser()
	checks := append([]wall.Check{checkedAs(os.Geteuid(), svc)}, wall.Doctor(ctx, *bwrap)...)
	checks = append(checks, entryCheck(*entry), tableCheck(*table), egressModeCheck())
	if os.Geteuid() == 0 {
		checks = append(checks, subordinateCheck("/etc/subuid", "/etc/subgid"))
	}
	dir := *state
	if dir != "" {
		// Before the limit checks, which make folders in it.
		checks = append(checks, stateCheck(dir))
	}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "toybox-doctor-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "toybox doctor:", err)
			return 1
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	lim := limitChecks(dir, os.Geteuid(), svc)
	enforced := false
	for _, c := range lim {
		if c.Name == "limit: disk" {
			enforced = c.OK
		}
	}
	checks = append(checks, lim...)
	checks = append(checks, diskRoomCheck(dir, *state != "", *wallDisk<<20, *installs, enforced))
	return printChecks(os.Stdout, checks)
}

// tableCheck reads the operator's table as toybox serve would: a table
// that serve would refuse fails.
func tableCheck(path string) wall.Check {
	c := wall.Check{Name: "operator's table"}
	explicit := path != ""
	if !explicit {
		path = switches.TablePath
	}
	t, err := switches.LoadTable(path)
	switch {
	case !explicit && errors.Is(err, os.ErrNotExist):
		c.OK, c.Detail = true, path+" is not there: no approved commands, shares or state folders"
	case err != nil:
		c.Detail = err.Error()
		c.Fix = "chown root: " + path + " and chmod go-w it and every folder above it (toybox serve refuses it until then), or fix what the detail names"
	default:
		c.OK = true
		c.Detail = fmt.Sprintf("%s: %d approved commands, %d shares, state folders for %d vats", path, len(t.Approved), len(t.Shares), len(t.State))
	}
	return c
}

// egressModeCheck says whether walls here get transparent egress (every
// connect() through the vat's grant) or the CONNECT proxy alone. The
// proxy alone is a warning: walls still run, only programs that use
// HTTP(S)_PROXY get out.
func egressModeCheck() wall.Check {
	// A real listener is installed (and dropped) here: a kernel that
	// would refuse it to toybox-entry (nested under another seccomp
	// notifier) refuses it here too.
	if err := seccomp.ListenerInstallable(); err != nil {
		return wall.Check{
			Name: "egress", Warn: true,
			Detail: words.EgressProxyOnly.With("en", err.Error()),
			Fix:    "run a Linux kernel 5.19 or later with seccomp user notification, toybox not nested under another seccomp notifier",
		}
	}
	return wall.Check{Name: "egress", OK: true, Detail: words.EgressTransparent.In("en")}
}

// subordinateCheck fails when a host user's subordinate ids (for rootless
// containers) include the ids a root supervisor gives vats and their code.
func subordinateCheck(subuid, subgid string) wall.Check {
	c := wall.Check{Name: "vat ids"}
	clashes := supervisor.SubordinateClashes(subuid, subgid, supervisor.DefaultUIDBase, store.RootCodeGID)
	if len(clashes) > 0 {
		c.Detail = strings.Join(clashes, "; ")
		c.Fix = fmt.Sprintf("move those ranges in %s and %s above %d (usermod --del-subuids/--add-subuids), so that no user's rootless containers can run as a vat", subuid, subgid, supervisor.DefaultUIDBase+supervisor.VatIDSpan)
		return c
	}
	c.OK = true
	c.Detail = fmt.Sprintf("no user's subordinate ids include the vats' (%d and up) or the code group (%d)", supervisor.DefaultUIDBase, store.RootCodeGID)
	return c
}

// stateProbeBytes is what stateCheck writes to the state dir: a code
// file or a record's worth, so a file system with no room fails.
const stateProbeBytes = 64 << 10

// stateCheck says whether toybox serve could use dir as its state dir:
// serve makes a missing one (and its parents), locks it and writes code,
// records and the walls' /etc there. A dir it cannot write (a read-only
// file system, another user's) stops serve at start; one with no room
// lets it start but fails every install and every vat.
func stateCheck(dir string) wall.Check {
	c := wall.Check{Name: "state dir"}
	uid := os.Geteuid()
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// serve makes it: the nearest folder above must take it.
		up := filepath.Dir(dir)
		for {
			if _, err := os.Stat(up); err == nil || up == filepath.Dir(up) {
				break
			}
			up = filepath.Dir(up)
		}
		if err := unix.Access(up, unix.W_OK|unix.X_OK); err != nil {
			c.Detail = fmt.Sprintf("%s: not there, and uid %d cannot make it in %s: %v", dir, uid, up, err)
			c.Fix = stateFix(err)
			return c
		}
		c.OK, c.Detail = true, fmt.Sprintf("%s: not there yet; toybox serve makes it in %s", dir, up)
		return c
	case err != nil:
		c.Detail = dir + ": " + err.Error()
		c.Fix = stateFix(err)
		return c
	case !fi.IsDir():
		c.Detail = dir + ": not a directory"
		c.Fix = "give toybox serve and doctor a --state that is a directory, or a path that is not there (serve makes it)"
		return c
	}
	if err := writeProbe(dir); err != nil {
		c.Detail = fmt.Sprintf("%s: uid %d cannot write it: %v", dir, uid, err)
		c.Fix = stateFix(err)
		return c
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		c.Detail = dir + ": " + os.NewSyscallError("statfs", err).Error()
		c.Fix = stateFix(err)
		return c
	}
	if st.Bavail == 0 {
		c.Detail = dir + ": its file system has no room left but root's reserve (no space left on device for toybox serve under its own user)"
		c.Fix = stateFix(unix.ENOSPC)
		return c
	}
	c.OK, c.Detail = true, fmt.Sprintf("%s: uid %d can write it, %d MiB free", dir, uid, int64(st.Bavail)*int64(st.Bsize)>>20)
	return c
}

// writeProbe writes stateProbeBytes to a new file in dir, syncs it and
// removes it.
func writeProbe(dir string) error {
	f, err := os.CreateTemp(dir, ".doctor-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(make([]byte, stateProbeBytes))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// stateFix is the fix for err, met writing the state dir.
func stateFix(err error) string {
	switch {
	case errors.Is(err, unix.EROFS):
		return "give --state a folder on a file system mounted read-write (under systemd, StateDirectory= in toybox.service makes /var/lib/toybox writable; a drop-in's ReadWritePaths= any other)"
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return "free room on that file system, or give the state dir a larger one"
	case errors.Is(err, fs.ErrPermission):
		return "chown the state dir to the user toybox serve runs as, and run toybox doctor as that user"
	}
	return "fix what the detail names; toybox serve needs to make, lock and write the state dir"
}

func entryCheck(path string) wall.Check {
	c := wall.Check{Name: "toybox-entry"}
	// Where serve looks: --entry, else next to this binary (not PATH).
	where := path
	if path == "" {
		where = "next to toybox"
		if self, err := os.Executable(); err == nil {
			path = filepath.Join(filepath.Dir(self), "toybox-entry")
			where = path
		}
	}
	if path == "" || !fileExists(path) {
		c.Detail = "not found: " + where
		c.Fix = "make build (it puts toybox-entry in ./bin), or pass --entry"
		return c
	}
	if why := entryUnrunnable(path, os.Getuid()); len(why) > 0 {
		c.Detail = path + ": " + strings.Join(why, "; ")
		c.Fix = "install toybox-entry where the vats can run it (mode 0755, a file system not mounted noexec), or pass --entry"
		return c
	}
	c.OK, c.Detail = true, path
	return c
}

// entryUnrunnable says what keeps the walls from running the entry at
// path. They run it from a descriptor as the vats' uid: a vat's own (from
// 1000000, with the code group) under a root supervisor (uid 0), else the
// supervisor's own, with all its groups: there the kernel answers
// (access(2) with X_OK weighs every group, ACLs and a noexec mount), and
// EntryUnrunnable only explains a refusal.
func entryUnrunnable(path string, uid int) []string {
	if uid == 0 {
		return wall.EntryUnrunnable(path, supervisor.DefaultUIDBase, supervisor.DefaultUIDBase, store.RootCodeGID)
	}
	err := unix.Access(path, unix.X_OK)
	if err == nil {
		return nil
	}
	if why := wall.EntryUnrunnable(path, uid, os.Getgid(), 0); len(why) > 0 {
		return why
	}
	return []string{fmt.Sprintf("uid %d may not execute it: %v", uid, err)}
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func printChecks(w io.Writer, checks []wall.Check) int {
	code := 0
	for _, c := range checks {
		mark := "ok  "
		switch {
		case c.Warn:
			mark = "warn"
		case !c.OK:
			mark, code = "FAIL", 1
		}
		// One line per check, its fix on the next: a detail that quotes a
		// tool's output (mkfs's lines) is joined.
		detail := strings.Join(strings.Split(strings.TrimSpace(c.Detail), "\n"), "; ")
		fmt.Fprintf(w, "%s %s: %s\n", mark, c.Name, detail)
		if !c.OK && c.Fix != "" {
			fmt.Fprintf(w, "     fix: %s\n", c.Fix)
		}
		if !c.OK && c.Text != "" {
			for _, line := range strings.Split(strings.TrimRight(c.Text, "\n"), "\n") {
				fmt.Fprintf(w, "     | %s\n", line)
			}
		}
	}
	if code == 0 {
		fmt.Fprintln(w, "walls can be built on this host")
	} else {
		fmt.Fprintln(w, "walls cannot be built on this host until the checks above pass")
	}
	return code
}
