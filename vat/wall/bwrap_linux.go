package wall

import (
	"fmt"
	"os"
	"os/exec"
)

// LookBwrap finds bubblewrap: path when it is set (toybox's own copy the
// operator named), else bwrap on $PATH. The error wraps ErrNoBwrap when
// there is none to run.
func LookBwrap(path string) (string, error) { return lookBwrap(path) }

func lookBwrap(path string) (string, error) {
	if path != "" {
		return namedBwrap(path)
	}
	p, err := exec.LookPath("bwrap")
	if err != nil {
		return "", fmt.Errorf("%w: no bwrap on PATH", ErrNoBwrap)
	}
	return p, nil
}

// lookBwrap is LookBwrap for a start. Where bubblewrap was found on $PATH
// is kept: every start but the first skips the search of $PATH (a stat
// per folder). A path the operator named (Spec.Bwrap) is looked at on
// every start.
func (h *Host) lookBwrap(path string) (string, error) {
	if path != "" {
		return namedBwrap(path)
	}
	h.bwrapPath.Lock()
	defer h.bwrapPath.Unlock()
	if h.bwrapPath.path != "" {
		return h.bwrapPath.path, nil
	}
	p, err := lookBwrap("")
	if err != nil {
		return "", err
	}
	h.bwrapPath.path = p
	return p, nil
}

// namedBwrap checks the bubblewrap the operator named.
func namedBwrap(path string) (string, error) {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: %s: %w", ErrNoBwrap, path, err)
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("%w: %s is not an executable file", ErrNoBwrap, path)
	}
	return path, nil
}

// forgetBwrap drops the path kept by lookBwrap: the next start looks again.
func (h *Host) forgetBwrap() {
	h.bwrapPath.Lock()
	h.bwrapPath.path = ""
	h.bwrapPath.Unlock()
}

// OwnBwrap is where doctor suggests toybox's own copy of bubblewrap, for
// a host whose AppArmor restricts user namespaces: a profile then names
// that copy alone, and /usr/bin/bwrap stays as restricted as before.
const OwnBwrap = "/usr/local/libexec/toybox/bwrap"

// AppArmorProfile is the profile that lets toybox's own bubblewrap at
// path make user namespaces (kernel.apparmor_restrict_unprivileged_userns
// = 1), written after Ubuntu's own bwrap-userns-restrict: bwrap itself may
// make namespaces and mounts; what it runs (the wall) moves to a second
// profile without capabilities or namespaces of its own.
func AppArmorProfile(path string) string {
	return fmt.Sprintf(`# /etc/apparmor.d/toybox-bwrap: toybox's own bubblewrap (%[1]s) may make user
# namespaces; every other bwrap on this computer stays restricted.
abi <abi/4.0>,
include <tunables/global>

profile toybox-bwrap %[1]s flags=(attach_disconnected,mediate_deleted) {
  allow capability,
  allow file rwlkm /{**,},
  allow network,
  allow unix,
  allow ptrace,
  allow signal,
  allow mqueue,
  allow io_uring,
  allow userns,
  allow mount,
  allow umount,
  allow pivot_root,
  allow dbus,
  allow px /** -> toybox-bwrap-wall,
}

profile toybox-bwrap-wall flags=(attach_disconnected,mediate_deleted) {
  allow file rwlkmix /{**,},
  allow network,
  allow unix,
  allow ptrace,
  allow signal,
  allow mqueue,
  allow io_uring,
  allow mount,
  allow umount,
  allow pivot_root,
  allow dbus,
  audit deny capability,
  audit deny userns,
}
`, path)
}

// appArmorFix is the fix doctor and a vat's reason give for AppArmor's
// restriction: a profile for toybox's own copy of bubblewrap, never
// `unconfined` on /usr/bin/bwrap (that would lift the restriction for
// every user of the computer).
func appArmorFix(bwrap string) string {
	own := ownOr(bwrap)
	return fmt.Sprintf("give toybox a bubblewrap of its own and an AppArmor profile for that path alone: "+
		"install -D -m 0755 -o root /usr/bin/bwrap %[1]s; write the profile `toybox doctor --bwrap %[1]s` prints to /etc/apparmor.d/toybox-bwrap; "+
		"apparmor_parser -r /etc/apparmor.d/toybox-bwrap; run toybox serve --bwrap %[1]s "+
		"(not flags=(unconfined) on /usr/bin/bwrap, which lifts the restriction for every user)", own)
}
