//go:build systemdcontainer

package systemd

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"toybox/tests/dockertest"
	"toybox/tests/testenv"
)

// The Debian root the container boots: debootstrap --variant=minbase with
// what the units and the test need.
const debianSuite = "bookworm"

var debianPackages = []string{
	"systemd", "systemd-sysv", "dbus", "bubblewrap", "libseccomp2",
	"curl", "ca-certificates", "iproute2", "passwd", "util-linux", "make",
}

// rootfsCache keeps debootstrap roots between runs (one per package set).
const rootfsCache = "/var/tmp/toybox-systemd"

// debianMirror is the mirror debootstrap uses: $TOYBOX_DEBIAN_MIRROR, else
// the first Debian URI apt is configured with, else deb.debian.org.
func debianMirror() string {
	if m := os.Getenv("TOYBOX_DEBIAN_MIRROR"); m != "" {
		return m
	}
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	files = append(files, "/etc/apt/sources.list")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(string(data)))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			for _, fl := range fields {
				fl = strings.TrimPrefix(fl, "URIs:")
				if (strings.HasPrefix(fl, "http://") || strings.HasPrefix(fl, "https://")) && strings.HasSuffix(strings.TrimSuffix(fl, "/"), "/debian") {
					return strings.TrimSuffix(fl, "/")
				}
			}
		}
	}
	return "http://deb.debian.org/debian"
}

