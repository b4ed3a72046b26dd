//go:build linux

package systemd

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"toybox/tests/testenv"
)

// systemdAnalyze finds systemd-analyze or marks the test unavailable.
func systemdAnalyze(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testenv.Unavailable(t, "systemd-analyze is not installed (apt-get install systemd)")
	}
	return p
}

// verify runs systemd-analyze verify on units (paths, or names under root
// when root is set). systemd-analyze reports most mistakes (unknown keys,
// values it cannot parse, missing executables) as warnings and still exits
// 0, so any output at all is a failure here.
func verify(t testing.TB, root string, units ...string) error {
	t.Helper()
	args := []string{"verify", "--man=no", "--recursive-errors=no"}
	if root != "" {
		args = append(args, "--root="+root)
	}
	cmd := exec.Command(systemdAnalyze(t), append(args, units...)...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("systemd-analyze verify: %w\n%s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		return fmt.Errorf("systemd-analyze verify warned:\n%s", s)
	}
	return nil
}

// makeInstall runs make install with DESTDIR=root and the given extra
// variables, installing the binaries in bin.
func makeInstall(t testing.TB, target, root, bin string, vars ...string) string {
	t.Helper()
	args := append([]string{"-s", "-C", repoRoot(t), target, "DESTDIR=" + root, "BIN=" + bin}, vars...)
	out, err := exec.Command("make", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// withSystemUnits copies the host's own unit directory and the host's
// programs our units run into root, so that systemd-analyze verify
// --root=root finds sysinit.target, sockets.target, /bin/sh and the rest
// of what our units depend on.
func withSystemUnits(t testing.TB, root string) {
	t.Helper()
	src := "/usr/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(src, "sysinit.target")); err != nil {
		testenv.Unavailable(t, "no systemd unit directory at "+src)
	}
	dst := filepath.Join(root, src)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", src, dst, err, out)
	}
	// The host's programs the units run that are not toybox's
	// (switchboard.service's ExecReload), as a system has them.
	for _, p := range []string{"/bin/sh"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-L", p, filepath.Join(root, p)).CombinedOutput(); err != nil {
			t.Fatalf("cp -L %s: %v\n%s", p, err, out)
		}
	}
}

// TestUnitsVerify installs the real binaries and the units into a DESTDIR
// root with make install and runs systemd-analyze verify on every installed
// unit there: a typo, a bad value or a wrong binary path fails it.
func TestUnitsVerify(t *testing.T) {
	systemdAnalyze(t)
	bin := binaries(t)
	for _, tt := range []struct {
		name, prefix string
	}{
		{"default prefix", "/usr/local"},
		{"opt prefix", "/opt/toybox"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			makeInstall(t, "install", root, bin, "PREFIX="+tt.prefix)
			withSystemUnits(t, root)
			for _, name := range unitNames {
				installed := filepath.Join(root, "etc/systemd/system", name)
				data, err := os.ReadFile(installed)
				if err != nil {
					t.Fatalf("make install did not install %s: %v", name, err)
				}
				if tt.prefix != "/usr/local" && bytes.Contains(data, []byte("/usr/local/")) {
					t.Errorf("installed %s still names /usr/local/ with PREFIX=%s", name, tt.prefix)
				}
			}
			if err := verify(t, root, unitNames...); err != nil {
				t.Error(err)
			}
			svc := readInstalled(t, root, "toybox.service")
			exec := strings.Fields(svc.get("Service", "ExecStart"))
			if want := tt.prefix + "/bin/toybox"; len(exec) == 0 || exec[0] != want {
				t.Errorf("installed toybox.service ExecStart = %q; want it to start %s", svc.get("Service", "ExecStart"), want)
			}
		})
	}
}

func readInstalled(t testing.TB, root, name string) unit {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "etc/systemd/system", name))
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(data)
	if err != nil {
		t.Fatalf("parsing installed %s: %v", name, err)
	}
	return u
}

