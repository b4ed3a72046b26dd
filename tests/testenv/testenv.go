// Package testenv decides whether a test that needs a real component
// (bubblewrap, user namespaces, docker, root) can run here. Where it cannot,
// the test skips — unless TOYBOX_REQUIRE_WALLS=1 (as in CI), where the same
// condition fails the test, so a suite can never pass by skipping.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Required reports whether TOYBOX_REQUIRE_WALLS asks for every sandbox and
// docker test to run.
func Required() bool { return os.Getenv("TOYBOX_REQUIRE_WALLS") == "1" }

// Unavailable skips t (or fails it when Required) saying why.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("TOYBOX_REQUIRE_WALLS=1 but this test cannot run: %s", why)
	}
	t.Skipf("skipping: %s (set TOYBOX_REQUIRE_WALLS=1 to make this a failure)", why)
}

// RequireBwrap needs a bubblewrap that can start a sandbox with a new user
// and network namespace.
func RequireBwrap(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("bwrap")
	if err != nil {
		Unavailable(t, "bubblewrap is not installed")
	}
	out, err := exec.Command(path, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true").CombinedOutput()
	if err != nil {
		Unavailable(t, "bubblewrap cannot start a sandbox here: "+string(out))
	}
	return path
}

// RequireRoot needs uid 0.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root")
	}
}

// EntryBuildFlags are the go build flags toybox-entry is built with (the
// Makefile's ENTRY_FLAGS): static, its C launcher and glibc linked in,
// without the cgo resolver and user lookups.
var EntryBuildFlags = []string{"-tags", "netgo,osusergo", "-ldflags=-extldflags=-static"}
