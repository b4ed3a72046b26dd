package wall

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/tests/testenv"
	"toybox/vat/wall/seccomp"
)

// held fails t on any BREACH line and returns the number of HELD lines.
func held(t *testing.T, out string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "BREACH"):
			t.Errorf("the wall did not hold: %s", line)
		case strings.HasPrefix(line, "HELD"):
			n++
		}
	}
	return n
}

// heldBy checks that the wall held exactly n attempts and got through none,
// each refused with an error that says want.
func heldBy(t *testing.T, out string, n int, want string) {
	t.Helper()
	if got := held(t, out); got != n {
		t.Errorf("held %d of %d attempts; output:\n%s", got, n, out)
	}
	for _, l := range lines(out, "HELD ") {
		if !strings.Contains(l, want) {
			t.Errorf("%s: want %q", l, want)
		}
	}
}

func lines(out, prefix string) []string {
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			got = append(got, v)
		}
	}
	return got
}

func TestWallRunsApp(t *testing.T) {
	f := newFixture(t, "hello")
	out, err := f.runVictim(t, "hello")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if !strings.Contains(out, "hello from inside") {
		t.Errorf("output = %q; want the app's greeting", out)
	}
}

func TestAppExitStatusPreserved(t *testing.T) {
	f := newFixture(t, "exit")
	_, err := f.runVictim(t, "no-such-mode") // the victim exits 2
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("Wait = %v; want exit status 2", err)
	}
}

func TestAppInheritsExactlyFourFDs(t *testing.T) {
	f := newFixture(t, "fds")
	f.spec.Net = Net{} // with the entry's capability and proxy too
	entryA, entryB := socketpair(t)
	defer entryB.Close()
	f.spec.EntryCap = entryA
	// Leak bait: an fd the supervisor holds open without CLOEXEC.
	bait := highFD(t, "/etc/hostname")
	defer bait.Close()
	out, err := f.runVictimNoVat(t, "fds", entryB)
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if got := lines(out, "FDS "); len(got) != 1 || got[0] != "[0 1 2 3]" {
		t.Errorf("the app's fds = %v; want [[0 1 2 3]] (output:\n%s)", got, out)
	}
	if !strings.Contains(out, "FD3 unix") {
		t.Errorf("fd 3 is not the unix capability socket; output:\n%s", out)
	}
}

func TestAppInheritsExactlyFourFDsWithoutEntry(t *testing.T) {
	f := newFixture(t, "fds-direct") // Net.None: toybox-entry without a capability
	bait := highFD(t, "/etc/hostname")
	defer bait.Close()
	out, err := f.runVictim(t, "fds")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if got := lines(out, "FDS "); len(got) != 1 || got[0] != "[0 1 2 3]" {
		t.Errorf("the app's fds = %v; want [[0 1 2 3]] (output:\n%s)", got, out)
	}
	if !strings.Contains(out, "FD3 unix") {
		t.Errorf("fd 3 is not the unix capability socket; output:\n%s", out)
	}
}

func TestEnvironmentIsBuilt(t *testing.T) {
	f := newFixture(t, "envy")
	f.spec.Net = Net{ProxyPort: 39080, Forwards: []Forward{{Port: 39080, Host: "127.0.0.1", TargetPort: 5432}}}
	f.spec.Env = map[string]string{"API_KEY": "owner-typed", "TOYBOX_VAT": "spoofed"}
	entryA, entryB := socketpair(t)
	defer entryB.Close()
	f.spec.EntryCap = entryA
	out, err := f.runVictimNoVat(t, "env", entryB)
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	env := map[string]string{}
	for _, kv := range lines(out, "ENV ") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	want := map[string]string{
		"API_KEY":             "owner-typed",
		"TOYBOX_VAT":          "envy",
		"TOYBOX_LISTEN":       "/run/toybox/app.sock",
		"TOYBOX_CAP_FD":       "3",
		"TOYBOX_DATA":         f.data,
		"HOME":                f.data,
		"XDG_CACHE_HOME":      f.data + "/.cache",
		"npm_config_cache":    f.data + "/.cache/npm",
		"UV_CACHE_DIR":        f.data + "/.cache/uv",
		"TMPDIR":              "/tmp",
		"PATH":                "/usr/bin:/bin",
		"LANG":                "C.UTF-8",
		"HTTP_PROXY":          "http://127.0.0.1:39081", // bumped past the forward
		"HTTPS_PROXY":         "http://127.0.0.1:39081",
		"http_proxy":          "http://127.0.0.1:39081",
		"https_proxy":         "http://127.0.0.1:39081",
		"NO_PROXY":            "localhost,127.0.0.1,::1",
		"no_proxy":            "localhost,127.0.0.1,::1",
		"NODE_USE_ENV_PROXY":  "1",
		"PYTHONUNBUFFERED":    "1",
		"PYTHONPYCACHEPREFIX": f.data + "/.cache/python",
		victimEnv:             "env",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q; want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"SECRET_TOKEN"} {
		if _, ok := env[k]; ok {
			t.Errorf("env has the supervisor's %s", k)
		}
	}
	for k := range env {
		if _, ok := want[k]; !ok && k != "USER" && k != "LOGNAME" && k != "PWD" {
			t.Errorf("env has unexpected %s=%q", k, env[k])
		}
	}
}

func TestNoNetHasNoProxyVariables(t *testing.T) {
	f := newFixture(t, "quiet")
	out, err := f.runVictim(t, "env")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	for _, kv := range lines(out, "ENV ") {
		if k, _, _ := strings.Cut(kv, "="); strings.Contains(strings.ToLower(k), "proxy") {
			t.Errorf("Net.None, yet the env has %s", kv)
		}
	}
}

func TestAppNeverRunsAsRoot(t *testing.T) {
	f := newFixture(t, "ids")
	out, err := f.runVictim(t, "ids")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	held(t, out)
	want := fmt.Sprintf("UID %d GID %d EUID %d", InsideUID, InsideGID, InsideUID)
	if !strings.Contains(out, want) {
		t.Errorf("output = %q; want %q", out, want)
	}
	if !strings.Contains(out, fmt.Sprintf("DATAOWNER %d", InsideUID)) || !strings.Contains(out, "DATAWRITE ok") {
		t.Errorf("the app does not own its data folder; output:\n%s", out)
	}
	if os.Geteuid() == 0 {
		fi, err := os.Stat(f.data)
		if err != nil {
			t.Fatal(err)
		}
		if uid := fileUID(fi); uid != NobodyID {
			t.Errorf("data folder owned by host uid %d; want %d", uid, NobodyID)
		}
	}
}