// TestVerifyCatchesMistakes is the check's own test: each case breaks one
// line of a copy of the units, and verify must then fail. The copies start
// stand-in executables (links to true): what is tested is that the check has
// teeth, not the binaries.
func TestVerifyCatchesMistakes(t *testing.T) {
	systemdAnalyze(t)
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, unit, old, new string
	}{
		{"unknown key", "toybox.service", "LockPersonality=yes", "LockPersonaliti=yes"},
		{"bad namespace list", "toybox.service", "RestrictNamespaces=user", "RestrictNamespaces=user bogus"},
		{"missing binary", "switchboard.service", "/switchboard --listen", "/switchbaord --listen"},
		{"bad socket mode", "switchboard.socket", "SocketMode=0660", "SocketMode=0x660"},
		{"bad listen address", "toybox.socket", "ListenStream=127.0.0.1:8787", "ListenStream=127.0.0.1:87870"},
		{"misspelt section", "toybox-admin.socket", "[Socket]", "[Sockets]"},
		{"bad syscall group", "switchboard.service", "SystemCallFilter=@system-service", "SystemCallFilter=@system-servce"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := t.TempDir()
			for _, b := range binNames {
				if err := os.Symlink(truePath, filepath.Join(bin, b)); err != nil {
					t.Fatal(err)
				}
			}
			dir := t.TempDir()
			paths := writeRewrittenUnits(t, dir, bin)
			if err := verify(t, "", paths...); err != nil {
				t.Fatalf("the unbroken copies already fail: %v", err)
			}
			p := filepath.Join(dir, tt.unit)
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(data, []byte(tt.old)) {
				t.Fatalf("%s has no %q to break", tt.unit, tt.old)
			}
			if err := os.WriteFile(p, bytes.Replace(data, []byte(tt.old), []byte(tt.new), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := verify(t, "", paths...); err == nil {
				t.Errorf("verify passed %s with %q replaced by %q; want a failure", tt.unit, tt.old, tt.new)
			}
		})
	}
}

var exposureRE = regexp.MustCompile(`Overall exposure level for (\S+): ([0-9.]+)`)

// TestUnitsSecurity holds each service to an exposure ceiling
// (systemd-analyze security, 0 = locked down, 10 = unprotected), so loosening
// the hardening fails a test. toybox needs more room than the switchboard: its
// walls need user, mount, pid, net, ipc, uts and cgroup namespaces and the
// mount system calls, and their cgroups a delegated, writable cgroup of the
// unit's own (Delegate=yes, ProtectControlGroups=no: 0.1 and 0.2 of its 2.3;
// see the comments in systemd/toybox.service).
func TestUnitsSecurity(t *testing.T) {
	sa := systemdAnalyze(t)
	if err := exec.Command(sa, "security", "--help").Run(); err != nil {
		testenv.Unavailable(t, "systemd-analyze security is not available")
	}
	bin := t.TempDir()
	for _, b := range binNames {
		if err := os.Symlink("/usr/bin/true", filepath.Join(bin, b)); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	writeRewrittenUnits(t, dir, bin)
	tests := []struct {
		unit    string
		ceiling float64
	}{
		{"switchboard.service", 1.5},
		{"toybox.service", 2.3},
	}
	for _, tt := range tests {
		t.Run(tt.unit, func(t *testing.T) {
			cmd := exec.Command(sa, "security", "--offline=yes", "--no-pager", filepath.Join(dir, tt.unit))
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze security: %v\n%s", err, out)
			}
			m := exposureRE.FindSubmatch(out)
			if m == nil {
				t.Fatalf("no exposure level in:\n%s", out)
			}
			got, err := strconv.ParseFloat(string(m[2]), 64)
			if err != nil {
				t.Fatal(err)
			}
			if got > tt.ceiling {
				t.Errorf("exposure of %s = %.1f; want at most %.1f\n%s", tt.unit, got, tt.ceiling, out)
			}
		})
	}
}

