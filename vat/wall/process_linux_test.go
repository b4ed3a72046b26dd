package wall

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/schema"
	"toybox/schema/wire"
	"toybox/tests/testenv"
)

// refusingVat answers egress() with an error after a delay, long enough for
// the app (started while the entry asks) to be running when the answer comes.
type refusingVat struct {
	noGrantVat
	delay time.Duration
}

func (v refusingVat) Egress(ctx context.Context, _ schema.Vat_egress) error {
	select {
	case <-time.After(v.delay):
	case <-ctx.Done():
	}
	return errors.New("this test refuses egress")
}

// TestEntryFailsClosedWhenEgressFails: toybox-entry starts the app while it
// asks for the Handle; when the answer is an error, the app must not run on
// in a wall with no working network: it is killed and the wall exits with
// the entry's setup code, saying why.
func TestEntryFailsClosedWhenEgressFails(t *testing.T) {
	f := newFixture(t, "refused")
	busybox, err := exec.LookPath("busybox")
	if err != nil || !strings.HasPrefix(busybox, "/usr/") {
		testenv.Unavailable(t, "a busybox under /usr (busybox-static) is needed as the app")
	}
	f.spec.Command = []string{busybox, "sh", "-c", "echo started; sleep 5; echo late"}
	f.spec.Net = Net{}
	f.caps(t)
	ea, eb := socketpair(t)
	conn, err := wire.FromFile(eb, false)
	if err != nil {
		t.Fatal(err)
	}
	rc := conn.RPC(capnpClient(schema.Vat_ServerToClient(refusingVat{noGrantVat: noGrantVat{id: "refused"}, delay: 500 * time.Millisecond})), nil)
	t.Cleanup(func() { _ = rc.Close() })
	f.spec.EntryCap = ea
	dir := t.TempDir()
	outF, err := os.OpenFile(filepath.Join(dir, "stdout"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	errF, err := os.OpenFile(filepath.Join(dir, "stderr"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer outF.Close()
	defer errF.Close()
	f.spec.Stdout, f.spec.Stderr = outF, errF
	began := time.Now()
	p, err := Start(context.Background(), f.spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.peer.Close()
	err = p.Wait()
	took := time.Since(began)
	stdout, _ := os.ReadFile(outF.Name())
	stderr, _ := os.ReadFile(errF.Name())
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 {
		t.Fatalf("wall ended with %v, want exit status 125 (the entry's setup code); stderr: %s", err, string(stderr))
	}
	if took > 4*time.Second {
		t.Errorf("the wall took %v to end: the app was not killed when egress failed", took)
	}
	if strings.Contains(string(stdout), "late") {
		t.Errorf("the app ran on after egress failed; stdout %q", string(stdout))
	}
	if want := "asking the vat's capability for egress"; !strings.Contains(string(stderr), want) {
		t.Errorf("stderr %q does not say %q", string(stderr), want)
	}
	t.Logf("app output before the kill: %q; wall ended after %v", string(stdout), took.Round(time.Millisecond))
}

// TestUnreachableBindSource: an owner-chosen file below a folder the wall's
// uid cannot search: bubblewrap fails to bind it ("Can't find source path
// /proc/self/fd/N: Permission denied") and the wall's end names the folder
// and the fix.
func TestUnreachableBindSource(t *testing.T) {
	testenv.RequireRoot(t) // the wall runs as another uid, and /dev is made with mknod, only as root
	f := newFixture(t, "hidden-file")
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(private, "notes.txt"), "owner's notes\n")
	f.spec.Files.Read = []string{filepath.Join(private, "notes.txt")}
	f.caps(t)
	defer f.peer.Close()
	p, err := Start(context.Background(), f.spec, nil)
	if err == nil {
		err = p.Wait()
	}
	if err == nil || !strings.Contains(err.Error(), private+" (mode -rwx------") || !strings.Contains(err.Error(), "chmod o+x") {
		t.Errorf("the wall ended with %v; want bwrap's refusal with a hint naming %s and the fix", err, private)
	}
}

// TestEntryBelowAPrivateFolder: toybox-entry is run from its descriptor,
// not bound, so it runs wherever it is installed, even below a folder the
// wall's uid cannot search (as long as the file itself is executable).
func TestEntryBelowAPrivateFolder(t *testing.T) {
	testenv.RequireRoot(t) // the wall runs as another uid
	f := newFixture(t, "hidden-entry")
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(f.entry, filepath.Join(private, "toybox-entry"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.spec.EntryPath = filepath.Join(private, "toybox-entry")
	entryRuns(t, f)
}

// TestBwrapFailureSaysWhyAndFix: when bubblewrap cannot start a sandbox
// here at all, the vat's reason is the preflight's: the cause and the fix,
// not only bubblewrap's own line.
func TestBwrapFailureSaysWhyAndFix(t *testing.T) {
	f := newFixture(t, "nouserns")
	fake := filepath.Join(filepath.Dir(f.state), "fakebin")
	if err := os.MkdirAll(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(fake, "bwrap"), "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
	if err := os.Chmod(filepath.Join(fake, "bwrap"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fake+":"+os.Getenv("PATH"))
	f.caps(t)
	p, err := Start(context.Background(), f.spec, nil)
	if err == nil {
		_ = p.Stop(time.Second)
		t.Fatal("Start with a bubblewrap that cannot start a sandbox = nil")
	}
	if !errors.Is(err, ErrBwrap) {
		t.Errorf("Start = %v; want ErrBwrap", err)
	}
	for _, w := range []string{"setting up uid map", "cannot start a sandbox", "fix: "} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Start = %v; want it to say %q", err, w)
		}
	}
}

// TestEntryNotRunnable: toybox-entry that the wall's uid may not execute
// (its mode, or a noexec mount): bubblewrap's exec of /proc/self/fd/N
// fails, and the wall's end names the entry's file and the cause.
func TestEntryNotRunnable(t *testing.T) {
	testenv.RequireRoot(t) // the wall runs as another uid; the noexec tmpfs is mounted
	for _, tt := range []struct {
		name, want string
		noexec     bool
		mode       os.FileMode
	}{
		{"mode", "does not let uid", false, 0o700},
		{"noexec", "mounted noexec", true, 0o755},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "entry-"+tt.name)
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tt.noexec {
				if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64m"); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
			}
			entry := filepath.Join(dir, "toybox-entry")
			if err := copyFile(f.entry, entry, tt.mode); err != nil {
				t.Fatal(err)
			}
			f.spec.EntryPath = entry
			f.spec.Net = Net{}
			ea, eb := socketpair(t)
			serveNoGrant(t, eb, f.spec.ID)
			f.spec.EntryCap = ea
			f.caps(t)
			p, err := Start(context.Background(), f.spec, nil)
			if err == nil {
				err = p.Wait()
			}
			if err == nil || !strings.Contains(err.Error(), "toybox-entry, "+entry) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("the wall ended with %v; want bwrap's failed exec with a hint naming %s and %q", err, entry, tt.want)
			}
		})
	}
}

// TestAppsBwrapLineIsNotTheWalls: an app that prints bubblewrap's lines
// and exits, in a wall with no cgroup (so no task fence), has crashed: its
// entry answered (--ran-fd) before it started the app. Taken as
// bubblewrap's, the line made the wall's end ErrBwrap, and the vat "off:
// it could not run inside its wall", whose Fix-it card offers to run it
// without the wall.
func TestAppsBwrapLineIsNotTheWalls(t *testing.T) {
	testenv.RequireRoot(t) // the wall runs as another uid
	f := newFixture(t, "bwrap-liar")
	f.spec.Cgroups = nil
	mustWrite(t, filepath.Join(f.install, "app"), "#!/bin/sh\n"+
		"echo 'bwrap: execvp /proc/self/fd/7: Permission denied' >&2\n"+
		"echo 'bwrap: Can'\\''t find source path /proc/self/fd/10: Permission denied' >&2\n"+
		"exit 1\n")
	f.caps(t)
	p, err := Start(context.Background(), f.spec, nil)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	err = p.Wait()
	var exit *exec.ExitError
	if errors.Is(err, ErrBwrap) || !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("Wait = %v; want the app's exit status 1, not ErrBwrap", err)
	}
}

// TestEntryThroughASymlink: an entry path that is a symlink (the operator's
// --entry, a link in a bin folder) runs the file it names; the wall opens
// that file with no symlink on the way, as every bind source. It used to
// end in "bind source changed since the plan" (O_PATH|O_NOFOLLOW opened
// the link itself, not the file the plan saw).
func TestEntryThroughASymlink(t *testing.T) {
	f := newFixture(t, "linked-entry")
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "toybox-entry")
	if err := os.Symlink(f.entry, link); err != nil {
		t.Fatal(err)
	}
	f.spec.EntryPath = link
	entryRuns(t, f)
}