func TestAttackReadSecrets(t *testing.T) {
	f := newFixture(t, "thief")
	// Another vat's data, the settings file, the supervisor's secrets.
	other := filepath.Join(f.state, "data", "other")
	mustWrite(t, filepath.Join(other, "secret.txt"), "other vat's secret")
	mustWrite(t, filepath.Join(f.state, "walls.json"), `{"secret":1}`)
	mustWrite(t, filepath.Join(f.install, ".env"), "API_KEY=install-secret")
	mustWrite(t, filepath.Join(f.install, "sub", "deeper", ".env"), "API_KEY=deep-secret")
	mustWrite(t, filepath.Join(f.install, "sub", ".mcp.json"), `{"token":"resolved"}`)
	// An owner-chosen read-only tree with its own secrets inside.
	tree := filepath.Join(filepath.Dir(f.state), "owner-tree")
	mustWrite(t, filepath.Join(tree, "notes.txt"), "fine to read")
	mustWrite(t, filepath.Join(tree, ".env"), "OWNER=secret")
	mustWrite(t, filepath.Join(tree, "a", "b", ".env"), "OWNER=deep")
	mustWrite(t, filepath.Join(tree, ".env.local"), "OWNER=local")
	mustWrite(t, filepath.Join(tree, "a", ".netrc"), "machine x password y")
	mustWrite(t, filepath.Join(tree, ".git-credentials"), "https://u:token@example.org")
	f.spec.Files.Read = []string{tree}
	f.spec.Env = map[string]string{"VICTIM_ARG": strings.Join([]string{
		"/etc/shadow", "/etc/gshadow",
		filepath.Join(other, "secret.txt"),
		filepath.Join(f.state, "walls.json"),
		filepath.Join(f.install, ".env"),
		filepath.Join(f.install, "sub", "deeper", ".env"),
		filepath.Join(f.install, "sub", ".mcp.json"),
		filepath.Join(tree, ".env"),
		filepath.Join(tree, "a", "b", ".env"),
		filepath.Join(tree, ".env.local"),
		filepath.Join(tree, "a", ".netrc"),
		filepath.Join(tree, ".git-credentials"),
	}, ":")}
	out, err := f.runVictim(t, "read")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if n := held(t, out); n != 12 {
		t.Errorf("held %d of 12 reads; output:\n%s", n, out)
	}
	// Control: the owner's ordinary file is readable.
	f2 := newFixture(t, "reader")
	mustWrite(t, filepath.Join(filepath.Dir(f2.state), "owner-tree", "notes.txt"), "fine to read")
	mustWrite(t, filepath.Join(filepath.Dir(f2.state), "owner-tree", ".env.example"), "API_KEY=")
	f2.spec.Files.Read = []string{filepath.Join(filepath.Dir(f2.state), "owner-tree")}
	for _, c := range []struct{ name, want string }{{"notes.txt", "fine to read"}, {".env.example", "API_KEY="}} {
		f2.spec.Env = map[string]string{"VICTIM_ARG": filepath.Join(filepath.Dir(f2.state), "owner-tree", c.name)}
		out, err = f2.runVictim(t, "readok")
		if err != nil || !strings.Contains(out, fmt.Sprintf("READ %q", c.want)) {
			t.Errorf("reading the owner-chosen %s: err %v, output %q", c.name, err, out)
		}
	}
}

func TestAttackListStateDir(t *testing.T) {
	f := newFixture(t, "lister")
	mustWrite(t, filepath.Join(f.state, "data", "other", "x"), "x")
	f.spec.Env = map[string]string{"VICTIM_ARG": strings.Join([]string{f.state, filepath.Join(f.state, "data"), filepath.Join(f.state, "code"), "/root", "/home", "/etc"}, ":")}
	out, err := f.runVictim(t, "list")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	held(t, out)
	for _, l := range lines(out, "LIST ") {
		p, names, _ := strings.Cut(l, " ")
		switch p {
		case f.state:
			if names != "[code data]" {
				t.Errorf("the state dir shows %s; want only the parents of the vat's own folders", names)
			}
		case filepath.Join(f.state, "data"):
			if names != "[lister]" {
				t.Errorf("the data dir shows %s; want only its own", names)
			}
		case "/etc":
			for _, bad := range []string{"shadow", "gshadow", "sudoers", "ssh", "credstore"} {
				if strings.Contains(names, bad) {
					t.Errorf("/etc shows %s: %s", bad, names)
				}
			}
		case "/root", "/home":
			t.Errorf("%s is visible: %s", p, names)
		}
	}
}

func TestAttackSupervisorEnv(t *testing.T) {
	f := newFixture(t, "envthief")
	secret := "supervisor-secret-" + strconv.Itoa(os.Getpid())
	f.spec.HostEnv = []string{"PATH=/usr/bin:/bin", "SUPERVISOR_SECRET=" + secret, "CREDENTIALS_DIRECTORY=/run/credentials/toybox.service"}
	f.spec.Env = map[string]string{"VICTIM_ARG": reverse(secret)}
	out, err := f.runVictim(t, "environs")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if held(t, out) != 1 {
		t.Errorf("output:\n%s", out)
	}
}

// TestAttackWriteOwnCode: the app writes none of its code, the system's,
// the wall's root or pid 1's program (toybox-entry, run from its
// descriptor, not mounted), with a way out and without.
func TestAttackWriteOwnCode(t *testing.T) {
	for _, withEntry := range []bool{false, true} {
		t.Run(map[bool]string{false: "no way out", true: "with a way out"}[withEntry], func(t *testing.T) {
			f := newFixture(t, "rewriter")
			f.spec.Env = map[string]string{"VICTIM_ARG": strings.Join([]string{
				filepath.Join(f.install, "app"), filepath.Join(f.install, "new-file"), "/usr/bin/evil", "/etc/passwd",
				"/evil",       // the wall's root (a tmpfs remounted read-only)
				"/proc/1/exe", // pid 1's program: toybox-entry
			}, ":")}
			var out string
			var err error
			if withEntry {
				f.spec.Net = Net{}
				ea, eb := socketpair(t)
				f.spec.EntryCap = ea
				out, err = f.runVictimNoVat(t, "write", eb)
			} else {
				out, err = f.runVictim(t, "write")
			}
			if err != nil {
				t.Fatalf("Wait = %v; output:\n%s", err, out)
			}
			if n := held(t, out); n != 6 {
				t.Errorf("held %d of 6 writes; output:\n%s", n, out)
			}
			for _, p := range []string{filepath.Join(f.install, "app"), f.entry} {
				if b, _ := os.ReadFile(p); string(b) == "pwned" {
					t.Errorf("the app rewrote %s", p)
				}
			}
		})
	}
}

