package wall

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// hostDir makes a folder outside the plan's state dir, for the operator's
// binds.
func hostDir(t *testing.T, files ...string) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "crow", "data")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(d, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func opFor(p *Plan, kind OpKind, dest string) bool {
	return slices.ContainsFunc(p.Ops, func(op Op) bool { return op.Kind == kind && op.Dest == dest })
}

// TestPlanShareMasksOtherEntries: a shared folder is bound read-write by
// fd, and every entry its share does not name is masked.
func TestPlanShareMasksOtherEntries(t *testing.T) {
	spec := planSpec(t)
	d := hostDir(t, "crow.db", "crow.db-wal", "tasks.db", ".env")
	if err := os.Mkdir(filepath.Join(d, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	spec.Shares = []Share{{Name: "Crow's database", Folder: d, Entries: []string{"crow.db", "crow.db-wal"}}}
	p, err := BuildPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !opFor(p, OpBindFD, d) {
		t.Errorf("no read-write bind by fd of %s in %+v", d, p.Ops)
	}
	for _, masked := range []struct {
		name string
		kind OpKind
	}{{"tasks.db", OpMaskFile}, {".env", OpMaskFile}, {"secrets", OpMaskDir}} {
		if !opFor(p, masked.kind, filepath.Join(d, masked.name)) {
			t.Errorf("%s is not masked (%s)", masked.name, masked.kind)
		}
	}
	for _, kept := range []string{"crow.db", "crow.db-wal"} {
		if slices.Contains(p.Masks, filepath.Join(d, kept)) {
			t.Errorf("%s is masked; the share names it", kept)
		}
	}
}

// TestPlanShareSiblingsMasked: where another bind shows a shared folder's
// parent, the parent's other entries are masked.
func TestPlanShareSiblingsMasked(t *testing.T) {
	spec := planSpec(t)
	d := hostDir(t, "crow.db")
	parent := filepath.Dir(d)
	if err := os.WriteFile(filepath.Join(parent, "identity.key"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec.Files.Read = []string{parent}
	spec.Shares = []Share{{Name: "Crow's data", Folder: d}}
	p, err := BuildPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !opFor(p, OpMaskFile, filepath.Join(parent, "identity.key")) {
		t.Errorf("the shared folder's sibling is not masked: %v", p.Masks)
	}
}

// TestPlanHostFoldersRefused: a state folder or a share must be a real
// folder, outside the state dir.
func TestPlanHostFoldersRefused(t *testing.T) {
	d := hostDir(t)
	link := filepath.Join(filepath.Dir(d), "link")
	if err := os.Symlink(d, link); err != nil {
		t.Fatal(err)
	}
	through := filepath.Join(link, "inner")
	if err := os.Mkdir(filepath.Join(d, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(d, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		dir  func(Spec) string
		want error
	}{
		{"symlink", func(Spec) string { return link }, ErrSymlink},
		{"through a symlink", func(Spec) string { return through }, ErrSymlink},
		{"a file", func(Spec) string { return file }, ErrRefusedBind},
		{"missing", func(Spec) string { return filepath.Join(d, "none") }, ErrRefusedBind},
		{"the state dir", func(s Spec) string { return s.StateDir }, ErrRefusedBind},
		{"another vat's data", func(s Spec) string { return filepath.Join(s.StateDir, "data") }, ErrRefusedBind},
		{"/proc", func(Spec) string { return "/proc/sys" }, ErrRefusedBind},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := planSpec(t)
			spec.State = []string{tt.dir(spec)}
			if _, err := BuildPlan(spec); !errors.Is(err, tt.want) {
				t.Errorf("state folder %s: BuildPlan = %v; want %v", spec.State[0], err, tt.want)
			}
			spec.State = nil
			spec.Shares = []Share{{Name: "x", Folder: tt.dir(spec)}}
			if _, err := BuildPlan(spec); !errors.Is(err, tt.want) {
				t.Errorf("share %s: BuildPlan = %v; want %v", spec.Shares[0].Folder, err, tt.want)
			}
		})
	}
	spec := planSpec(t)
	spec.State = []string{d}
	p, err := BuildPlan(spec)
	if err != nil || !opFor(p, OpBindFD, d) {
		t.Errorf("a real state folder: %v; want it bound read-write by fd", err)
	}
}

// TestNoBwrap: a bubblewrap path that names nothing is no bubblewrap:
// Start, the probe and doctor say so, with the package to install.
func TestNoBwrap(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "bwrap")
	if err := Probe(context.Background(), missing); !errors.Is(err, ErrNoBwrap) || !strings.Contains(err.Error(), "apt-get install bubblewrap") {
		t.Errorf("Probe(missing) = %v; want ErrNoBwrap naming the package", err)
	}
	checks := Doctor(context.Background(), missing)
	if len(checks) == 0 || checks[0].OK || !strings.Contains(checks[0].Fix, "apt-get install bubblewrap") {
		t.Errorf("Doctor(missing)[0] = %+v; want a failure naming the package", checks)
	}
	f := newFixture(t, "nobwrap")
	f.spec.Bwrap = missing
	f.caps(t)
	if _, err := Start(context.Background(), f.spec, nil); !errors.Is(err, ErrNoBwrap) || !errors.Is(err, ErrBwrap) {
		t.Errorf("Start(missing bwrap) = %v; want ErrBwrap and ErrNoBwrap", err)
	}
}

// TestAppArmorFix: the fix for AppArmor's restriction is a profile for
// toybox's own bubblewrap, never unconfined on /usr/bin/bwrap.
func TestAppArmorFix(t *testing.T) {
	for _, own := range []string{"", "/usr/bin/bwrap", "/opt/toybox/bwrap"} {
		want := own
		if own == "" || own == "/usr/bin/bwrap" {
			want = OwnBwrap
		}
		prof := AppArmorProfile(ownOr(own))
		if !strings.Contains(prof, "profile toybox-bwrap "+want+" ") || !strings.Contains(prof, "allow userns,") || strings.Contains(prof, "unconfined") {
			t.Errorf("AppArmorProfile(%q) =\n%s\nwant a profile for %s allowing userns, never unconfined", own, prof, want)
		}
		if fix := appArmorFix(own); !strings.Contains(fix, "--bwrap "+want) || !strings.Contains(fix, "install -D -m 0755 -o root /usr/bin/bwrap "+want) {
			t.Errorf("appArmorFix(%q) = %q; want the copy and --bwrap %s", own, fix, want)
		}
	}
	if cause, fix := diagnose(probeTimedOut+" after 10s", ""); !strings.Contains(cause, "did not finish") || fix == "" {
		t.Errorf("diagnose(timed out) = %q, %q; want the timeout named", cause, fix)
	}
}

// TestProbeTimedOut: a bubblewrap that never finishes its sandbox (here a
// program that hangs) is a probe that timed out, named as such, never
// a pass.
func TestProbeTimedOut(t *testing.T) {
	dir, err := os.MkdirTemp("", "tbx-hang-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the probe runs as 65534 under root
		t.Fatal(err)
	}
	hang := filepath.Join(dir, "bwrap")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec /bin/sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = probe(context.Background(), hang, 300*time.Millisecond)
	if !errors.Is(err, ErrProbe) || !strings.Contains(err.Error(), "did not finish in 300ms") || !strings.Contains(err.Error(), "fix: ") {
		t.Errorf("Probe(a bwrap that hangs) = %v; want the timeout named, with a fix", err)
	}
}
