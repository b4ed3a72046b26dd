package wall

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
)

// TestWallDevAndEtc: inside a real wall, the /dev and /etc a program needs
// work, an owner-chosen file below /etc is there (on its mountpoint in the
// view), and /etc is read-only, with no tty and no shadow.
func TestWallDevAndEtc(t *testing.T) {
	f := newFixture(t, "devetc")
	var reads []string
	for _, p := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/ld.so.cache", "/etc/services"} {
		if _, err := os.Stat(p); err == nil {
			reads = append(reads, p)
		}
	}
	// A file the allowlist leaves out, chosen by the owner.
	for _, p := range []string{"/etc/debian_version", "/etc/issue", "/etc/machine-id"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 != 0 {
			f.spec.Files.Read = []string{p}
			reads = append(reads, p)
			break
		}
	}
	f.spec.Env = map[string]string{"VICTIM_ARG": strings.Join(reads, ":")}
	out, err := f.runVictim(t, "devetc")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if strings.Contains(out, "FAIL ") || strings.Contains(out, "BREACH ") {
		t.Errorf("output:\n%s", out)
	}
	if n := strings.Count(out, "OK "); n != 8+len(reads) {
		t.Errorf("%d checks passed, want %d; output:\n%s", n, 8+len(reads), out)
	}
	if n := held(t, out); n != 4 {
		t.Errorf("held %d of 4; output:\n%s", n, out)
	}
}

// TestPlanEtcIsOneView: /etc is one read-only bind by fd of the view; no
// entry of the host's /etc is bound or copied on its own.
func TestPlanEtcIsOneView(t *testing.T) {
	f := newFixture(t, "oneview")
	p, err := BuildPlan(f.spec)
	if err != nil {
		t.Fatal(err)
	}
	var views int
	for _, op := range p.Ops {
		switch {
		case op.Dest == "/etc":
			views++
			if op.Kind != OpROBindFD || op.Src != p.EtcView || filepath.Dir(op.Src) != filepath.Join(f.state, "etc") {
				t.Errorf("/etc op = %+v; want a read-only fd bind of the view", op)
			}
		case within(op.Dest, "/etc"):
			t.Errorf("op %+v lands in /etc on its own", op)
		}
	}
	if views != 1 {
		t.Errorf("%d /etc views; want 1", views)
	}
	var paths []string
	for _, e := range p.Etc {
		paths = append(paths, e.Path)
		if e.Path == "shadow" || e.Src == "/etc/shadow" || strings.Contains(e.Path, "sudoers") {
			t.Errorf("the view holds %+v", e)
		}
		if e.Path == "passwd" && e.Link != PasswdPath {
			t.Errorf("passwd entry = %+v; want a link to the wall's own", e)
		}
	}
	for _, want := range []string{"passwd", "group", "hosts", "hostname"} {
		if !slices.Contains(paths, want) {
			t.Errorf("the view lacks %s: %v", want, paths)
		}
	}
	// The view the supervisor prepares at start is this one.
	if err := f.spec.Host.PrepareEtcView(f.state); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(p.EtcView, "hostname")); err != nil {
		t.Errorf("PrepareEtcView did not build the view a plain wall binds (%s): %v", p.EtcView, err)
	}
	// Two vats share one view; the passwd each sees is its own.
	g := newFixture(t, "otherview")
	q, err := BuildPlan(g.spec)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(q.EtcView) != filepath.Base(p.EtcView) {
		t.Errorf("views %s and %s; want one shared", q.EtcView, p.EtcView)
	}
	pw := func(pl *Plan) string {
		for _, op := range pl.Ops {
			if op.Dest == PasswdPath {
				return string(op.Data)
			}
		}
		return ""
	}
	if a, b := pw(p), pw(q); !strings.Contains(a, "oneview") || !strings.Contains(b, "otherview") {
		t.Errorf("passwd files %q and %q; want each its own", a, b)
	}
	// An owner-chosen file below /etc gets its mountpoint, in a view of
	// its own.
	if _, err := os.Stat("/etc/debian_version"); err == nil {
		g.spec.Files.Read = []string{"/etc/debian_version"}
		r, err := BuildPlan(g.spec)
		if err != nil {
			t.Fatal(err)
		}
		if r.EtcView == q.EtcView {
			t.Error("a view with a mountpoint is the shared one")
		}
		if !slices.ContainsFunc(r.Etc, func(e EtcEntry) bool { return e.Path == "debian_version" && e.Mount && !e.Dir }) {
			t.Errorf("no mountpoint for debian_version in %+v", r.Etc)
		}
	}
}