func TestAttackNetwork(t *testing.T) {
	f := newFixture(t, "dialer")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	targets := []string{l.Addr().String(), "10.0.0.1:80", "192.168.1.1:80", "1.1.1.1:443", "[::1]:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)}
	if ip := hostIP(); ip != "" {
		targets = append(targets, net.JoinHostPort(ip, strconv.Itoa(l.Addr().(*net.TCPAddr).Port)))
	}
	f.spec.Env = map[string]string{"VICTIM_ARG": strings.Join(targets, ",")}
	out, err := f.runVictim(t, "dial")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if n := held(t, out); n != len(targets) {
		t.Errorf("held %d of %d dials; output:\n%s", n, len(targets), out)
	}
	select {
	case <-accepted:
		t.Error("the host's loopback listener accepted a connection from inside the wall")
	default:
	}
}

func TestAttackSockets(t *testing.T) {
	f := newFixture(t, "raw")
	out, err := f.runVictim(t, "sockets")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if n := held(t, out); n != 6 {
		t.Errorf("held %d of 6 socket attempts; output:\n%s", n, out)
	}
	if !strings.Contains(out, "TCP socket ok") {
		t.Errorf("an ordinary TCP socket failed; output:\n%s", out)
	}
}

func TestAttackSyscalls(t *testing.T) {
	f := newFixture(t, "escaper")
	out, err := f.runVictim(t, "syscalls")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	heldBy(t, out, 18, "operation not permitted") // EPERM from the filter
	if !strings.Contains(out, "getrandom ok") {
		t.Errorf("an allowed call failed; output:\n%s", out)
	}
}

func TestSeccompVictimDies(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testenvUnavailable(t, "the x32 victim is amd64 only")
	}
	f := newFixture(t, "x32")
	out, err := f.runVictim(t, "x32")
	held(t, out)
	var ee *exec.ExitError
	// toybox-entry reports a signalled app as 128+signal; SIGSYS is 31.
	if !errors.As(err, &ee) || ee.ExitCode() != 128+31 {
		t.Fatalf("Wait = %v; want exit status 159 (killed by SIGSYS); output:\n%s", err, out)
	}
	if !strings.Contains(out, "calling x32 getpid") {
		t.Errorf("the victim never reached the call; output:\n%s", out)
	}
}

func TestNoSeccompTier(t *testing.T) {
	f := newFixture(t, "tier")
	f.spec.NoSeccomp = true
	if _, err := BuildPlan(f.spec); !errors.Is(err, ErrNoSeccomp) {
		t.Errorf("BuildPlan(NoSeccomp where a table exists) = %v; want ErrNoSeccomp", err)
	}
	f.spec.NoSeccomp = false
	p, err := BuildPlan(f.spec)
	if err != nil {
		t.Fatal(err)
	}
	if p.Tier != TierWalled || !p.Seccomp {
		t.Errorf("tier = %q seccomp=%v; want walled with seccomp", p.Tier, p.Seccomp)
	}
}

func TestAttackSymlinkSwapBetweenPlanAndBind(t *testing.T) {
	tests := []struct {
		name string
		swap func(t *testing.T, f *fixture, decoy string)
		want error
	}{
		{"symlink", func(t *testing.T, f *fixture, decoy string) {
			mustRename(t, f.data, f.data+".moved")
			if err := os.Symlink(decoy, f.data); err != nil {
				t.Fatal(err)
			}
		}, ErrSymlink},
		{"another folder", func(t *testing.T, f *fixture, decoy string) {
			mustRename(t, f.data, f.data+".moved")
			mustRename(t, decoy, f.data)
		}, ErrChanged},
		{"symlinked parent", func(t *testing.T, f *fixture, _ string) {
			data := filepath.Dir(f.data)
			elsewhere := filepath.Join(filepath.Dir(f.state), "elsewhere")
			mustWrite(t, filepath.Join(elsewhere, filepath.Base(f.data), "planted"), "x")
			mustRename(t, data, data+".moved")
			if err := os.Symlink(elsewhere, data); err != nil {
				t.Fatal(err)
			}
		}, ErrSymlink},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "swapper")
			decoy := filepath.Join(f.state, "data", "victim-of-swap")
			mustWrite(t, filepath.Join(decoy, "secret"), "another vat's data")
			f.caps(t)
			plan, err := BuildPlan(f.spec)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.spec.Host.ensureEtcView(plan); err != nil {
				t.Fatal(err)
			}
			tt.swap(t, f, decoy)
			var fds fdTable
			defer fds.closeAll()
			views := f.spec.Host.newViewHold()
			defer views.release()
			_, _, err = plan.render(&fds, f.spec, views)
			if !errors.Is(err, tt.want) {
				t.Fatalf("render after the swap = %v; want %v", err, tt.want)
			}
			// And Start, planning afresh, refuses a symlinked data folder.
			if errors.Is(tt.want, ErrSymlink) && tt.name == "symlink" {
				f.caps(t)
				p, err := Start(context.Background(), f.spec, nil)
				if err == nil {
					_ = p.Stop(time.Second)
					t.Fatal("Start with a symlinked data folder succeeded")
				}
				if !errors.Is(err, ErrSymlink) {
					t.Errorf("Start = %v; want ErrSymlink", err)
				}
			}
		})
	}
}

func TestStopEndsTheWall(t *testing.T) {
	for _, withEntry := range []bool{false, true} {
		t.Run(map[bool]string{false: "no way out", true: "with a way out"}[withEntry], func(t *testing.T) {
			f := newFixture(t, "sleeper")
			// The app gets going, then is stopped.
			p, _ := f.startVictim(t, "sleep", withEntry)
			if p.Tier() != TierWalled || p.Pid() <= 0 {
				t.Errorf("Tier() = %q Pid() = %d", p.Tier(), p.Pid())
			}
			began := time.Now()
			err := p.Stop(5 * time.Second)
			if took := time.Since(began); took > 4*time.Second {
				t.Errorf("Stop took %v; SIGTERM should end the sleeping app at once", took)
			}
			var ee *exec.ExitError
			// The app dies of the SIGTERM toybox-entry forwarded
			// (128+15), in a wall with no way out too: the entry is
			// every wall's pid 1, and the app (pid 2) can die of it.
			want := 128 + 15
			if !errors.As(err, &ee) || ee.ExitCode() != want {
				t.Errorf("Stop = %v; want exit status %d (SIGTERM reached the app)", err, want)
			}
			if err := syscallKill0(p.Pid()); err == nil {
				t.Errorf("bwrap (pid %d) still exists after Stop", p.Pid())
			}
			if err := p.Wait(); !errors.As(err, &ee) {
				t.Errorf("Wait after Stop = %v; want the same exit", err)
			}
		})
	}
}