// TestInstallUninstall installs into a DESTDIR root and uninstalls again:
// binaries executable, units and the sysusers entry readable, nothing left
// behind but the directories and the state.
func TestInstallUninstall(t *testing.T) {
	bin := binaries(t)
	root := t.TempDir()
	out := makeInstall(t, "install", root, bin)
	if strings.Contains(out, "systemctl") || strings.Contains(out, "useradd") {
		t.Errorf("make install with DESTDIR touched the host (systemctl or useradd):\n%s", out)
	}
	want := map[string]fs.FileMode{
		"usr/local/bin/switchboard":              0o755,
		"usr/local/bin/toybox":                   0o755,
		"usr/local/bin/toybox-entry":             0o755,
		"etc/sysusers.d/toybox.conf":             0o644,
		"usr/local/share/doc/toybox/systemd.md":  0o644,
		"etc/systemd/system/switchboard.socket":  0o644,
		"etc/systemd/system/switchboard.service": 0o644,
		"etc/systemd/system/toybox.socket":       0o644,
		"etc/systemd/system/toybox-admin.socket": 0o644,
		"etc/systemd/system/toybox.service":      0o644,
	}
	for p, mode := range want {
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			t.Errorf("make install: %v", err)
			continue
		}
		if got := fi.Mode().Perm(); got != mode {
			t.Errorf("mode of %s = %v; want %v", p, got, mode)
		}
	}
	for _, b := range binNames {
		a, err := os.ReadFile(filepath.Join(bin, b))
		if err != nil {
			t.Fatal(err)
		}
		c, err := os.ReadFile(filepath.Join(root, "usr/local/bin", b))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, c) {
			t.Errorf("installed %s differs from the built one", b)
		}
	}
	if sysusers, err := exec.LookPath("systemd-sysusers"); err == nil {
		// --dry-run against the DESTDIR root: the entry parses and would
		// create the toybox user and group there.
		out, err := exec.Command(sysusers, "--dry-run", "--root="+root).CombinedOutput()
		if err != nil {
			t.Errorf("systemd-sysusers --dry-run: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "toybox") {
			t.Errorf("systemd-sysusers --dry-run would not create toybox:\n%s", out)
		}
	}

	state := filepath.Join(root, "var/lib/toybox/data/alice")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	makeInstall(t, "uninstall", root, bin)
	for p := range want {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			t.Errorf("make uninstall left %s", p)
		}
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("make uninstall removed the state: %v", err)
	}
}

// TestReinstallReplacesBinaries: make install over a running install (an
// upgrade) must swap each binary in whole. toybox opens toybox-entry by
// path at every wall it starts, so a wall started during the upgrade
// must find the old binary or the new one, whole: never no file, and
// never a file still being written. install(1) unlinks the old file and
// copies the new one in at its final path, so for the length of the copy
// the path is missing, then partial. A reader opens each binary's path
// in a loop through seven make installs of 32 MiB ones.
func TestReinstallReplacesBinaries(t *testing.T) {
	root := t.TempDir()
	bins := map[string]string{}
	for _, v := range []string{"v1", "v2"} {
		dir := filepath.Join(t.TempDir(), v)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range binNames {
			body := bytes.Repeat([]byte(v+" "+b+"\n"), (32<<20)/len(v+" "+b+"\n"))
			if err := os.WriteFile(filepath.Join(dir, b), body, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		bins[v] = dir
	}
	makeInstall(t, "install", root, bins["v1"])
	whole := map[string]bool{}
	for _, v := range []string{"v1", "v2"} {
		for _, b := range binNames {
			body, err := os.ReadFile(filepath.Join(bins[v], b))
			if err != nil {
				t.Fatal(err)
			}
			whole[string(body)] = true
		}
	}
	stop := make(chan struct{})
	seen := make(chan []string)
	go func() {
		var bad []string
		for n := 0; ; n++ {
			select {
			case <-stop:
				seen <- bad
				return
			default:
			}
			b := binNames[n%len(binNames)]
			body, err := os.ReadFile(filepath.Join(root, "usr/local/bin", b))
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("%s: %v", b, err))
			case !whole[string(body)]:
				bad = append(bad, fmt.Sprintf("%s: %d bytes, neither binary whole", b, len(body)))
			}
		}
	}()
	for _, v := range []string{"v2", "v1", "v2", "v1", "v2", "v1", "v2"} { // seven upgrades: the window is a copy's length
		makeInstall(t, "install", root, bins[v])
	}
	close(stop)
	if bad := <-seen; len(bad) > 0 {
		t.Errorf("a reader during make install found %d broken binaries, e.g. %q; want the old or the new one whole", len(bad), bad[:min(len(bad), 3)])
	}
	for _, b := range binNames {
		now, _ := os.ReadFile(filepath.Join(root, "usr/local/bin", b))
		want, _ := os.ReadFile(filepath.Join(bins["v2"], b))
		if !bytes.Equal(now, want) {
			t.Errorf("%s after the upgrade is not the new binary", b)
		}
		if fi, err := os.Stat(filepath.Join(root, "usr/local/bin", b)); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s after the upgrade: %v, %v; want mode 0755", b, fi, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(root, "usr/local/bin", ".*")); len(left) > 0 {
		t.Errorf("make install left %v", left)
	}
}
