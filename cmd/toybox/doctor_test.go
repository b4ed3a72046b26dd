package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toybox/vat/wall"
)

func TestSubordinateCheck(t *testing.T) {
	dir := t.TempDir()
	subuid, subgid := filepath.Join(dir, "subuid"), filepath.Join(dir, "subgid")
	if c := subordinateCheck(subuid, subgid); !c.OK {
		t.Errorf("no files: %+v; want ok", c)
	}
	// useradd's 14th default range holds the code group and the first vat ids.
	for _, p := range []string{subuid, subgid} {
		if err := os.WriteFile(p, []byte("alice:100000:65536\nnick:951968:65536\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := subordinateCheck(subuid, subgid)
	if c.OK || !strings.Contains(c.Detail, "user nick's subordinate") || strings.Contains(c.Detail, "alice") || !strings.Contains(c.Fix, "usermod") {
		t.Errorf("a clashing range: %+v; want a failure naming nick, not alice, with the fix", c)
	}
}

// TestEntryCheck: doctor finds a toybox-entry the vats could not run (the
// walls run it from a descriptor, as the vats' uid), not only a missing one.
func TestEntryCheck(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(dir, "toybox-entry")
	if err := os.WriteFile(entry, []byte("\x7fELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	if c := entryCheck(entry); !c.OK || c.Detail != entry {
		t.Errorf("mode 0755: %+v; want ok", c)
	}
	// A path given with --entry that is not there is named as such, not
	// as a search next to toybox.
	missing := filepath.Join(dir, "missing")
	if c := entryCheck(missing); c.OK || !strings.Contains(c.Detail, "not found") || !strings.Contains(c.Detail, missing) || strings.Contains(c.Detail, "next to toybox") {
		t.Errorf("missing: %+v; want not found, naming %s", c, missing)
	}
	if os.Geteuid() != 0 {
		return // the owner's bits are the supervisor's, and they let it run
	}
	// Under a root supervisor the walls run as the vats' uids: the owner's
	// bits (root's) are not theirs.
	if err := os.Chmod(entry, 0o700); err != nil {
		t.Fatal(err)
	}
	if c := entryCheck(entry); c.OK || !strings.Contains(c.Detail, "does not let uid 1000000 execute it") || !strings.Contains(c.Fix, "0755") {
		t.Errorf("mode 0700 under root: %+v; want a failure naming the mode and the fix", c)
	}
}

// TestEntryCheckOwnUID: under a supervisor that is not root the walls run
// as its own uid, with all its groups: the kernel's access(2) decides, and
// the fix named for a refusal fixes it.
func TestEntryCheckOwnUID(t *testing.T) {
	entry := filepath.Join(t.TempDir(), "toybox-entry")
	if err := os.WriteFile(entry, []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Any uid but 0 takes the supervisor's-own branch (access(2) as this
	// process).
	why := entryUnrunnable(entry, 4242)
	if len(why) == 0 {
		t.Fatalf("mode 0644: nothing; want a refusal")
	}
	if err := os.Chmod(entry, 0o755); err != nil {
		t.Fatal(err)
	}
	if why := entryUnrunnable(entry, 4242); len(why) != 0 {
		t.Errorf("mode 0755: %q; want nothing", why)
	}
}

// TestLimitWarningsLetWallsRun: a limit this host cannot enforce is a
// warning, named with its reason; walls can still be built.
func TestLimitWarningsLetWallsRun(t *testing.T) {
	var b strings.Builder
	code := printChecks(&b, []wall.Check{
		{Name: "bubblewrap", OK: true, Detail: "found"},
		{Name: "limit: disk", Warn: true, Detail: "not enforced here: needs root"},
	})
	if code != 0 || !strings.Contains(b.String(), "warn limit: disk: not enforced here: needs root") || !strings.Contains(b.String(), "walls can be built") {
		t.Errorf("printChecks = %d\n%s; want 0, the warning and walls buildable", code, b.String())
	}
}

// TestLimitChecks: doctor has a line for every limit, each enforced or a
// warning with its reason and its fix (never a failure).
func TestLimitChecks(t *testing.T) {
	checks := limitChecks(t.TempDir(), os.Geteuid(), nil)
	seen := map[string]bool{}
	for _, c := range checks {
		seen[c.Name] = true
		if !c.OK && !c.Warn {
			t.Errorf("%s failed: %s", c.Name, c.Detail)
		}
		if c.Warn && !strings.HasPrefix(c.Detail, "not enforced here: ") {
			t.Errorf("%s: a warning without its reason: %q", c.Name, c.Detail)
		}
		if !c.OK && c.Fix == "" {
			t.Errorf("%s: a warning without its fix: %q", c.Name, c.Detail)
		}
	}
	for _, k := range []string{"memory", "swap", "cpu", "tasks", "disk", "prepare folders"} {
		if !seen["limit: "+k] {
			t.Errorf("no line for the %s limit in %+v", k, checks)
		}
	}
}

// TestTableCheck: doctor reads the operator's table as serve does.
func TestTableCheck(t *testing.T) {
	if c := tableCheck(filepath.Join(t.TempDir(), "none.json")); c.OK {
		t.Errorf("a --walls-table that is not there: %+v; want a failure", c)
	}
	if os.Geteuid() != 0 {
		return // the table must be root's
	}
	p := filepath.Join(t.TempDir(), "walls-table.json")
	if err := os.WriteFile(p, []byte(`{"approved": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := tableCheck(p); !c.OK || !strings.Contains(c.Detail, "0 approved commands") {
		t.Errorf("root's 0644 table: %+v; want ok", c)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	if c := tableCheck(p); c.OK || !strings.Contains(c.Detail, "writable by group or others") || c.Fix == "" {
		t.Errorf("a 0666 table: %+v; want a failure with the fix", c)
	}
}

// TestLimitChecksForService: doctor run as root, where toybox.service
// runs as User=toybox, never says a data folder's disk limit is
// enforced: under the unit it never is (a loop mount needs root). The
// line names the service and the fix; on cgroup v1 so do the cgroup
// limits, which systemd delegates to no service that is not root.
func TestLimitChecksForService(t *testing.T) {
	svc := &serviceUser{name: "toybox", uid: 4242}
	checks := limitChecks(t.TempDir(), 0, svc)
	v1 := false
	for _, c := range checks {
		if c.Name == "limits: cgroups" && strings.HasPrefix(c.Detail, "cgroup v1") {
			v1 = true
		}
	}
	for _, c := range checks {
		switch c.Name {
		case "limit: disk", "limit: prepare folders":
		case "limit: memory", "limit: swap", "limit: cpu", "limit: tasks":
			if !v1 {
				continue
			}
		default:
			continue
		}
		if c.OK || !c.Warn || !strings.Contains(c.Detail, "not for toybox.service (User=toybox") || c.Fix == "" {
			t.Errorf("%s as root with a toybox user: %+v; want a warning that toybox.service does not get it, with a fix", c.Name, c)
		}
	}
	tests := []struct {
		name string
		euid int
		svc  *serviceUser
		ok   bool
		want []string
	}{
		{"root, a toybox user", 0, svc, false, []string{"uid 0", "toybox.service runs as toybox (uid 4242)"}},
		{"the service's user", 4242, svc, true, []string{"uid 4242", "the user toybox.service runs as"}},
		{"no toybox user", 1000, nil, true, []string{"uid 1000", "may differ"}},
	}
	for _, tt := range tests {
		c := checkedAs(tt.euid, tt.svc)
		if c.Name != "checked as" || c.OK != tt.ok || c.Warn == tt.ok || (!c.OK && c.Fix == "") {
			t.Errorf("checkedAs(%s) = %+v; want ok %v (a warning with its fix otherwise)", tt.name, c, tt.ok)
		}
		for _, w := range tt.want {
			if !strings.Contains(c.Detail, w) {
				t.Errorf("checkedAs(%s) = %q; want it to say %q", tt.name, c.Detail, w)
			}
		}
	}
}

// TestPrintChecksFixFollows: a warning whose detail quotes a tool's
// lines (mkfs.ext4's) is one line, and its fix the very next.
func TestPrintChecksFixFollows(t *testing.T) {
	var b strings.Builder
	printChecks(&b, []wall.Check{{Name: "limit: disk", Warn: true, Detail: "not enforced here: mkfs.ext4: exit status 1: a\nb\n", Fix: "free room"}})
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 2 || lines[0] != "warn limit: disk: not enforced here: mkfs.ext4: exit status 1: a; b" || lines[1] != "     fix: free room" {
		t.Errorf("printChecks =\n%s\nwant the detail on one line, the fix on the next", b.String())
	}
}