func TestStartFailsClosed(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(f *fixture)
		want   error
	}{
		{"no command", func(f *fixture) { f.spec.Command = nil }, ErrSpec},
		{"bad id", func(f *fixture) { f.spec.ID = "../x" }, ErrSpec},
		{"missing entry", func(f *fixture) {
			f.spec.Net = Net{}
			f.spec.EntryCap, _ = socketpair(t0)
			f.spec.EntryPath = "/nonexistent/toybox-entry"
		}, ErrSpec},
		{"data outside state", func(f *fixture) { f.spec.DataDir = "/tmp" }, ErrSpec},
		{"read the state dir", func(f *fixture) { f.spec.Files.Read = []string{f.state} }, ErrRefusedBind},
		{"read another vat", func(f *fixture) { f.spec.Files.Read = []string{filepath.Join(f.state, "data")} }, ErrRefusedBind},
		{"write /etc/shadow", func(f *fixture) { f.spec.Files.Write = []string{"/etc/shadow"} }, ErrRefusedBind},
		{"read a .env", func(f *fixture) { f.spec.Files.Read = []string{filepath.Join(f.install, ".env")} }, ErrRefusedBind},
		{"hidden home entry", func(f *fixture) {
			f.spec.HostEnv = append(f.spec.HostEnv, "HOME="+filepath.Dir(f.state))
			f.spec.Files.Read = []string{filepath.Join(filepath.Dir(f.state), ".ssh")}
		}, ErrRefusedBind},
		{"systemd folder", func(f *fixture) { f.spec.Files.Read = []string{"/etc/systemd"} }, ErrRefusedBind},
		{"the supervisor's credentials directory", func(f *fixture) {
			creds := filepath.Join(filepath.Dir(f.state), "creds")
			mustMkdir(f, creds)
			f.spec.HostEnv = append(f.spec.HostEnv, "CREDENTIALS_DIRECTORY="+creds)
			f.spec.Files.Read = []string{creds}
		}, ErrRefusedBind},
		{"an autostart folder in a home", func(f *fixture) {
			home := filepath.Dir(f.state)
			mustMkdir(f, filepath.Join(home, "autostart"))
			f.spec.HostEnv = append(f.spec.HostEnv, "HOME="+home)
			f.spec.Files.Read = []string{filepath.Join(home, "autostart")}
		}, ErrRefusedBind},
		{"a systemd folder in a home", func(f *fixture) {
			home := filepath.Dir(f.state)
			mustMkdir(f, filepath.Join(home, "config", "systemd", "user"))
			f.spec.HostEnv = append(f.spec.HostEnv, "HOME="+home)
			f.spec.Files.Write = []string{filepath.Join(home, "config", "systemd", "user")}
		}, ErrRefusedBind},
		{"the whole /etc over the view", func(f *fixture) { f.spec.Files.Read = []string{"/etc"} }, ErrRefusedBind},
		{"over the root", func(f *fixture) { f.spec.Files.Read = []string{"/"} }, ErrRefusedBind},
		{"over the run folder", func(f *fixture) { f.spec.Files.Write = []string{"/run/toybox/x"} }, ErrRefusedBind},
		{"command in data", func(f *fixture) {
			mustWrite(t0, filepath.Join(f.data, "run.sh"), "#!/bin/sh\n")
			_ = os.Chmod(filepath.Join(f.data, "run.sh"), 0o755)
			f.spec.Command = []string{filepath.Join(f.data, "run.sh")}
		}, ErrCommandWritable},
		{"command in a writable owner folder", func(f *fixture) {
			dir := filepath.Join(filepath.Dir(f.state), "rw")
			mustWrite(t0, filepath.Join(dir, "tool"), "#!/bin/sh\n")
			_ = os.Chmod(filepath.Join(dir, "tool"), 0o755)
			f.spec.Files.Write = []string{dir}
			f.spec.Command = []string{filepath.Join(dir, "tool")}
		}, ErrCommandWritable},
		{"symlinked ownEnvFile", func(f *fixture) {
			mustWrite(t0, filepath.Join(filepath.Dir(f.state), "elsewhere.env"), "X=1")
			_ = os.Symlink(filepath.Join(filepath.Dir(f.state), "elsewhere.env"), filepath.Join(f.install, ".env"))
			f.spec.OwnEnvFile = true
		}, ErrSymlink},
		{"tree too large", func(f *fixture) {
			big := filepath.Join(filepath.Dir(f.state), "big")
			_ = os.MkdirAll(big, 0o755)
			f.spec.ScanLimit = 100
			for i := range 101 {
				fh, err := os.OpenFile(filepath.Join(big, strconv.Itoa(i)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
				if err == nil {
					fh.Close()
				}
			}
			f.spec.Files.Read = []string{big}
		}, ErrTreeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 = t
			f := newFixture(t, "closed")
			tt.mutate(f)
			f.caps(t)
			p, err := Start(context.Background(), f.spec, nil)
			if err == nil {
				_ = p.Stop(time.Second)
				t.Fatalf("Start = nil; want %v", tt.want)
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("Start = %v; want %v", err, tt.want)
			}
			// Start took ownership of the capability and closed it.
			if _, err := f.spec.AppCap.Stat(); err == nil {
				t.Errorf("the app capability is still open after a failed Start")
			}
		})
	}
}

// t0 lets table mutators report setup failures.
var t0 *testing.T