// docker runs the docker CLI against the test daemon.
func docker(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+dockertest.Host)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func mustDocker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := docker(t, args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// systemdImage returns an image whose /sbin/init is systemd: imported from
// a debootstrap root (built once and cached), since nothing can be pulled.
func systemdImage(t testing.TB) string {
	t.Helper()
	mirror := debianMirror()
	sum := sha256.Sum256([]byte(debianSuite + "\n" + mirror + "\n" + strings.Join(debianPackages, ",")))
	tag := hex.EncodeToString(sum[:6])
	ref := "toybox-test/systemd-debian:" + tag
	if _, err := docker(t, "image", "inspect", ref); err == nil {
		return ref
	}
	if err := os.MkdirAll(rootfsCache, 0o755); err != nil {
		t.Fatal(err)
	}
	// One builder at a time (another test process may be making the same
	// root).
	lock, err := os.OpenFile(filepath.Join(rootfsCache, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatalf("locking %s: %v", lock.Name(), err)
	}
	if _, err := docker(t, "image", "inspect", ref); err == nil {
		return ref
	}
	root := filepath.Join(rootfsCache, "rootfs-"+tag)
	if _, err := os.Stat(filepath.Join(root, "sbin/init")); err != nil {
		debootstrap, err := exec.LookPath("debootstrap")
		if err != nil {
			testenv.Unavailable(t, "debootstrap is not installed (apt-get install debootstrap)")
		}
		tmp := root + ".tmp"
		if err := os.RemoveAll(tmp); err != nil {
			t.Fatal(err)
		}
		t.Logf("debootstrap %s from %s into %s (once; a few minutes)", debianSuite, mirror, root)
		cmd := exec.Command(debootstrap, "--variant=minbase", "--include="+strings.Join(debianPackages, ","), debianSuite, tmp, mirror)
		if out, err := cmd.CombinedOutput(); err != nil {
			testenv.Unavailable(t, fmt.Sprintf("debootstrap %s from %s failed: %v\n%s", debianSuite, mirror, err, tail(string(out), 20)))
		}
		if err := os.Rename(tmp, root); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", "-c", `tar -C "$1" -c . | docker import - "$2"`, "sh", root, ref)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+dockertest.Host)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker import %s: %v\n%s", root, err, out)
	}
	return ref
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// capNames are the capabilities by number, for --cap-drop.
var capNames = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
	"LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
	"WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

// capFlags grants the container every capability this process may hand
// on. --privileged asks for all of them, which fails ("unable to apply
// caps") where our own bounding set lacks one.
func capFlags(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var bnd uint64
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			bnd, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	flags := []string{"--cap-add", "ALL"}
	for i, name := range capNames {
		if bnd&(1<<i) == 0 {
			flags = append(flags, "--cap-drop", name)
		}
	}
	return flags
}

// container is a booted systemd container.
type container struct{ name string }

// exec runs a command in the container.
func (c container) exec(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return docker(t, append([]string{"exec", c.name}, args...)...)
}

func (c container) mustExec(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.exec(t, args...)
	if err != nil {
		t.Fatalf("in the container: %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// show returns systemctl show -p prop for unit.
func (c container) show(t testing.TB, unit, prop string) string {
	t.Helper()
	return strings.TrimPrefix(c.mustExec(t, "systemctl", "show", "-p", prop, unit), prop+"=")
}

// bootSystemd starts a container whose PID 1 is systemd and waits until it
// is up.
func bootSystemd(t *testing.T) container {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.Unavailable(t, "the docker CLI is not installed")
	}
	dockertest.Require(t)
	image := systemdImage(t)
	rnd := make([]byte, 4)
	_, _ = rand.Read(rnd)
	c := container{name: "toybox-systemd-" + hex.EncodeToString(rnd)}
	args := []string{"run", "-d", "--name", c.name}
	args = append(args, capFlags(t)...)
	args = append(args,
		"--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
		"--network", "none",
		"--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
		"-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--cgroupns=host",
		"-e", "container=docker",
		image, "/sbin/init")
	mustDocker(t, args...)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.exec(t, "journalctl", "-b", "--no-pager", "-n", "300")
			t.Logf("container journal:\n%s", out)
		}
		_, _ = docker(t, "rm", "-f", c.name)
	})
	// Until PID 1 has its bus up, systemctl cannot even ask; then --wait
	// waits for the boot to finish.
	var state string
	testenv.WaitFor(t, 90*time.Second, func() error {
		state, _ = c.exec(t, "timeout", "90", "systemctl", "is-system-running", "--wait")
		if state == "running" || state == "degraded" {
			return nil
		}
		return fmt.Errorf("systemd in the container did not come up: %q", state)
	})
	if state == "degraded" {
		failed, _ := c.exec(t, "systemctl", "--failed", "--no-legend", "--plain")
		t.Logf("the container booted degraded; failed units (not ours):\n%s", failed)
	}
	if pid1, _ := c.exec(t, "cat", "/proc/1/comm"); pid1 != "systemd" {
		t.Fatalf("PID 1 in the container is %q; want systemd", pid1)
	}
	return c
}

// TestUnderSystemd installs the units with make install into a root, copies
// it into a container whose PID 1 is systemd, and runs them for real: socket
// activation, READY=1 (Type=notify), users, modes, the hardening as the
// kernel sees it, the quickstart round, and a restart.
func TestUnderSystemd(t *testing.T) {
	c := bootSystemd(t)
	bin := binaries(t)
	// The checkout's install inputs go in as they are, and `make install`
	// runs in the container for real: no DESTDIR, so it creates the user and
	// reloads systemd itself.
	src := t.TempDir()
	for _, f := range []string{"Makefile", "systemd", "docs/systemd.md"} {
		dst := filepath.Join(src, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", filepath.Join(repoRoot(t), f), dst).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v\n%s", f, err, out)
		}
	}
	if out, err := exec.Command("cp", "-a", bin, filepath.Join(src, "bin")).CombinedOutput(); err != nil {
		t.Fatalf("cp bin: %v\n%s", err, out)
	}
	mustDocker(t, "cp", src, c.name+":/root/toybox")
	if out, _ := c.exec(t, "getent", "passwd", "toybox"); out != "" {
		t.Fatalf("the image already has a toybox user: %q", out)
	}
	installOut := c.mustExec(t, "make", "-C", "/root/toybox", "install")
	t.Logf("make install in the container:\n%s", installOut)
	if !strings.Contains(installOut, "systemd is PID 1: systemctl daemon-reload") {
		t.Errorf("make install did not report reloading systemd:\n%s", installOut)
	}
	if out, _ := c.exec(t, "getent", "passwd", "toybox"); !strings.HasPrefix(out, "toybox:") || !strings.HasSuffix(out, ":/var/lib/toybox:/usr/sbin/nologin") {
		t.Fatalf("make install did not create the toybox user as wanted: %q", out)
	}
	if out, _ := c.exec(t, "getent", "group", "toybox"); !strings.HasPrefix(out, "toybox:") {
		t.Fatalf("make install did not create the toybox group: %q", out)
	}
	// Once more: nothing to create, nothing breaks.
	c.mustExec(t, "make", "-C", "/root/toybox", "install")
	if out, err := c.exec(t, "systemd-analyze", "verify", "--man=no", "switchboard.socket", "switchboard.service", "toybox.socket", "toybox-admin.socket", "toybox.service"); err != nil || out != "" {
		t.Errorf("systemd-analyze verify inside the container: %v\n%s", err, out)
	}
	probe := buildProbeVat(t)
	probePath := filepath.Join(t.TempDir(), "probevat")
	if err := os.WriteFile(probePath, probe, 0o755); err != nil {
		t.Fatal(err)
	}
	mustDocker(t, "cp", probePath, c.name+":/root/probevat")
	farNetwork(t, c)
	c.mustExec(t, "systemctl", "enable", "--now", "switchboard.socket", "toybox.socket", "toybox-admin.socket")

	t.Run("sockets listen, services wait", func(t *testing.T) {
		for _, u := range []string{"switchboard.socket", "toybox.socket", "toybox-admin.socket"} {
			if got := c.show(t, u, "ActiveState"); got != "active" {
				t.Errorf("%s ActiveState = %q; want active", u, got)
			}
		}
		for _, u := range []string{"switchboard.service", "toybox.service"} {
			if got := c.show(t, u, "ActiveState"); got != "inactive" {
				t.Errorf("%s ActiveState = %q before any connection; want inactive (socket activation)", u, got)
			}
		}
	})

	t.Run("socket owners and modes", func(t *testing.T) {
		tests := []struct{ path, want string }{
			{"/run/toybox-switchboard/public.sock", "root:toybox 660"},
			{"/run/toybox/admin.sock", "root:root 600"},
		}
		for _, tt := range tests {
			if got := c.mustExec(t, "stat", "-c", "%U:%G %a", tt.path); got != tt.want {
				t.Errorf("stat %s = %q; want %q", tt.path, got, tt.want)
			}
		}
	})

	t.Run("toybox starts on its admin socket and is ready", func(t *testing.T) {
		out, err := c.exec(t, "curl", "-sS", "--max-time", "60", "-o", "/dev/null", "-w", "%{http_code}",
			"--unix-socket", "/run/toybox/admin.sock", "http://toybox/")
		if err != nil || out != "200" {
			t.Fatalf("GET / on the admin socket: %v %q; want 200", err, out)
		}
		// Type=notify: active/running means systemd received READY=1
		// from the main process.
		if got := c.show(t, "toybox.service", "ActiveState") + "/" + c.show(t, "toybox.service", "SubState"); got != "active/running" {
			t.Errorf("toybox.service = %s; want active/running", got)
		}
	})

	t.Run("switchboard starts and is ready", func(t *testing.T) {
		if out, err := c.exec(t, "timeout", "60", "systemctl", "start", "switchboard.service"); err != nil {
			t.Fatalf("systemctl start switchboard.service: %v\n%s", err, out)
		}
		if got := c.show(t, "switchboard.service", "ActiveState") + "/" + c.show(t, "switchboard.service", "SubState"); got != "active/running" {
			t.Errorf("switchboard.service = %s; want active/running", got)
		}
		// systemctl reload: its ExecReload runs here (no procps in the
		// image) and the switchboard takes the SIGHUP and stays up.
		if out, err := c.exec(t, "timeout", "30", "systemctl", "reload", "switchboard.service"); err != nil {
			t.Errorf("systemctl reload switchboard.service: %v\n%s", err, out)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			log := c.mustExec(t, "journalctl", "-u", "switchboard.service", "--no-pager", "-o", "cat")
			if strings.Contains(log, "SIGHUP: no --config file to read again") {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the switchboard's journal has no SIGHUP record after a reload:\n%s", tail(log, 20))
				break
			}
		}
		if got := c.show(t, "switchboard.service", "ActiveState"); got != "active" {
			t.Errorf("switchboard.service after a reload = %s; want active", got)
		}
		if got := c.mustExec(t, "stat", "-c", "%a %F", "/run/toybox-switchboard-local"); got != "700 directory" {
			t.Errorf("the local socket's runtime directory = %q; want 700 directory", got)
		}
		if got := c.mustExec(t, "stat", "-c", "%F", "/run/toybox-switchboard-local/local.sock"); got != "socket" {
			t.Errorf("/run/toybox-switchboard-local/local.sock is %q; want the socket the switchboard bound", got)
		}
		// toybox (user toybox) must not be able to reach the local socket.
		// (The directory is 0700: it cannot even look the socket up.)
		out, err := c.exec(t, "setpriv", "--reuid=toybox", "--regid=toybox", "--init-groups",
			"stat", "-c", "%F", "/run/toybox-switchboard-local/local.sock")
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("the toybox user reached the local socket: %v %q; want Permission denied", err, out)
		}
		// ...while it can reach the public one, through its group.
		if out, err := c.exec(t, "setpriv", "--reuid=toybox", "--regid=toybox", "--init-groups",
			"test", "-w", "/run/toybox-switchboard/public.sock"); err != nil {
			t.Errorf("the toybox user cannot write the public socket: %v %q", err, out)
		}
		// ...and no other user can.
		if out, err := c.exec(t, "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
			"test", "-w", "/run/toybox-switchboard/public.sock"); err == nil {
			t.Errorf("nobody can write the public socket: %q", out)
		}
	})

	t.Run("what the kernel sees of the services", func(t *testing.T) {
		toyboxUID := strings.Split(c.mustExec(t, "getent", "passwd", "toybox"), ":")[2]
		for _, tt := range []struct {
			unit    string
			wantUID string // "" = any uid but 0
		}{
			{"toybox.service", toyboxUID},
			{"switchboard.service", ""},
		} {
			t.Run(tt.unit, func(t *testing.T) {
				pid := c.show(t, tt.unit, "MainPID")
				if pid == "0" || pid == "" {
					t.Fatalf("%s has no main process", tt.unit)
				}
				status := c.mustExec(t, "cat", "/proc/"+pid+"/status")
				fields := map[string]string{}
				for _, l := range strings.Split(status, "\n") {
					k, v, _ := strings.Cut(l, ":")
					fields[k] = strings.TrimSpace(v)
				}
				uid := strings.Fields(fields["Uid"])
				if len(uid) == 0 || uid[0] == "0" || (tt.wantUID != "" && uid[0] != tt.wantUID) {
					t.Errorf("Uid = %q; want %q (not root)", fields["Uid"], tt.wantUID)
				}
				for k, want := range map[string]string{
					"NoNewPrivs": "1", "Seccomp": "2",
					"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapBnd": "0000000000000000",
				} {
					if fields[k] != want {
						t.Errorf("%s = %q; want %q", k, fields[k], want)
					}
				}
			})
		}
		pid := c.show(t, "toybox.service", "MainPID")
		links := c.mustExec(t, "nsenter", "-t", pid, "-n", "ip", "-o", "link")
		for _, l := range strings.Split(links, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[1] != "lo:" {
				t.Errorf("toybox.service sees network interface %q; want loopback only (PrivateNetwork=yes)", f[1])
			}
		}
	})

	reach := func(t *testing.T, path string) (string, string) {
		t.Helper()
		return reachRaw(c, t, path)
	}
	waitHello := func(t *testing.T) {
		t.Helper()
		testenv.WaitFor(t, 60*time.Second, func() error {
			code, body := reach(t, "/probe/")
			if code == "200" && strings.Contains(body, "probevat: hello") {
				return nil
			}
			return fmt.Errorf("GET /probe/ = %s %q; want 200 probevat: hello", code, body)
		})
	}

	t.Run("quickstart under systemd", func(t *testing.T) {
		install := func(t *testing.T, id, grant string) {
			t.Helper()
			out := c.mustExec(t, "curl", "-sS", "--max-time", "60", "-w", "\n%{http_code}", "-X", "PUT",
				"--unix-socket", "/run/toybox/admin.sock", "--data-binary", "@/root/probevat",
				"http://toybox/"+id+"?egress="+url.QueryEscape(grant))
			if !strings.HasSuffix(out, "\n201") {
				t.Fatalf("PUT /%s?egress=%s: %s; want 201", id, grant, out)
			}
		}
		install(t, "probe", fmt.Sprintf(`{"host":%q,"port":%d}`, farAddr, farPort))
		install(t, "loopy", `{"host":"127.0.0.1","port":7}`)
		waitHello(t)
		status := c.mustExec(t, "curl", "-sS", "--max-time", "30", "--unix-socket", "/run/toybox/admin.sock", "http://toybox/probe")
		if !strings.Contains(status, `"tier": "walled"`) && !strings.Contains(status, `"tier":"walled"`) {
			t.Errorf("GET /probe on the admin socket = %s; want tier walled (bubblewrap under toybox.service)", status)
		}
		// Its limits, as a supervisor that is not root gets them under
		// Delegate=yes: each in force, or named as missing with why.
		var st struct {
			Limits    map[string]any    `json:"limits"`
			Unlimited map[string]string `json:"unlimited"`
		}
		if err := json.Unmarshal([]byte(status), &st); err != nil {
			t.Fatalf("GET /probe: %v\n%s", err, status)
		}
		t.Logf("limits under systemd: in force %v; without %v", st.Limits, st.Unlimited)
		for _, k := range []string{"memory", "cpu", "disk"} {
			if st.Unlimited[k] == "" && st.Limits[k+"_mib"] == nil && st.Limits[k+"s"] == nil {
				t.Errorf("the status neither holds the %s limit nor says why not: %s", k, status)
			}
		}
		if !strings.Contains(st.Unlimited["disk"], "needs root") {
			t.Errorf("a supervisor that is not root claims a disk limit: %s", status)
		}
		if st.Limits["memory_mib"] != nil {
			// cgroup v2 here: the wall's own group, beside toybox's.
			if code, body := reach(t, "/probe/?read=/proc/self/cgroup"); code != "200" || !strings.Contains(body, "/probe") {
				t.Errorf("inside the wall, /proc/self/cgroup: %s %q; want the wall's own group", code, body)
			}
		}
		if code, body := reach(t, "/probe/?read=/proc/self/oom_score_adj"); code != "200" || strings.TrimSpace(body) != "read: 500" {
			t.Errorf("inside the wall, oom_score_adj: %s %q; want 500", code, body)
		}
		// The wall's /etc and /dev, made by a supervisor running with the
		// unit's UMask=0077, are readable by the vat's uid.
		for _, f := range []struct{ path, want string }{
			{"/etc/hostname", "read: toybox"},
			{"/etc/hosts", "read: 127.0.0.1\tlocalhost"},
			{"/etc/group", "read: root:x:0:"},
			{"/etc/ld.so.cache", "read: "},
			{"/dev/null", "read: "},
		} {
			code, body := reach(t, "/probe/?read="+url.QueryEscape(f.path))
			if code != "200" || !strings.HasPrefix(body, f.want) {
				t.Errorf("inside the wall, %s: %s %q; want %q", f.path, code, body, f.want)
			}
		}
		// The wall's task limit, from a supervisor that is not root: the
		// default 1024, of which the app may use all but the entry's 32.
		if code, body := reach(t, "/probe/?read=/proc/self/limits&line=Max+processes"); code != "200" || !regexp.MustCompile(`^read: Max processes +992 +1024 `).MatchString(body) {
			t.Errorf("inside the wall, the app's task limit: %s %q; want soft 992, hard 1024", code, body)
		}
		if code, body := reach(t, "/probe/?read=/etc/passwd"); code != "200" || !strings.Contains(body, "read: root:x:0:0:") {
			t.Errorf("inside the wall, /etc/passwd: %s %q", code, body)
		}
		if code, body := reach(t, "/probe/?read=/etc/shadow"); !strings.Contains(body, "unreadable:") {
			t.Errorf("inside the wall, /etc/shadow: %s %q; want unreadable", code, body)
		}
		far := fmt.Sprintf("%s:%d", farAddr, farPort)
		tests := []struct {
			vat, target, wantCode, want string
		}{
			// Granted, public, reachable: through the wall's proxy, the
			// supervisor's constrained handle and the switchboard's
			// public socket to the far namespace.
			{"probe", far, "200", "got: pong ping"},
			{"probe", fmt.Sprintf("%s:%d", farAddr, farPort+1), "502", fmt.Sprintf("egress refused: port %d not granted", farPort+1)},
			// The units give toybox the public handle: loopback is never
			// reachable through it, even when granted.
			{"loopy", "127.0.0.1:7", "502", "egress refused: 127.0.0.1 is a loopback address"},
		}
		for _, tt := range tests {
			path := "/" + tt.vat + "/?connect=" + url.QueryEscape(tt.target)
			var code, body string
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
				code, body = reach(t, path)
				if code != "503" || time.Now().After(deadline) { // 503: the vat is still starting
					break
				}
			}
			t.Logf("GET %s = %s %s", path, code, strings.TrimSpace(body))
			if code != tt.wantCode || !strings.Contains(body, tt.want) {
				t.Errorf("GET %s = %s %q; want %s containing %q", path, code, body, tt.wantCode, tt.want)
			}
		}
		// Both decisions were the switchboard's, logged with the vat's
		// label (journald may lag a little).
		decided := func(log, vat, allow string) bool {
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(l, `"egress decision"`) && strings.Contains(l, `"op":"connect"`) &&
					strings.Contains(l, `"allow":`+allow) && strings.Contains(l, `\"vat\":\"`+vat+`\"`) {
					return true
				}
			}
			return false
		}
		var log string
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(300 * time.Millisecond) {
			log = c.mustExec(t, "journalctl", "-u", "switchboard.service", "--no-pager", "-o", "cat")
			if decided(log, "probe", "true") && decided(log, "loopy", "false") || time.Now().After(deadline) {
				break
			}
		}
		if !decided(log, "probe", "true") {
			t.Errorf("the switchboard's journal has no allowed connect for vat probe:\n%s", tail(log, 30))
		}
		if !decided(log, "loopy", "false") {
			t.Errorf("the switchboard's journal has no refused connect for vat loopy:\n%s", tail(log, 30))
		}
	})

	t.Run("restart keeps the vats", func(t *testing.T) {
		c.mustExec(t, "systemctl", "restart", "toybox.service")
		waitHello(t)
		for _, tt := range []struct{ path, want string }{
			{"/var/lib/toybox", "toybox 711"},
			{"/var/lib/toybox/vats", "toybox 700"},
		} {
			if got := c.mustExec(t, "stat", "-c", "%U %a", tt.path); got != tt.want {
				t.Errorf("stat %s = %q; want %q", tt.path, got, tt.want)
			}
		}
	})

	t.Run("nothing failed", func(t *testing.T) {
		if out := c.mustExec(t, "systemctl", "--failed", "--no-legend", "--plain"); out != "" {
			t.Errorf("failed units:\n%s", out)
		}
		for _, u := range []string{"toybox.service", "switchboard.service"} {
			if got := c.show(t, u, "NRestarts"); got != "0" {
				t.Errorf("%s NRestarts = %s; want 0", u, got)
			}
		}
	})

	t.Run("make uninstall stops everything and keeps the state", func(t *testing.T) {
		out := c.mustExec(t, "make", "-C", "/root/toybox", "uninstall")
		t.Logf("make uninstall in the container:\n%s", out)
		for _, u := range []string{"switchboard.socket", "switchboard.service", "toybox.socket", "toybox-admin.socket", "toybox.service"} {
			if got := c.show(t, u, "ActiveState"); got != "inactive" {
				t.Errorf("%s ActiveState after uninstall = %q; want inactive", u, got)
			}
			if got := c.show(t, u, "LoadState"); got != "not-found" {
				t.Errorf("%s LoadState after uninstall = %q; want not-found", u, got)
			}
		}
		for _, p := range []string{
			"/usr/local/bin/toybox", "/usr/local/bin/switchboard", "/usr/local/bin/toybox-entry",
			"/etc/systemd/system/toybox.service", "/etc/sysusers.d/toybox.conf", "/run/toybox/admin.sock",
		} {
			if _, err := c.exec(t, "test", "!", "-e", p); err != nil {
				t.Errorf("%s is still there after make uninstall", p)
			}
		}
		if _, err := c.exec(t, "test", "-d", "/var/lib/toybox/data"); err != nil {
			t.Errorf("make uninstall removed the state /var/lib/toybox")
		}
		if out, _ := c.exec(t, "getent", "passwd", "toybox"); !strings.HasPrefix(out, "toybox:") {
			t.Errorf("make uninstall removed the toybox user that owns the state")
		}
		if code, _ := reachRaw(c, t, "/probe/"); code == "200" {
			t.Errorf("a vat still answers on 127.0.0.1:8787 after make uninstall")
		}
	})
}

