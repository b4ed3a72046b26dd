package wall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"toybox/vat/procstatus"
	"toybox/vat/wall/seccomp"
)

// probeTimeout bounds the preflight sandbox.
const probeTimeout = 10 * time.Second

// Probe starts a real (minimal) sandbox the way Start would, with the
// bubblewrap at bwrap (empty: bwrap on $PATH): as the uid a wall runs as,
// with new user, pid and network namespaces. The error names the cause and
// the fix. No bubblewrap at all wraps ErrNoBwrap as well as ErrProbe.
func Probe(ctx context.Context, bwrap string) error {
	return probe(ctx, bwrap, probeTimeout)
}

// probe is Probe, the sandbox given timeout to finish in.
func probe(ctx context.Context, bwrap string, timeout time.Duration) error {
	path, err := lookBwrap(bwrap)
	if err != nil {
		return fmt.Errorf("%w: %w (fix: %s)", ErrProbe, err, installFix)
	}
	out, err := probeRun(ctx, path, timeout, probeCommand)
	if err == nil {
		return nil
	}
	cause, fix := diagnose(out, bwrap)
	return fmt.Errorf("%w: bubblewrap cannot start a sandbox: %s (bwrap said: %s) (fix: %s)", ErrProbe, cause, strings.TrimSpace(out), fix)
}

// installFix is the fix for a computer without bubblewrap: Debian's and
// Ubuntu's package is called bubblewrap, as are Fedora's and Arch's.
const installFix = "apt-get install bubblewrap (the package is called bubblewrap on Debian, Ubuntu, Fedora and Arch), or name toybox's own copy with --bwrap"

// probeCommand is what the probe runs inside its sandbox.
var probeCommand = []string{"/usr/bin/true"}

// probeRun runs command in the probe's sandbox, started by the bubblewrap
// at bwrap, for at most timeout, and returns what it printed.
func probeRun(ctx context.Context, bwrap string, timeout time.Duration, command []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{
		"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup",
		"--uid", strconv.Itoa(InsideUID), "--gid", strconv.Itoa(InsideGID),
		"--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
	}
	// As render does: the walls ask bubblewrap for --disable-userns (a
	// second user namespace) only where no seccomp filter refuses
	// namespaces, so the probe asks for it only there too.
	if seccomp.Supported() != nil {
		args = append(args, "--disable-userns")
	}
	// The system folders as a wall has them: bound where this host has
	// folders, linked where it has links (a /usr not merged keeps its own
	// /lib64, where /usr/bin/true's loader is).
	for _, op := range lookSystemOps() {
		if op.Kind == OpSymlink {
			args = append(args, "--symlink", op.Src, op.Dest)
		} else {
			args = append(args, "--ro-bind", op.Src, op.Dest)
		}
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--hostname", "toybox", "--as-pid-1", "--remount-ro", "/")
	// The walls' own seccomp filter, loaded as a wall loads it: a host
	// whose bubblewrap cannot load it (a kernel without seccomp filters, a
	// container's profile refusing seccomp(2)) starts no filtered wall.
	var extra []*os.File
	if seccomp.Supported() == nil {
		f, err := seccomp.File(seccomp.Options{})
		if err != nil {
			return "building the seccomp filter: " + err.Error(), err
		}
		defer f.Close()
		extra = append(extra, f)
		args = append(args, "--seccomp", "3")
	}
	args = append(args, "--")
	args = append(args, command...)
	cmd := exec.CommandContext(ctx, bwrap, args...)
	cmd.Args[0] = "bwrap"
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = extra
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: NobodyID, Gid: NobodyID, Groups: []uint32{}}
	}
	err := cmd.Run()
	if ctx.Err() != nil {
		return probeTimedOut + " after " + timeout.String(), ctx.Err()
	}
	return buf.String(), err
}

// probeTimedOut starts the probe's output when it ran out of time.
const probeTimedOut = "the probe timed out"