func TestOwnEnvFileRebound(t *testing.T) {
	f := newFixture(t, "ownenv")
	mustWrite(t, filepath.Join(f.install, ".env"), "OWN=1")
	mustWrite(t, filepath.Join(f.install, "sub", ".env"), "OTHER=1")
	f.spec.OwnEnvFile = true
	f.spec.Env = map[string]string{"VICTIM_ARG": filepath.Join(f.install, ".env")}
	out, err := f.runVictim(t, "readok")
	if err != nil || !strings.Contains(out, `READ "OWN=1"`) {
		t.Errorf("reading its own .env: err %v, output %q", err, out)
	}
	f.spec.Env = map[string]string{"VICTIM_ARG": filepath.Join(f.install, "sub", ".env") + ":" + filepath.Join(f.install, ".env")}
	f.spec.Env["VICTIM_ARG"] = filepath.Join(f.install, "sub", ".env")
	out, err = f.runVictim(t, "read")
	if err != nil || held(t, out) != 1 {
		t.Errorf("a nested .env beside ownEnvFile: err %v, output %q", err, out)
	}
	f.spec.Env["VICTIM_ARG"] = filepath.Join(f.install, ".env")
	out, err = f.runVictim(t, "write")
	if err != nil || held(t, out) != 1 {
		t.Errorf("writing its own .env: err %v, output %q", err, out)
	}
}

func TestPlanMasksAndBinds(t *testing.T) {
	f := newFixture(t, "planner")
	home := filepath.Join(filepath.Dir(f.state), "home")
	mustWrite(t, filepath.Join(home, ".ssh", "id_ed25519"), "key")
	mustWrite(t, filepath.Join(home, ".netrc"), "machine x")
	mustWrite(t, filepath.Join(home, "docs", "a.txt"), "a")
	f.spec.HostEnv = []string{"PATH=/bin", "HOME=" + home}
	f.spec.Files.Read = []string{filepath.Dir(f.state)} // a tree that holds the state dir and a home
	p, err := BuildPlan(f.spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{f.state, filepath.Join(home, ".ssh"), filepath.Join(home, ".netrc")} {
		if !slices.Contains(p.Masks, m) {
			t.Errorf("Masks = %v; want %s masked", p.Masks, m)
		}
	}
	var sawState, sawData bool
	for i, op := range p.Ops {
		if op.Dest == f.state && op.Kind == OpMaskDir {
			sawState = true
		}
		if op.Dest == f.data && op.Kind == OpBindFD {
			sawData = true
			if !sawState {
				t.Errorf("op %d binds the data folder before the state dir is masked", i)
			}
		}
		if op.Src == "/etc/shadow" || op.Dest == "/etc/shadow" {
			t.Errorf("op %d touches /etc/shadow", i)
		}
		if op.Kind == OpROBind && op.Src == "/etc" {
			t.Errorf("op %d binds /etc wholesale", i)
		}
	}
	if !sawData {
		t.Error("the data folder is not bound read-write by fd")
	}
}

func TestProbe(t *testing.T) {
	testenvRequireBwrap(t)
	if err := Probe(context.Background(), ""); err != nil {
		t.Fatalf("Probe = %v", err)
	}
	checks := Doctor(context.Background(), "")
	if len(checks) < 5 {
		t.Fatalf("Doctor gave %d checks", len(checks))
	}
	for _, c := range checks {
		if !c.OK {
			t.Errorf("doctor check %s failed: %s (fix: %s)", c.Name, c.Detail, c.Fix)
		}
	}
}

// TestSysctlCheck: a sysctl that would stop sandboxes fails doctor only
// when no sandbox starts (Ubuntu's apparmor_restrict_unprivileged_userns=1
// with bwrap's own AppArmor profile passes the probe).
func TestSysctlCheck(t *testing.T) {
	const name, bad, fix = "kernel.apparmor_restrict_unprivileged_userns", "1", "give bwrap a profile"
	for _, tt := range []struct {
		v         string
		ok        bool
		sandboxOK bool
		wantOK    bool
	}{
		{"1", true, false, false},
		{"1", true, true, true},
		{"0", true, false, true},
		{"", false, false, true},
	} {
		c := sysctlCheck(name, tt.v, tt.ok, bad, fix, tt.sandboxOK)
		if c.OK != tt.wantOK || (!c.OK && c.Fix != fix) {
			t.Errorf("sysctlCheck(%q, present %v, sandbox starts %v) = %+v; want OK %v", tt.v, tt.ok, tt.sandboxOK, c, tt.wantOK)
		}
	}
}

func TestDiagnoseNamesCauseAndFix(t *testing.T) {
	cause, fix := diagnose("bwrap: setting up uid map: Permission denied", "")
	if cause == "" || fix == "" {
		t.Errorf("diagnose = %q, %q; want a cause and a fix", cause, fix)
	}
	if cause, fix := diagnose("bwrap: prctl(PR_SET_SECCOMP): Invalid argument", ""); !strings.Contains(cause, "seccomp filter") || !strings.Contains(fix, "CONFIG_SECCOMP_FILTER") {
		t.Errorf("diagnose(seccomp refused) = %q, %q; want the filter named", cause, fix)
	}
}

// TestProbeIsAWall: the probe's sandbox is a wall's shape: the walls'
// seccomp filter loaded, no privileges, the command as pid 1 under the
// wall's hostname, a read-only root.
func TestProbeIsAWall(t *testing.T) {
	bwrap := testenv.RequireBwrap(t)
	show := []string{"/bin/sh", "-c", "grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; echo pid $$; hostname; touch /x 2>&1 || echo root read-only"}
	out, err := probeRun(context.Background(), bwrap, probeTimeout, show)
	if err != nil {
		t.Fatalf("probe: %v: %s", err, out)
	}
	want := []string{"NoNewPrivs:\t1", "CapEff:\t0000000000000000", "pid 1\n", "toybox\n", "root read-only"}
	if seccomp.Supported() == nil {
		want = append(want, "Seccomp:\t2")
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("probe sandbox: no %q in:\n%s", w, out)
		}
	}
}

func reverse(s string) string {
	r := []byte(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

func TestEntryHoldsNoInheritedFD(t *testing.T) {
	f := newFixture(t, "holder")
	// Bait: a descriptor the supervisor left inheritable by accident, at a
	// number above the ones Start hands bwrap (those are dup2'ed over).
	bait := highFD(t, "/etc/hostname")
	defer bait.Close()
	// Once the app runs, the entry is past its setup.
	p, _ := f.startVictim(t, "sleep", true)
	defer p.Stop(time.Second)
	for _, pid := range []int{p.child} {
		ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			target, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + e.Name())
			if target == "/etc/hostname" {
				t.Errorf("toybox-entry (pid %d) holds the supervisor's fd %s -> %s", pid, e.Name(), target)
			}
		}
	}
}