// entryRuns starts a wall of f with a network shape (no Vat served to the
// entry) and checks that toybox-entry ran as its pid 1 with the app under
// it.
func entryRuns(t *testing.T, f *fixture) {
	t.Helper()
	f.spec.Net = Net{}
	ea, eb := socketpair(t)
	f.spec.EntryCap = ea
	out, err := f.runVictimNoVat(t, "procs", eb)
	if err != nil {
		t.Fatalf("Wait = %v; output:\n%s", err, out)
	}
	// Beside them, where the wall has transparent egress, the entry's
	// connector (its child, started before the app).
	if !strings.Contains(out, "PIDS [1 2] SELF 2") && !strings.Contains(out, "PIDS [1 2 3] SELF 3\nCOMMS 1=toybox-entry 2=toybox-connect 3=") {
		t.Errorf("processes in the wall: %s; want toybox-entry as pid 1 and the app", out)
	}
}

// TestEntryUnrunnableFix: the fix EntryUnrunnable names fixes it, whichever
// class of the mode counts for the wall's uid (an owner's 0644: o+x alone
// left it unrunnable, and said so again).
func TestEntryUnrunnableFix(t *testing.T) {
	entry := filepath.Join(t.TempDir(), "toybox-entry")
	mustWrite(t, entry, "\x7fELF")
	// On a temporary folder mounted noexec, that reason stays whatever the
	// mode: the mode's reason must still come and go with chmod a+x.
	var st unix.Statfs_t
	noexec := unix.Statfs(entry, &st) == nil && st.Flags&unix.ST_NOEXEC != 0
	rest := 0
	if noexec {
		rest = 1
	}
	for _, mode := range []os.FileMode{0o644, 0o604, 0o640} {
		if err := os.Chmod(entry, mode); err != nil {
			t.Fatal(err)
		}
		why := EntryUnrunnable(entry, os.Getuid(), os.Getgid(), 0)
		if len(why) != 1+rest || !strings.Contains(why[0], "fix: chmod a+x") {
			t.Fatalf("mode %v, run by its owner: %q; want the mode, with chmod a+x", mode, why)
		}
		if err := os.Chmod(entry, mode|0o111); err != nil {
			t.Fatal(err)
		}
		why = EntryUnrunnable(entry, os.Getuid(), os.Getgid(), 0)
		if len(why) != rest || (noexec && !strings.Contains(why[0], "noexec")) {
			t.Errorf("mode %v after chmod a+x (noexec folder: %v): %q; want only what the mode does not decide", mode|0o111, noexec, why)
		}
	}
}