// TestEtcViewKeptWhileBound: a view a rebuild sets aside stays whole while
// a wall that binds it runs (that wall's /etc still reads), and goes when
// the wall ends; a view no wall binds goes at once.
func TestEtcViewKeptWhileBound(t *testing.T) {
	f := newFixture(t, "etckept")
	p, out := f.startVictim(t, "etcafter", false)
	defer p.Stop(0)
	view := p.plan.EtcView
	aside := func() []string {
		m, _ := filepath.Glob(view + ".old-*")
		return m
	}
	// The rebuild a changed source brings: the view the wall binds is set
	// aside, whole.
	if _, err := f.spec.Host.buildEtcView(view, p.plan.Etc); err != nil {
		t.Fatal(err)
	}
	kept := aside()
	if len(kept) != 1 {
		t.Fatalf("set aside: %v; want the one view the wall binds", kept)
	}
	if _, err := os.Stat(filepath.Join(kept[0], "hostname")); err != nil {
		t.Errorf("the view a running wall binds was emptied: %v", err)
	}
	// Another: the view it sets aside is bound by no wall and goes at once.
	if _, err := f.spec.Host.buildEtcView(view, p.plan.Etc); err != nil {
		t.Fatal(err)
	}
	if got := aside(); !slices.Equal(got, kept) {
		t.Errorf("set aside after a second rebuild: %v; want only %v", got, kept)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Errorf("Stop = %v", err)
	}
	b, _ := os.ReadFile(out)
	for _, want := range []string{`ETC /etc/hostname "toybox\n" <nil>`, `ETC /etc/group "root:x:0:`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the wall's /etc after the rebuild: output %q; want %q", b, want)
		}
	}
	if got := aside(); len(got) != 0 {
		t.Errorf("once the wall ended, still set aside: %v", got)
	}
	if _, err := os.Stat(filepath.Join(view, "hostname")); err != nil {
		t.Errorf("the current view: %v", err)
	}
}