func TestAttackPidOne(t *testing.T) {
	for _, shape := range []string{"no way out", "with a way out"} {
		t.Run("toybox-entry closed to the app, "+shape, func(t *testing.T) {
			f := newFixture(t, "pidone")
			var out string
			var err error
			if shape == "with a way out" {
				f.spec.Net = Net{}
				ea, eb := socketpair(t)
				f.spec.EntryCap = ea
				out, err = f.runVictimNoVat(t, "procmem", eb)
			} else {
				out, err = f.runVictim(t, "procmem")
			}
			if err != nil {
				t.Fatalf("Wait = %v; output:\n%s", err, out)
			}
			if n := held(t, out); n != 4 {
				t.Errorf("held %d of 4; output:\n%s", n, out)
			}
			// Run from /proc/self/fd/N, the entry names its task itself: the
			// listener-owner check and the bench know it by that name.
			if got := lines(out, "PID1 COMM "); len(got) != 1 || got[0] != "toybox-entry" {
				t.Errorf("pid 1's task name; want toybox-entry; output:\n%s", out)
			}
		})
	}
}

// Stop asks once: an app that catches SIGTERM and takes its time to end
// gets one, not the repeats meant for a pid 1 without a handler yet (a
// second one means "hurry" to many apps).
func TestStopAsksOnce(t *testing.T) {
	f := newFixture(t, "graceful")
	p, out := f.startVictim(t, "graceful", true)
	if err := p.Stop(10 * time.Second); err != nil {
		t.Errorf("Stop = %v; want the app's own clean exit", err)
	}
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), "SIGTERMS 1\n") {
		t.Errorf("the app's output %q; want exactly one SIGTERM", b)
	}
}

// waitSleeping waits until the victim in "sleep" or "graceful" mode says it
// runs; if it never does, the wall is stopped and the test fails.
func waitSleeping(t *testing.T, p *Process, out string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(out)
		if strings.Contains(string(b), "sleeping") {
			return
		}
		if time.Now().After(deadline) {
			_ = p.Stop(0)
			t.Fatalf("the app never started; output %q", b)
		}
	}
}

// TestAttackSymlinkedGrantSecrets: a grant the owner typed through a
// symlink on the host (/home -> var/home, a linked project) shows inside
// at the typed path; its secrets are masked there, not at the real path,
// where nothing is bound.
func TestAttackSymlinkedGrantSecrets(t *testing.T) {
	f := newFixture(t, "linked")
	root := filepath.Join(filepath.Dir(f.state), "owner")
	real := filepath.Join(root, "real", "proj")
	mustWrite(t, filepath.Join(real, ".env"), "API_KEY=owner-secret")
	mustWrite(t, filepath.Join(real, "sub", ".git-credentials"), "https://u:token@example.org")
	mustWrite(t, filepath.Join(real, "notes.txt"), "fine to read")
	link := filepath.Join(root, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	f.spec.Files.Read = []string{link}
	f.spec.Env = map[string]string{"VICTIM_ARG": strings.Join([]string{
		filepath.Join(link, ".env"),
		filepath.Join(link, "sub", ".git-credentials"),
	}, ":")}
	out, err := f.runVictim(t, "read")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if n := held(t, out); n != 2 {
		t.Errorf("held %d of 2 reads; output:\n%s", n, out)
	}
	f.spec.Env = map[string]string{"VICTIM_ARG": filepath.Join(link, "notes.txt")}
	if out, err := f.runVictim(t, "readok"); err != nil || !strings.Contains(out, `READ "fine to read"`) {
		t.Errorf("reading the granted notes through the link: err %v, output %q", err, out)
	}
}

// TestNestedGrantsRefused: a grant inside a folder the vat can write (a
// write or oauthDir grant, its data or run folder) is refused: the vat could
// rename the inner grant's parent and leave a symlink there, so that the
// next start binds whatever it names (read-write, if the inner grant is a
// write); and a write bind of the parent would cover a read grant inside
// it. A write grant inside a read grant is fine: its parent is read-only.
func TestNestedGrantsRefused(t *testing.T) {
	base := newFixture(t, "nested")
	out := filepath.Join(filepath.Dir(base.state), "srv", "app", "out")
	for _, d := range []string{filepath.Join(out, "cfg", "tokens"), filepath.Join(out, "cfg", "read")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(out, "config.json"), "{}")
	mustWrite(t, filepath.Join(base.data, "mine.txt"), "x")
	tests := []struct {
		name  string
		files Files
		ok    bool
	}{
		{"oauthDir inside a write grant", Files{Write: []string{out}, OAuthDir: []string{filepath.Join(out, "cfg", "tokens")}}, false},
		{"write inside a write grant", Files{Write: []string{out, filepath.Join(out, "cfg", "tokens")}}, false},
		{"read inside a write grant", Files{Read: []string{filepath.Join(out, "config.json")}, Write: []string{out}}, false},
		{"read inside its own data folder", Files{Read: []string{filepath.Join(base.data, "mine.txt")}}, false},
		{"write inside a read grant", Files{Read: []string{filepath.Dir(out)}, Write: []string{out}}, true},
		{"side by side", Files{Read: []string{filepath.Join(out, "cfg", "read")}, Write: []string{filepath.Join(out, "cfg", "tokens")}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := base.spec
			spec.Files = tt.files
			_, err := BuildPlan(spec)
			switch {
			case tt.ok && err != nil:
				t.Errorf("BuildPlan = %v; want it planned", err)
			case !tt.ok && (!errors.Is(err, ErrRefusedBind) || !strings.Contains(err.Error(), "which the vat can write")):
				t.Errorf("BuildPlan = %v; want a refusal saying the vat can write around it", err)
			}
		})
	}
}

// TestOwnerValuesNotOnACommandLine: every user of the host can read any
// process's /proc/<pid>/cmdline. The owner's environment values (API keys)
// reach bwrap through its --args descriptor, so no process of the wall
// shows them there; the app still gets the value.
func TestOwnerValuesNotOnACommandLine(t *testing.T) {
	const secret = "sk-owner-typed-secret-4711"
	f := newFixture(t, "argv")
	f.spec.Env = map[string]string{"API_KEY": secret}
	p, _ := f.startVictim(t, "sleep", true)
	defer func() { _ = p.Stop(time.Second) }()
	pids := append([]int{p.Pid()}, descendants(p.Pid())...)
	if len(pids) < 3 {
		t.Fatalf("the wall's processes: %v; want bwrap, toybox-entry and the app", pids)
	}
	for _, pid := range pids {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue // gone
		}
		if strings.Contains(string(cmdline), secret) {
			t.Errorf("pid %d's command line shows the owner's value: %q", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pids[len(pids)-1]))
	if err == nil && !strings.Contains(string(environ), "API_KEY="+secret) {
		t.Errorf("the app's environment lacks API_KEY: %q", environ)
	}
}

// descendants lists every process below pid, parents first.
func descendants(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces; cut after ')'.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) > 1 {
			if pp, err := strconv.Atoi(fields[1]); err == nil {
				parent[n] = pp
			}
		}
	}
	var out []int
	frontier := []int{pid}
	for len(frontier) > 0 {
		var next []int
		for c, pp := range parent {
			if slices.Contains(frontier, pp) {
				next = append(next, c)
			}
		}
		sort.Ints(next)
		out = append(out, next...)
		frontier = next
	}
	return out
}