// diagnose turns a failed probe's output into a cause and a fix, reading
// the host's user-namespace switches. bwrap is the operator's path for
// toybox's own bubblewrap ("" if none), which an AppArmor profile names.
func diagnose(out, bwrap string) (cause, fix string) {
	if after, ok := strings.CutPrefix(out, probeTimedOut+" after "); ok {
		return "the sandbox probe did not finish in " + after + " (bubblewrap hung, or the computer is too loaded to start one)",
			"run toybox doctor; if the probe hangs there too, run the probe by hand (bwrap --unshare-all --ro-bind /usr /usr --proc /proc --dev /dev /usr/bin/true) and look at what it waits for"
	}
	if v, ok := readSysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); ok && v == "1" {
		return "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)", appArmorFix(bwrap)
	}
	if v, ok := readSysctl("/proc/sys/kernel/unprivileged_userns_clone"); ok && v == "0" {
		return "unprivileged user namespaces are switched off (kernel.unprivileged_userns_clone=0)",
			"sysctl -w kernel.unprivileged_userns_clone=1 (and persist it in /etc/sysctl.d/)"
	}
	if v, ok := readSysctl("/proc/sys/user/max_user_namespaces"); ok && v == "0" {
		return "user namespaces are switched off (user.max_user_namespaces=0)",
			"sysctl -w user.max_user_namespaces=15000 (and persist it in /etc/sysctl.d/)"
	}
	if strings.Contains(strings.ToLower(out), "seccomp") {
		return "bubblewrap could not load the walls' seccomp filter",
			"a kernel with seccomp filters (CONFIG_SECCOMP_FILTER); in a container, a seccomp profile that lets it install one (prctl PR_SET_SECCOMP, seccomp(2))"
	}
	if inContainer() && seccompMode() != "0" {
		return "this container's seccomp profile refuses the namespace calls bubblewrap needs",
			"run the container with a seccomp profile that allows unshare/clone with CLONE_NEWUSER (docker: --security-opt seccomp=unconfined, or a custom profile), or run toybox on the host"
	}
	if strings.Contains(out, "setting up uid map") || strings.Contains(out, "Permission denied") || strings.Contains(out, "Operation not permitted") {
		return "the kernel refused a new user namespace",
			"check the user-namespace sysctls, any LSM (AppArmor, SELinux) policy for bwrap, and the service's sandboxing (e.g. systemd RestrictNamespaces=)"
	}
	return "bubblewrap failed", "run the probe by hand: bwrap --unshare-all --ro-bind /usr /usr --proc /proc --dev /dev /usr/bin/true"
}

// ownOr is the path an AppArmor profile names: the operator's own
// bubblewrap, else where doctor suggests putting it.
func ownOr(own string) string {
	if own != "" && own != "/usr/bin/bwrap" {
		return own
	}
	return OwnBwrap
}