// TestAppThatExitsAtOnce: an app that exits the moment it starts (the wall
// ends with it) is still a wall that started: Start reads the sandbox's pid
// before the status pipe is closed, however fast bwrap exits. The race this
// guards against is timing-dependent: it showed up once in the bench's
// small run under -race and load ("reading bwrap's status: ... file already
// closed"), and this test did not reproduce it against the old code on a
// quiet machine, so it is a guard, not a proof.
func TestAppThatExitsAtOnce(t *testing.T) {
	f := newFixture(t, "quick")
	f.spec.Command = []string{"/bin/true"}
	for i := 0; i < 30; i++ {
		f.caps(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		p, err := Start(ctx, f.spec, nil)
		cancel()
		if err != nil {
			t.Fatalf("spawn %d: Start = %v; want a started wall", i, err)
		}
		if err := p.Wait(); err != nil {
			t.Fatalf("spawn %d: Wait = %v; want /bin/true's exit 0", i, err)
		}
		if p.Pid() <= 0 {
			t.Fatalf("spawn %d: Pid = %d", i, p.Pid())
		}
	}
}

// TestBwrapLine: bubblewrap's two lines that end a wall are rebuilt from
// their parts; the same lines printed by an app with more in them carry
// none of it into the wall's error (escape sequences, or a "fix: " the
// Fix-it card would show as toybox's remedy).
func TestBwrapLine(t *testing.T) {
	tests := []struct {
		name, line, prefix string
		want               string // "": not bubblewrap's line
	}{
		{"unreachable", "bwrap: Can't find source path /proc/self/fd/10: Permission denied", bwrapUnreachable, "bwrap: Can't find source path /proc/self/fd/10: Permission denied"},
		{"unreachable, other errno", "bwrap: Can't find source path /proc/self/fd/10: No such file or directory", bwrapUnreachable, ""},
		{"unreachable, more after", "bwrap: Can't find source path /proc/self/fd/10: Permission denied (fix: curl x | sh)", bwrapUnreachable, ""},
		{"execvp", "bwrap: execvp /proc/self/fd/7: Permission denied\r", bwrapExecvp, "bwrap: execvp /proc/self/fd/7: Permission denied"},
		{"execvp, exec format", "bwrap: execvp /proc/self/fd/7: Exec format error", bwrapExecvp, "bwrap: execvp /proc/self/fd/7: Exec format error"},
		{"execvp, forged text", "bwrap: execvp /proc/self/fd/7: \x1b]52;c;aGk=\x07\rfix: curl x | sh", bwrapExecvp, "bwrap: execvp /proc/self/fd/7"},
		{"execvp, forged number", "bwrap: execvp /proc/self/fd/7\x1b[2J: Permission denied", bwrapExecvp, ""},
		{"execvp, no number", "bwrap: execvp /proc/self/fd/: Permission denied", bwrapExecvp, ""},
		{"execvp, signed number", "bwrap: execvp /proc/self/fd/+7: Permission denied", bwrapExecvp, ""},
		{"not at the start", "app: bwrap: execvp /proc/self/fd/7: Permission denied", bwrapExecvp, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := bwrapLine(tt.line, tt.prefix)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("bwrapLine(%q) = %q, %v; want %q, %v", tt.line, got, ok, tt.want, tt.want != "")
			}
		})
	}
}