// TestAttackSocketsInAGrant: a read-only bind still lets a process connect
// to the unix sockets in it and write to its FIFOs. A folder an owner
// grants may hold the supervisor's admin socket, a switchboard socket,
// docker.sock or an ssh-agent: every socket and FIFO found in a bound tree
// is masked, at any depth.
func TestAttackSocketsInAGrant(t *testing.T) {
	f := newFixture(t, "socks")
	dir := filepath.Join(filepath.Dir(f.state), "owner", "proj")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	var paths []string
	for _, name := range []string{"admin.sock", "sub/agent.sock"} {
		p := filepath.Join(dir, name)
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		_ = os.Chmod(p, 0o777) // anyone may connect: only the mask stops the wall
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				_ = c.Close()
			}
		}()
		paths = append(paths, p)
	}
	fifo := filepath.Join(dir, "cmd.fifo")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(fifo, 0o666)
	reader, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	paths = append(paths, fifo)
	mustWrite(t, filepath.Join(dir, "notes.txt"), "fine to read")
	f.spec.Files.Read = []string{dir}
	f.spec.Env = map[string]string{"VICTIM_ARG": strings.Join(paths, ":")}
	out, err := f.runVictim(t, "unix")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	if n := held(t, out); n != len(paths) {
		t.Errorf("held %d of %d; output:\n%s", n, len(paths), out)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the host's sockets accepted %d connections from the wall", n)
	}
	if n, _ := reader.Read(make([]byte, 64)); n > 0 {
		t.Errorf("the host's FIFO got %d bytes from the wall", n)
	}
	f.spec.Env = map[string]string{"VICTIM_ARG": filepath.Join(dir, "notes.txt")}
	if out, err := f.runVictim(t, "readok"); err != nil || !strings.Contains(out, `READ "fine to read"`) {
		t.Errorf("reading the granted notes: err %v, output %q", err, out)
	}
}