func readSysctl(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

func inContainer() bool {
	for _, f := range []string{"/.dockerenv", "/run/.containerenv"} {
		if _, err := os.Stat(f); err == nil {
			return true
		}
	}
	if b, err := os.ReadFile("/proc/1/cgroup"); err == nil {
		s := string(b)
		if strings.Contains(s, "docker") || strings.Contains(s, "kubepods") || strings.Contains(s, "containerd") || strings.Contains(s, "libpod") {
			return true
		}
	}
	return false
}

// seccompMode is this process's Seccomp line in /proc/self/status.
func seccompMode() string {
	st, err := procstatus.Self()
	if err != nil {
		return ""
	}
	return st["Seccomp"]
}

// sysctlCheck is doctor's line for one sysctl of value v (ok: the kernel
// has it) that stops sandboxes when it reads bad, unless one started
// anyway (sandboxOK: the probe passed).
func sysctlCheck(name, v string, ok bool, bad, fix string, sandboxOK bool) Check {
	switch {
	case !ok:
		return Check{Name: name, OK: true, Detail: "not present on this kernel"}
	case v == bad && sandboxOK:
		return Check{Name: name, OK: true, Detail: "= " + v + ", but a sandbox starts here all the same (the probe below passed)"}
	case v == bad:
		return Check{Name: name, Detail: "= " + v, Fix: fix}
	}
	return Check{Name: name, OK: true, Detail: "= " + v}
}

// bwrapOptions are every bubblewrap option a wall may be started with
// (TestBwrapOptionsListed keeps it whole and exact): a bubblewrap without
// one of them cannot start some wall, which doctor says before any vat
// fails. Beside them a wall uses --disable-userns where this architecture
// has no filter (bubblewrap 0.8): wallOptions. Every wall reads a seccomp
// program (an allow-all one where there is no filter): seccompGate.
var bwrapOptions = []string{
	"--args", "--as-pid-1", "--bind-fd", "--block-fd", "--cap-drop", "--chdir", "--clearenv",
	"--dev-bind", "--die-with-parent", "--dir", "--file", "--gid", "--hostname",
	"--json-status-fd", "--new-session", "--perms", "--proc", "--remount-ro", "--ro-bind",
	"--ro-bind-data", "--ro-bind-fd", "--seccomp", "--setenv", "--size", "--symlink", "--tmpfs", "--uid",
	"--unshare-cgroup", "--unshare-ipc", "--unshare-net", "--unshare-pid", "--unshare-user",
	"--unshare-uts",
}

// wallOptions are the bubblewrap options walls use: with a seccomp
// filter, or without one, --disable-userns, which refuses namespaces in
// its stead.
func wallOptions(filtered bool) []string {
	if filtered {
		return slices.Clone(bwrapOptions)
	}
	return append(slices.Clone(bwrapOptions), "--disable-userns")
}

// Doctor runs every check `toybox doctor` prints, with the bubblewrap at
// own (empty: bwrap on $PATH), as toybox serve --bwrap would.
func Doctor(ctx context.Context, own string) []Check {
	var checks []Check
	bwrap, err := lookBwrap(own)
	if err != nil {
		checks = append(checks, Check{Name: "bubblewrap installed", Detail: err.Error(), Fix: installFix})
	} else {
		v, _ := exec.CommandContext(ctx, bwrap, "--version").Output()
		checks = append(checks, Check{Name: "bubblewrap installed", OK: true, Detail: bwrap + " " + strings.TrimSpace(string(v))})
		out, _ := exec.CommandContext(ctx, bwrap, "--help").CombinedOutput()
		missing := []string{}
		opts := wallOptions(seccomp.Supported() == nil)
		for _, opt := range opts {
			if !strings.Contains(string(out), opt+" ") {
				missing = append(missing, opt)
			}
		}
		if len(missing) > 0 {
			checks = append(checks, Check{Name: "bubblewrap options", Detail: "missing " + strings.Join(missing, ", "), Fix: "install bubblewrap 0.10 or later (Debian 12: 0.8.0-2+deb12u1 carries --bind-fd)"})
		} else {
			checks = append(checks, Check{Name: "bubblewrap options", OK: true, Detail: fmt.Sprintf("all %d options walls use are present", len(opts))})
		}
	}
	// The probe is what decides: a sysctl that would stop sandboxes is
	// only a failure when one does not start (bwrap may have an AppArmor
	// profile that allows user namespaces, say).
	probeErr := Probe(ctx, own)
	for _, s := range []struct{ name, path, bad, fix string }{
		{"kernel.unprivileged_userns_clone", "/proc/sys/kernel/unprivileged_userns_clone", "0", "sysctl -w kernel.unprivileged_userns_clone=1 (and persist it in /etc/sysctl.d/)"},
		{"user.max_user_namespaces", "/proc/sys/user/max_user_namespaces", "0", "sysctl -w user.max_user_namespaces=15000 (and persist it in /etc/sysctl.d/)"},
		{"kernel.apparmor_restrict_unprivileged_userns", "/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1", appArmorFix(own)},
	} {
		v, ok := readSysctl(s.path)
		c := sysctlCheck(s.name, v, ok, s.bad, s.fix, probeErr == nil)
		if !c.OK && strings.HasPrefix(s.name, "kernel.apparmor") {
			c.Text = AppArmorProfile(ownOr(own))
		}
		checks = append(checks, c)
	}
	if inContainer() {
		checks = append(checks, Check{Name: "container", OK: true, Detail: "running in a container (seccomp mode " + seccompMode() + "); its profile must allow user namespaces"})
	}
	if err := seccomp.Supported(); err != nil {
		fix := "build toybox with cgo and libseccomp (make build); until then its vats stay off"
		if !seccomp.ArchHasTable() {
			fix = "this architecture has no filter table: vats here run walled-noseccomp (no seccomp filter)"
		}
		checks = append(checks, Check{Name: "seccomp filter", Detail: err.Error(), Fix: fix})
	} else if _, err := seccomp.BPF(seccomp.Options{}); err != nil {
		checks = append(checks, Check{Name: "seccomp filter", Detail: err.Error(), Fix: "install libseccomp (apt-get install libseccomp2) and rebuild with cgo"})
	} else {
		checks = append(checks, Check{Name: "seccomp filter", OK: true, Detail: "compiled"})
	}
	if err := probeErr; errors.Is(err, ErrNoBwrap) {
		checks = append(checks, Check{Name: "bubblewrap sandbox", Detail: "no sandbox without bubblewrap: with walls on, every vat stays off (off: bubblewrap is not installed on this computer)", Fix: installFix})
	} else if err != nil {
		checks = append(checks, Check{Name: "bubblewrap sandbox", Detail: err.Error(), Fix: "see the fix in the detail"})
	} else {
		who := "this user"
		if os.Geteuid() == 0 {
			who = "uid " + strconv.Itoa(NobodyID)
		}
		what := "a sandbox with new user, pid and network namespaces"
		if seccomp.Supported() == nil {
			what += " and the walls' seccomp filter"
		}
		checks = append(checks, Check{Name: "bubblewrap sandbox", OK: true, Detail: what + " started as " + who})
	}
	return checks
}