// reachRaw GETs path on 127.0.0.1:8787 in the container: status and body.
func reachRaw(c container, t testing.TB, path string) (string, string) {
	t.Helper()
	out, _ := c.exec(t, "curl", "-sS", "--max-time", "30", "-w", "\n%{http_code}", "http://127.0.0.1:8787"+path)
	i := strings.LastIndex(out, "\n")
	if i < 0 {
		return out, ""
	}
	return out[i+1:], out[:i]
}

// The far end of the quickstart's egress: a global address that exists only
// in a network namespace of the container ("far"), joined to the container's
// own namespace by a veth pair. This host has no internet, yet the
// switchboard's public handle has a public address to reach; it is not one of
// the container's own addresses, so the switchboard judges it public.
const (
	farAddr = "9.9.9.9"
	farPort = 7
	nearNet = "10.99.0.1/32"
)

// farNetwork builds the far namespace and runs the echo server there as a
// transient unit.
func farNetwork(t *testing.T, c container) {
	t.Helper()
	for _, args := range [][]string{
		{"ip", "netns", "add", "far"},
		{"ip", "link", "add", "tbx-near", "type", "veth", "peer", "name", "tbx-far"},
		{"ip", "link", "set", "tbx-far", "netns", "far"},
		{"ip", "addr", "add", nearNet, "dev", "tbx-near"},
		{"ip", "link", "set", "tbx-near", "up"},
		{"ip", "route", "add", farAddr + "/32", "dev", "tbx-near"},
		{"ip", "-n", "far", "addr", "add", farAddr + "/32", "dev", "tbx-far"},
		{"ip", "-n", "far", "link", "set", "lo", "up"},
		{"ip", "-n", "far", "link", "set", "tbx-far", "up"},
		{"ip", "-n", "far", "route", "add", "default", "dev", "tbx-far"},
		{"systemd-run", "--unit=far-echo", "ip", "netns", "exec", "far", "/root/probevat", "--echo", fmt.Sprintf("%s:%d", farAddr, farPort)},
	} {
		c.mustExec(t, args...)
	}
	// The echo answers from the container's own namespace.
	testenv.WaitFor(t, 15*time.Second, func() error {
		out, err := c.exec(t, "bash", "-c", fmt.Sprintf(`exec 3<>/dev/tcp/%s/%d; echo ping >&3; head -n1 <&3`, farAddr, farPort))
		if err == nil && out == "pong ping" {
			return nil
		}
		return fmt.Errorf("the far echo server does not answer: %v %q", err, out)
	})
}