// TestWriteGrantOnReadOnlyMountRefused: a bind keeps its source mount's
// read-only flag (the systemd unit's ProtectSystem=strict makes most of
// the host read-only to toybox), so a write grant there is refused with a
// reason that says what to do, and a read grant there is fine.
func TestWriteGrantOnReadOnlyMountRefused(t *testing.T) {
	testenv.RequireRoot(t)
	f := newFixture(t, "rofs")
	ro := filepath.Join(filepath.Dir(f.state), "ro")
	if err := os.MkdirAll(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", ro, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "size=64k"); err != nil {
		testenv.Unavailable(t, "cannot mount a read-only tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(ro, unix.MNT_DETACH) })
	spec := f.spec
	spec.Files.Write = []string{ro}
	_, err := BuildPlan(spec)
	if !errors.Is(err, ErrRefusedBind) || !strings.Contains(err.Error(), "read-only mount") || !strings.Contains(err.Error(), "ReadWritePaths=") {
		t.Errorf("BuildPlan with a write grant on a read-only mount = %v; want a refusal naming the mount and the fix", err)
	}
	spec.Files.Write, spec.Files.OAuthDir = nil, []string{ro}
	if _, err := BuildPlan(spec); !errors.Is(err, ErrRefusedBind) {
		t.Errorf("BuildPlan with an oauthDir on a read-only mount = %v; want refused", err)
	}
	spec.Files.OAuthDir, spec.Files.Read = nil, []string{ro}
	if _, err := BuildPlan(spec); err != nil {
		t.Errorf("BuildPlan with a read grant on a read-only mount = %v; want it planned", err)
	}
}

// TestSealedCodeRunsAndStaysSealed: code sealed as vat/store seals it
// (root:group, folders and executables 0750, files 0640) runs in a wall of
// a per-vat uid that holds the code group, its ownEnvFile is readable
// inside, and starting the wall leaves the code's modes alone (it added
// o+x to the code folder on the way to the .env's bind).
func TestSealedCodeRunsAndStaysSealed(t *testing.T) {
	testenv.RequireRoot(t)
	const group = 999999
	f := newFixture(t, "sealed")
	mustWrite(t, filepath.Join(f.install, ".env"), "OWN=yes")
	err := filepath.WalkDir(f.install, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, 0, group); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := os.FileMode(0o640)
		if d.IsDir() || fi.Mode()&0o111 != 0 {
			mode = 0o750
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.spec.UID, f.spec.GID, f.spec.CodeGroup = 1000007, 1000007, group
	f.spec.OwnEnvFile = true
	f.spec.Env = map[string]string{"VICTIM_ARG": filepath.Join(f.install, ".env")}
	out, err := f.runVictim(t, "readok")
	if err != nil || !strings.Contains(out, `READ "OWN=yes"`) {
		t.Errorf("the wall's own .env: %v, %s", err, out)
	}
	if fi, err := os.Stat(f.install); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("the code folder after the start: %v, %v; want it still 0750", fi.Mode().Perm(), err)
	}
}

// mustMkdir makes dir (and its parents) for a fixture's case.
func mustMkdir(f *fixture, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		panic(err)
	}
}

// TestAttackFillMemory: a wall's tmpfs (/tmp, /var/tmp, /dev/shm, a folder
// masked with one) each took up to half the machine's memory, which no
// process is charged for: a vat could pin all of it, and the OOM killer
// would pick other processes. Each has a size now; the masked folder,
// which its owner (the app) can make writable, holds one page.
func TestAttackFillMemory(t *testing.T) {
	f := newFixture(t, "filler")
	// A read grant of a tree that holds the state dir: the state dir is
	// masked inside the wall with an empty tmpfs.
	f.spec.Files.Read = []string{filepath.Dir(f.state)}
	f.spec.TmpBytes = 4 << 20
	over := func(bytes int64) int { return int(bytes>>20) + 1 }
	f.spec.Env = map[string]string{"VICTIM_ARG": strings.Join([]string{
		fmt.Sprintf("/tmp=%d", over(f.spec.TmpBytes)),
		fmt.Sprintf("/var/tmp=%d", over(VarTmpBytes)),
		fmt.Sprintf("/dev/shm=%d", over(ShmBytes)),
		fmt.Sprintf("%s=1", f.state),
	}, ":")}
	out, err := f.runVictim(t, "fill")
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	heldBy(t, out, 4, "no space left on device") // the tmpfs full, not another refusal
}

// TestAttackForkBomb: a wall had no task limit of its own, so one vat could
// fork until the host ran out of pids (32768 here), and every other wall,
// the supervisor and the host's own services with it. The kernel counts
// RLIMIT_NPROC per user namespace and uid, so the wall's limit is its own:
// the app, its children and toybox-entry together. The app stops 32 short
// of it (the entry's reserve), and the entry lives on.
func TestAttackForkBomb(t *testing.T) {
	for _, shape := range []string{"no way out", "with a way out"} {
		t.Run(shape, func(t *testing.T) {
			f := newFixture(t, "forker")
			f.spec.MaxTasks = 128
			appLimit := f.spec.MaxTasks
			f.spec.Env = map[string]string{"VICTIM_ARG": strconv.Itoa(4 * f.spec.MaxTasks)}
			var out string
			var err error
			appLimit -= 32 // toybox-entry, pid 1 of every wall, keeps its reserve
			if shape == "with a way out" {
				f.spec.Net = Net{}
				ea, eb := socketpair(t)
				defer eb.Close()
				f.spec.EntryCap = ea
				out, err = f.runVictimNoVat(t, "forks", eb)
			} else {
				out, err = f.runVictim(t, "forks")
			}
			if err != nil {
				t.Fatalf("Wait = %v (want the wall's pid 1 to live through it); output:\n%s", err, out)
			}
			heldBy(t, out, 1, "resource temporarily unavailable") // EAGAIN: the task limit
			// The victim's own threads (and the entry's) count too: the
			// sleeps are fewer than the app's limit, and most of it.
			for _, l := range lines(out, "FORKED ") {
				if n, _ := strconv.Atoi(l); n >= appLimit || n < appLimit*3/4 {
					t.Errorf("started %d processes under an app limit of %d tasks", n, appLimit)
				}
			}
		})
	}
}

// TestAttackHostView: a wall's own procfs still showed the host's kernel
// command line, the host's file locks (here, one the test holds on a file
// of its own, by inode) and the host's boot id, the same in every wall. Each
// wall now reads an empty command line and lock list and a boot id of its
// own, a random UUID, different in each wall.
func TestAttackHostView(t *testing.T) {
	hostCmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil || len(hostCmdline) == 0 {
		t.Fatalf("the host's /proc/cmdline: %q, %v; the test needs one to hide", hostCmdline, err)
	}
	lockFile, err := os.OpenFile(filepath.Join(t.TempDir(), "locked"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lockFile.Close()
	// An open file description lock shows in every pid namespace's
	// /proc/locks (it has no owner process), with its device and inode.
	if err := unix.FcntlFlock(lockFile.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_WRLCK}); err != nil {
		t.Fatal(err)
	}
	hostBoot, err := os.ReadFile(BootIDPath)
	if err != nil {
		t.Fatal(err)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\n$`)
	boots := map[string]bool{string(hostBoot): true}
	for _, id := range []string{"viewer-a", "viewer-b"} {
		out, err := newFixture(t, id).runVictim(t, "hostview")
		if err != nil {
			t.Fatalf("%s: %v\n%s", id, err, out)
		}
		view := map[string]string{}
		for _, l := range lines(out, "VIEW ") {
			p, v, _ := strings.Cut(l, " ")
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
			view[p] = v
		}
		if v := view["/proc/cmdline"]; v != "" {
			t.Errorf("%s read /proc/cmdline as %q; want it empty (the host's is %q)", id, v, hostCmdline)
		}
		if v := view["/proc/locks"]; v != "" {
			t.Errorf("%s read /proc/locks as %q; want it empty", id, v)
		}
		boot := view[BootIDPath]
		if !uuid.MatchString(boot) || boots[boot] {
			t.Errorf("%s read its boot id as %q; want a random UUID of its own (the host's %q, seen %v)", id, boot, hostBoot, boots)
		}
		boots[boot] = true
	}
}

// TestAttackInotifySharedFiles: the host's system folders are the same
// inodes in every wall, so a vat that watches one (here /bin/busybox)
// learns when any process on the host opens it: another wall starting it,
// say. Without sandbox.inotify the filter refuses every way in
// (inotify_init, inotify_init1, inotify_add_watch); with it, the vat sees
// the other wall's start, as the manifest's owner agreed to.
func TestAttackInotifySharedFiles(t *testing.T) {
	const shared = "/bin/busybox"
	if _, err := os.Stat(shared); err != nil {
		testenv.Unavailable(t, shared+" is not installed (busybox-static)")
	}
	if seccomp.Supported() != nil {
		testenv.Unavailable(t, "no seccomp filter in this build")
	}
	f := newFixture(t, "watcher")
	f.spec.Env = map[string]string{"VICTIM_ARG": shared}
	out, err := f.runVictim(t, "inotify")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, call := range []string{"inotify_init", "inotify_add_watch(-1)", "inotify_init1"} {
		if want := "INOTIFY " + call + ": operation not permitted"; !strings.Contains(out, want) {
			t.Errorf("without sandbox.inotify: want %q; output:\n%s", want, out)
		}
	}

	g := newFixture(t, "watcher-optin")
	g.spec.Inotify = true
	g.spec.Env = map[string]string{"VICTIM_ARG": shared}
	p, outFile := g.startVictim(t, "inotify", false)
	defer p.Stop(time.Second)
	// Another vat starts, running the shared program.
	other := newFixture(t, "other")
	other.spec.Command = []string{shared, "true"}
	if out, err := other.runVictim(t, "hello"); err != nil {
		t.Fatalf("the other wall: %v\n%s", err, out)
	}
	testenv.WaitFor(t, 20*time.Second, func() error {
		b, _ := os.ReadFile(outFile)
		if !strings.Contains(string(b), "EVENT "+shared) {
			return fmt.Errorf("with sandbox.inotify, the watcher saw no open of %s by the other wall; output:\n%s", shared, b)
		}
		t.Logf("with sandbox.inotify the watcher saw: %s", strings.TrimSpace(string(b)))
		return nil
	})
}
