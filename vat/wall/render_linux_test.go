package wall

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNestedUserNamespacesRefusedOnce: a wall refuses its app user
// namespaces of its own with one mechanism: the seccomp filter where there
// is one (TestAttackSyscalls tries unshare and clone with CLONE_NEWUSER in
// a real wall), bubblewrap's --disable-userns where there is none
// (walled-noseccomp, which this architecture never runs, so it is checked
// here on the options).
func TestNestedUserNamespacesRefusedOnce(t *testing.T) {
	for _, filtered := range []bool{true, false} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(self)
		if err != nil {
			t.Fatal(err)
		}
		entry := Op{Kind: OpExecFD, Src: self, Why: "toybox-entry (here the test binary)", id: idOf(fi)}
		plan := &Plan{ID: "userns", NoNet: true, Seccomp: filtered, Chdir: "/", Command: []string{"/bin/true"}, Ops: []Op{entry}}
		var fds fdTable
		opts, _, err := plan.render(&fds, Spec{AppCap: w, Host: NewHost()}, NewHost().newViewHold())
		fds.closeAll()
		_ = r.Close()
		_ = w.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(opts, "--disable-userns"); got == filtered {
			t.Errorf("seccomp %v: --disable-userns in bwrap's options = %v; want %v", filtered, got, !filtered)
		}
	}
}

// TestBwrapOptionsListed: every option a wall's bubblewrap is given is in
// bwrapOptions, the list doctor checks the installed bubblewrap against.
func TestBwrapOptionsListed(t *testing.T) {
	f := newFixture(t, "options")
	notes := filepath.Join(t.TempDir(), "notes.txt")
	mustWrite(t, notes, "owner's notes\n")
	if err := os.Chmod(filepath.Dir(notes), 0o755); err != nil {
		t.Fatal(err)
	}
	f.spec.Files.Read = []string{notes}
	f.spec.Net = Net{Forwards: []Forward{{Port: 5432, Host: "127.0.0.1", TargetPort: 5432}}}
	f.caps(t)
	defer f.peer.Close()
	ea, eb := socketpair(t)
	defer ea.Close()
	defer eb.Close()
	f.spec.EntryCap = ea
	plan, err := BuildPlan(f.spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.spec.Host.ensureEtcView(plan); err != nil {
		t.Fatal(err)
	}
	// Start's own options, then render's with the filter and without, each
	// with /dev as a prepared folder and as a tmpfs: every option a wall
	// of that kind may use is listed, and nothing else is.
	for _, filtered := range []bool{true, false} {
		used := []string{"--json-status-fd", "--block-fd", "--args"}
		plan.Seccomp = filtered
		for _, tmpDev := range []bool{false, true} {
			f.spec.Host.noDevDir = tmpDev
			var fds fdTable
			views := f.spec.Host.newViewHold()
			opts, _, err := plan.render(&fds, f.spec, views)
			fds.closeAll()
			_ = views.release()
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range opts {
				if strings.HasPrefix(o, "--") && !slices.Contains(used, o) {
					used = append(used, o)
				}
			}
		}
		listed := wallOptions(filtered)
		for _, o := range used {
			if !slices.Contains(listed, o) {
				t.Errorf("seccomp %v: a wall uses %s, which doctor does not check bubblewrap for (bwrapOptions)", filtered, o)
			}
		}
		for _, o := range listed {
			if !slices.Contains(used, o) {
				t.Errorf("seccomp %v: doctor checks bubblewrap for %s, which no wall of this kind uses", filtered, o)
			}
		}
	}
}

// TestDataFilesAreSealed: what bubblewrap copies into a wall (--file) and
// reads its options from (--args) cannot change after the plan wrote it,
// by this process or by anyone handed a copy of the descriptor.
func TestDataFilesAreSealed(t *testing.T) {
	data, err := dataFile("etc/passwd", []byte("vat:x:1000:1000::/home/vat:/bin/sh\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	args, err := argsFile([]string{"--unshare-all", "--die-with-parent"})
	if err != nil {
		t.Fatal(err)
	}
	defer args.Close()
	for _, f := range []*os.File{data, args} {
		before, err := io.ReadAll(f)
		if err != nil || len(before) == 0 {
			t.Fatalf("%s: read %q, %v; want its contents from the start", f.Name(), before, err)
		}
		if _, err := f.WriteAt([]byte("root::0:0::/:/bin/sh\n"), 0); err == nil {
			t.Errorf("%s: a write succeeded; want it sealed", f.Name())
		}
		if err := f.Truncate(0); err == nil {
			t.Errorf("%s: truncating succeeded; want it sealed", f.Name())
		}
		after, _ := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
		if string(after) != string(before) {
			t.Errorf("%s now holds %q; want %q", f.Name(), after, before)
		}
	}
}