// TestEtcViewBuild: the view copies files, makes symlinks again without
// following them, leaves out what is neither, adds mountpoints, and is
// built again only when a source changed.
func TestEtcViewBuild(t *testing.T) {
	h := NewHost()
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "conf"), "setting=1\n")
	mustWrite(t, filepath.Join(src, "certs", "bundle.pem"), "PEM-1")
	mustWrite(t, filepath.Join(src, "certs", "sub", "a.pem"), "A")
	if err := os.Symlink("/etc/shadow", filepath.Join(src, "certs", "evil.pem")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "certs", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../usr/share/zoneinfo/UTC", filepath.Join(src, "localtime")); err != nil {
		t.Fatal(err)
	}
	// What the host keeps from other users stays so in the view.
	mustWrite(t, filepath.Join(src, "certs", "private.key"), "KEY")
	if err := os.Chmod(filepath.Join(src, "certs", "private.key"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(src, "certs", "closed", "inner.pem"), "INNER")
	if err := os.Chmod(filepath.Join(src, "certs", "closed"), 0o700); err != nil {
		t.Fatal(err)
	}
	// The modes do not depend on the umask (toybox.service: 0077).
	oldMask := syscall.Umask(0o077)
	defer syscall.Umask(oldMask)
	view := filepath.Join(t.TempDir(), "etc", "v1")
	p := &Plan{EtcView: view, Etc: []EtcEntry{
		{Path: "app.conf", Src: filepath.Join(src, "conf")},
		{Path: "ssl/certs", Src: filepath.Join(src, "certs")},
		{Path: "localtime", Src: filepath.Join(src, "localtime")},
		{Path: "passwd", Link: "/run/toybox-etc/passwd"},
		{Path: "group", Data: []byte("vat:x:1000:\n")},
		{Path: "owner/dir", Mount: true, Dir: true},
		{Path: "owner.conf", Mount: true},
	}}
	if err := h.ensureEtcView(p); err != nil {
		t.Fatal(err)
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(view, rel))
		if err != nil {
			t.Errorf("reading %s: %v", rel, err)
		}
		return string(b)
	}
	if got := read("app.conf"); got != "setting=1\n" {
		t.Errorf("app.conf = %q", got)
	}
	if got := read("ssl/certs/bundle.pem"); got != "PEM-1" {
		t.Errorf("bundle.pem = %q", got)
	}
	if got := read("group"); got != "vat:x:1000:\n" {
		t.Errorf("group = %q", got)
	}
	if l, err := os.Readlink(filepath.Join(view, "passwd")); err != nil || l != "/run/toybox-etc/passwd" {
		t.Errorf("passwd: %q %v; want the link", l, err)
	}
	if l, err := os.Readlink(filepath.Join(view, "ssl/certs/evil.pem")); err != nil || l != "/etc/shadow" {
		t.Errorf("evil.pem: %q %v; want the symlink made again, not followed", l, err)
	}
	if l, err := os.Readlink(filepath.Join(view, "localtime")); err != nil || l != "../usr/share/zoneinfo/UTC" {
		t.Errorf("localtime: %q %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(view, "ssl/certs/fifo")); err == nil {
		t.Error("a fifo was copied into the view")
	}
	if fi, err := os.Stat(filepath.Join(view, "owner/dir")); err != nil || !fi.IsDir() {
		t.Errorf("owner/dir mountpoint: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(view, "owner.conf")); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf("owner.conf mountpoint: %v", err)
	}
	for rel, want := range map[string]os.FileMode{
		"app.conf": 0o444, "group": 0o444, "owner.conf": 0o444, "ssl": 0o755, "ssl/certs": 0o755, "owner/dir": 0o755,
		"ssl/certs/private.key": 0o400, "ssl/certs/closed": 0o700,
	} {
		if fi, err := os.Lstat(filepath.Join(view, rel)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, %v; want %v", rel, fi.Mode().Perm(), err, want)
		}
	}
	if fi, err := os.Stat(view); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the view folder: %v %v; want 0755", fi.Mode().Perm(), err)
	}

	ino := func() uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(view, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	// expire ends the second in which a view found current is trusted
	// without looking at its sources.
	expire := func() {
		v := h.viewFor(view)
		v.mu.Lock()
		v.checked = time.Time{}
		v.mu.Unlock()
	}
	first := ino()
	expire()
	if err := h.ensureEtcView(p); err != nil {
		t.Fatal(err)
	}
	if ino() != first {
		t.Error("the view was built again though nothing changed")
	}
	// A file inside a copied folder changes (same size): within the
	// second the view is trusted as it is; after it, built again.
	mustWrite(t, filepath.Join(src, "certs", "bundle.pem"), "PEM-2")
	later := time.Now().Add(2 * time.Second)
	_ = os.Chtimes(filepath.Join(src, "certs", "bundle.pem"), later, later)
	if err := h.ensureEtcView(p); err != nil {
		t.Fatal(err)
	}
	if got := read("ssl/certs/bundle.pem"); got != "PEM-1" {
		t.Errorf("within the recheck interval bundle.pem = %q; want the view unchanged", got)
	}
	expire()
	if err := h.ensureEtcView(p); err != nil {
		t.Fatal(err)
	}
	if got := read("ssl/certs/bundle.pem"); got != "PEM-2" {
		t.Errorf("after the change bundle.pem = %q", got)
	}
	// A file added in a folder inside a copied folder counts too.
	mustWrite(t, filepath.Join(src, "certs", "sub", "new.pem"), "NEW")
	_ = os.Chtimes(filepath.Join(src, "certs", "sub"), later, later)
	expire()
	if err := h.ensureEtcView(p); err != nil {
		t.Fatal(err)
	}
	if got := read("ssl/certs/sub/new.pem"); got != "NEW" {
		t.Errorf("after a file was added in a nested folder: %q", got)
	}
	// Removed by someone else, even within the second: built again.
	if err := os.RemoveAll(view); err != nil {
		t.Fatal(err)
	}
	if err := h.ensureEtcView(p); err != nil {
		t.Fatal(err)
	}
	if got := read("app.conf"); got != "setting=1\n" {
		t.Errorf("after removal app.conf = %q", got)
	}
	// Nothing is left next to the view: no half-built folder, and the
	// views the changes replaced went at once, since no wall binds them
	// (TestEtcViewKeptWhileBound: one that a wall binds stays).
	ents, _ := os.ReadDir(filepath.Dir(view))
	for _, e := range ents {
		if e.Name() != "v1" {
			t.Errorf("next to the view: %s", e.Name())
		}
	}
	// A path that climbs out of /etc is refused.
	bad := &Plan{EtcView: filepath.Join(t.TempDir(), "etc", "v2"), Etc: []EtcEntry{{Path: "../escape", Data: []byte("x")}}}
	if err := h.ensureEtcView(bad); err == nil {
		t.Error("an entry outside /etc was accepted")
	}
	// SweepViews clears every view, those set aside included.
	if err := h.SweepViews(filepath.Dir(filepath.Dir(view))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(view)); err == nil {
		t.Error("SweepViews left the views")
	}
}

// TestWallDevFallback: the tmpfs /dev (a supervisor that is not root) gives
// the same /dev as the prepared folder.
func TestWallDevFallback(t *testing.T) {
	testenv.RequireRoot(t) // the wall runs as another uid, and /dev is made with mknod, only as root
	f := newFixture(t, "devfallback")
	f.spec.Host.noDevDir = true
	out, err := f.runVictim(t, "devetc")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if strings.Contains(out, "FAIL ") || strings.Contains(out, "BREACH ") || strings.Count(out, "OK ") != 8 {
		t.Errorf("output:\n%s", out)
	}
}

// TestDevDir: as root the wall's /dev is one folder of the state dir with
// exactly the four nodes, the links and shm; a tampered folder is made
// again.
func TestDevDir(t *testing.T) {
	testenv.RequireRoot(t) // the wall runs as another uid, and /dev is made with mknod, only as root
	state := t.TempDir()
	h := NewHost()
	d := h.devDir(state)
	if d == "" {
		t.Fatal("no dev folder as root")
	}
	if err := devDirOK(d); err != nil {
		t.Fatal(err)
	}
	// A planted entry makes the folder fail its check, and a new process
	// (no cache) makes it again.
	mustWrite(t, filepath.Join(d, "sda"), "not a disk")
	if devDirOK(d) == nil {
		t.Fatal("a planted entry passed the check")
	}
	if err := makeDevDir(d); err != nil {
		t.Fatal(err)
	}
	if err := devDirOK(d); err != nil {
		t.Fatalf("after making it again: %v", err)
	}
	// The tampered folder was set aside, not emptied (walls started before
	// may still show it).
	if aside, _ := filepath.Glob(d + ".old-*"); len(aside) != 1 {
		t.Errorf("set aside: %v; want one folder", aside)
	} else if _, err := os.Stat(filepath.Join(aside[0], "null")); err != nil {
		t.Errorf("the folder set aside was emptied: %v", err)
	}
	// Removed while the supervisor runs: the next wall makes it again.
	if err := os.RemoveAll(d); err != nil {
		t.Fatal(err)
	}
	if got := h.devDir(state); got != d || devDirOK(d) != nil {
		t.Errorf("after removal devDir = %q (check: %v); want it made again", got, devDirOK(d))
	}
	// When the supervisor next starts, what was set aside goes; the
	// folder in use stays.
	if err := h.SweepViews(state); err != nil {
		t.Fatal(err)
	}
	if aside, _ := filepath.Glob(d + ".old-*"); len(aside) != 0 {
		t.Errorf("after the sweep, still set aside: %v", aside)
	}
	if err := devDirOK(d); err != nil {
		t.Errorf("the sweep broke the folder in use: %v", err)
	}
}

// A state dir on a nodev mount gets no /dev folder (its nodes could not be
// opened in any wall): walls fall back to the tmpfs /dev.
func TestDevDirNotOnNodev(t *testing.T) {
	testenv.RequireRoot(t)
	state := t.TempDir()
	if err := unix.Mount("tmpfs", state, "tmpfs", unix.MS_NODEV, "mode=0755"); err != nil {
		testenv.Unavailable(t, "cannot mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(state, unix.MNT_DETACH) })
	if d := NewHost().devDir(state); d != "" {
		t.Fatalf("devDir on a nodev mount = %q; want none", d)
	}
	if _, err := os.Stat(filepath.Join(state, "dev")); err == nil {
		t.Error("a /dev folder was made on a nodev mount")
	}
}
