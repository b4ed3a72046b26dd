package wall

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"toybox/tests/testenv"
	"toybox/vat/wall/cgroup"
)

// BenchmarkSpawn compares a walled spawn (plan, fds, seccomp, bwrap,
// toybox-entry, app) of a static binary with a bare bwrap spawn of the same
// binary (new namespaces, one read-only bind, no entry). The target
// is walled <= 1.5x bare.
func BenchmarkSpawn(b *testing.B) {
	bwrap := testenv.RequireBwrap(b)
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		testenv.Unavailable(b, "busybox (static) is not installed")
	}
	f := newFixture(b, "spawn")
	if err := copyFile(busybox, filepath.Join(f.install, "busybox"), 0o755); err != nil {
		b.Fatal(err)
	}
	f.spec.Command = []string{"./busybox", "true"}

	// The first spawn builds the shared /etc view (once per host and
	// content); the figure is every spawn after it.
	f.caps(b)
	if p, err := Start(context.Background(), f.spec, nil); err != nil {
		b.Fatal(err)
	} else if err := p.Wait(); err != nil {
		b.Fatal(err)
	}
	f.peer.Close()
	// spawn starts spec's wall (with the fixture's capability) and waits
	// for it to end, b.N times.
	spawn := func(b *testing.B, spec Spec) {
		for b.Loop() {
			f.caps(b)
			spec.AppCap = f.spec.AppCap
			p, err := Start(context.Background(), spec, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Wait(); err != nil {
				b.Fatal(err)
			}
			f.peer.Close()
		}
	}
	b.Run("walled", func(b *testing.B) { spawn(b, f.spec) })
	b.Run("walled-limited", func(b *testing.B) {
		// As a supervisor starts it: in a cgroup of its own, with toybox
		// serve's default limits (made while bubblewrap starts, removed
		// when the wall ends).
		h := cgroup.Open(cgroup.Config{Name: "toybox-bench-" + strconv.Itoa(os.Getpid())})
		defer h.Close()
		if !h.Enabled() {
			b.Skip("no cgroups here")
		}
		spec := f.spec
		spec.Cgroups, spec.Limits = h, cgroup.Limits{MemoryBytes: 512 << 20, CPUs: 1}
		spawn(b, spec)
	})
	b.Run("walled-with-entry", func(b *testing.B) {
		// A vat with a network shape: toybox-entry starts its proxy (no
		// grant here) and runs the app as its child.
		spec := f.spec
		spec.Net = Net{}
		for b.Loop() {
			f.caps(b)
			spec.AppCap = f.spec.AppCap
			ea, eb := socketpair(b)
			serveNoGrant(b, eb, spec.ID)
			spec.EntryCap = ea
			p, err := Start(context.Background(), spec, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Wait(); err != nil {
				b.Fatal(err)
			}
			f.peer.Close()
		}
	})
	b.Run("bare-bwrap", func(b *testing.B) {
		args := []string{
			"--unshare-all", "--die-with-parent", "--new-session",
			"--ro-bind", f.install, f.install, "--proc", "/proc", "--dev", "/dev",
			filepath.Join(f.install, "busybox"), "true",
		}
		for b.Loop() {
			cmd := exec.Command(bwrap, args...)
			cmd.Env = []string{}
			if os.Geteuid() == 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: NobodyID, Gid: NobodyID, Groups: []uint32{}}}
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("bare bwrap: %v: %s", err, out)
			}
		}
	})
}