// TestBwrapUnderToyboxSettings backs the comments in systemd/toybox.service
// under a real systemd: a wall-shaped bwrap runs as the toybox user under
// the unit's own [Service] settings, and fails under each setting the unit
// leaves out on purpose. It needs no binaries: only the unit and the
// sysusers entry.
func TestBwrapUnderToyboxSettings(t *testing.T) {
	c := bootSystemd(t)
	c.mustExec(t, "mkdir", "-p", "/etc/sysusers.d")
	mustDocker(t, "cp", filepath.Join(repoRoot(t), "systemd", "toybox.sysusers"), c.name+":/etc/sysusers.d/toybox.conf")
	c.mustExec(t, "systemd-sysusers")
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "systemd", "toybox.service"))
	if err != nil {
		t.Fatal(err)
	}
	unsetSettingsBreakBwrap(t, c, string(data))
}

// unsetSettingsBreakBwrap runs bwrap in oneshot units made of the
// [Service] settings of unitText (less how it starts), plus one more each.
func unsetSettingsBreakBwrap(t *testing.T, c container, unitText string) {
	installed := unitText
	var service []string
	in := false
	for _, l := range strings.Split(installed, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "["):
			in = l == "[Service]"
			continue
		case !in || l == "" || strings.HasPrefix(l, "#"):
			continue
		}
		key, _, _ := strings.Cut(l, "=")
		switch key {
		case "Type", "ExecStart", "Sockets", "Restart", "RestartSec", "NotifyAccess":
			continue
		}
		service = append(service, l)
	}
	bwrap := "/usr/bin/bwrap --unshare-user --unshare-ipc --unshare-pid --unshare-net --unshare-uts --unshare-cgroup" +
		" --disable-userns --hostname toybox --die-with-parent --new-session --as-pid-1 --cap-drop ALL" +
		" --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp /bin/true"
	tests := []struct {
		name, extra string
		wantOK      bool
		wantLog     string // what bwrap says when it fails
	}{
		{"as installed", "", true, ""},
		{"ProtectKernelTunables", "ProtectKernelTunables=yes", false, "Can't mount proc"},
		{"ProtectKernelLogs", "ProtectKernelLogs=yes", false, "Can't mount proc"},
		{"ProtectHostname", "ProtectHostname=yes", false, "Can't set hostname"},
		{"ProcSubset", "ProcSubset=pid", false, "overflowuid"},
		{"RestrictNamespaces=yes", "RestrictNamespaces=yes", false, "new namespace"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			unit := fmt.Sprintf("toybox-bwrap-probe-%d.service", i)
			body := "[Unit]\nDescription=bwrap under toybox.service's settings\n[Service]\n" +
				strings.Join(service, "\n") + "\n" + tt.extra + "\nType=oneshot\nExecStart=" + bwrap + "\n"
			f := filepath.Join(t.TempDir(), unit)
			if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			mustDocker(t, "cp", f, c.name+":/etc/systemd/system/"+unit)
			c.mustExec(t, "systemctl", "daemon-reload")
			out, err := c.exec(t, "systemctl", "start", unit)
			log, _ := c.exec(t, "journalctl", "-u", unit, "--no-pager", "-o", "cat")
			if ok := err == nil; ok != tt.wantOK {
				t.Errorf("bwrap under toybox.service + %q: ran = %v; want %v\n%s\n%s", tt.extra, ok, tt.wantOK, out, tail(log, 10))
			}
			if !tt.wantOK && !strings.Contains(log, tt.wantLog) {
				t.Errorf("bwrap under toybox.service + %q failed, but not saying %q:\n%s", tt.extra, tt.wantLog, tail(log, 10))
			}
		})
	}
}
