// Package dockertest gives tests a real Docker Engine and a tiny local image.
//
// Require starts a dedicated dockerd when none answers on Host, and leaves it
// running after the test process ends, so the next run (and every other test
// package) reuses it; it never touches the system's own dockerd. It is kept
// apart from a system docker by its own socket, data root, exec root, pid
// file and bridge:
//
//	dockerd --host unix:///run/toybox-test-docker.sock
//	        --data-root /var/lib/toybox-test-docker
//	        --exec-root /run/toybox-test-docker
//	        --pidfile /run/toybox-test-docker.pid
//	        --iptables=false --ip6tables=false --bridge toyboxtest0
//	log: /var/log/toybox-test-dockerd.log
//
// What works on this kind of host (a VM without systemd as PID 1, measured
// for issue 9): with --bridge=none containers run but no port is ever
// published (the port bindings are accepted and silently ignored). With a
// bridge and --iptables=false, publishing works through docker's userland
// proxy: docker-proxy, running as root, listens on the host address and port
// (127.0.0.1:N) and forwards to the container over the bridge — no NAT rule
// is needed for host-to-container traffic. So Require creates the bridge
// toyboxtest0 (10.233.77.1/24) itself with ip(8) when it is missing. A
// published loopback port is therefore a root-owned listening socket held
// by docker-proxy, which is exactly what a production host with docker's
// default userland proxy shows.
//
// Image imports, once, an image made of /bin/busybox (busybox-static) and a
// few applet links: nothing is ever pulled. Run starts a container from it
// and removes it when the test ends.
//
// Where docker cannot run (not root, no dockerd, the daemon does not come
// up), the test is handed to testenv.Unavailable: a skip, or a failure under
// TOYBOX_REQUIRE_WALLS=1.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"toybox/tests/testenv"
)

// Where the test daemon lives.
const (
	Socket     = "/run/toybox-test-docker.sock"
	Host       = "unix://" + Socket
	DataRoot   = "/var/lib/toybox-test-docker"
	ExecRoot   = "/run/toybox-test-docker"
	PidFile    = "/run/toybox-test-docker.pid"
	LogFile    = "/var/log/toybox-test-dockerd.log"
	LockFile   = "/run/toybox-test-docker.lock"
	Bridge     = "toyboxtest0"
	BridgeCIDR = "10.233.77.1/24"
	// ImageRef is the image Image imports.
	ImageRef = "toybox-test/busybox:1"
	// Busybox is the static busybox the image is made of.
	Busybox = "/bin/busybox"
)

// startTimeout bounds how long Require waits for a daemon to answer.
const startTimeout = 60 * time.Second

var (
	startMu  sync.Mutex
	started  bool   // a daemon answered in this process
	startErr string // why it cannot, once known

	imageMu   sync.Mutex
	imageDone bool
)

// Require returns a client of the test daemon, starting the daemon if it is
// not running. The client is closed when t ends.
func Require(t testing.TB) *client.Client {
	t.Helper()
	testenv.RequireRoot(t)
	startMu.Lock()
	defer startMu.Unlock()
	if startErr != "" {
		testenv.Unavailable(t, startErr)
	}
	c, err := client.NewClientWithOpts(client.WithHost(Host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("creating docker client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if started {
		return c
	}
	if why := ensureDaemon(c); why != "" {
		startErr = why
		testenv.Unavailable(t, why)
	}
	started = true
	return c
}

func ping(c *client.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := c.Ping(ctx)
	return err
}

// ensureDaemon makes the test daemon answer, or says why it cannot. Starting
// is serialised across test processes by a lock file.
func ensureDaemon(c *client.Client) string {
	if ping(c) == nil {
		return ""
	}
	unlock, err := lock()
	if err != nil {
		return "cannot lock " + LockFile + ": " + err.Error()
	}
	defer unlock()
	if ping(c) == nil {
		return "" // another test process started it meanwhile
	}
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		return "dockerd is not installed (Debian: docker.io)"
	}
	if why := ensureBridge(); why != "" {
		return why
	}
	logf, err := os.OpenFile(LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "opening dockerd log: " + err.Error()
	}
	defer logf.Close()
	cmd := exec.Command(dockerd,
		"--host", Host,
		"--data-root", DataRoot,
		"--exec-root", ExecRoot,
		"--pidfile", PidFile,
		"--iptables=false", "--ip6tables=false",
		"--bridge", Bridge,
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = detached()
	if err := cmd.Start(); err != nil {
		return "starting dockerd: " + err.Error()
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Sprintf("dockerd exited (%v); see %s: %s", err, LogFile, tail(LogFile))
		case <-time.After(250 * time.Millisecond):
		}
		if ping(c) == nil {
			return ""
		}
	}
	return fmt.Sprintf("dockerd did not answer on %s within %v; see %s: %s", Host, startTimeout, LogFile, tail(LogFile))
}

// ensureBridge creates the daemon's bridge when it is missing.
func ensureBridge() string {
	if _, err := net.InterfaceByName(Bridge); err == nil {
		return ""
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return "ip(8) is not installed (Debian: iproute2); needed to create bridge " + Bridge
	}
	for _, args := range [][]string{
		{"link", "add", Bridge, "type", "bridge"},
		{"addr", "add", BridgeCIDR, "dev", Bridge},
		{"link", "set", Bridge, "up"},
	} {
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			return fmt.Sprintf("creating bridge %s: ip %s: %v: %s", Bridge, strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	return ""
}

// tail returns the last lines of a log file, for a failure message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}

// Image imports ImageRef once (per daemon) from a tarball of /bin/busybox and
// returns its reference.
func Image(t testing.TB, c *client.Client) string {
	t.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()
	if imageDone {
		return ImageRef
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.ImageInspect(ctx, ImageRef); err == nil {
		imageDone = true
		return ImageRef
	}
	layer, err := busyboxTar()
	if err != nil {
		testenv.Unavailable(t, "building the busybox image: "+err.Error())
	}
	rc, err := c.ImageImport(ctx, image.ImportSource{Source: bytes.NewReader(layer), SourceName: "-"}, ImageRef, image.ImportOptions{})
	if err != nil {
		t.Fatalf("docker import %s: %v", ImageRef, err)
	}
	out, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatalf("docker import %s: reading progress: %v", ImageRef, err)
	}
	if bytes.Contains(out, []byte(`"error"`)) {
		t.Fatalf("docker import %s: %s", ImageRef, out)
	}
	imageDone = true
	return ImageRef
}

// busyboxTar makes a root file system of /bin/busybox and applet links.
func busyboxTar() ([]byte, error) {
	bin, err := os.ReadFile(Busybox)
	if err != nil {
		return nil, fmt.Errorf("reading %s (Debian: busybox-static): %w", Busybox, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdrs := []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(bin); err != nil {
				return nil, err
			}
		}
	}
	for _, applet := range []string{"sh", "nc", "httpd", "sleep", "cat", "echo"} {
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Spec describes a test container.
type Spec struct {
	// Name prefixes the container's name (a random suffix is added). If
	// empty, "toybox-test".
	Name string
	// Labels are the container's labels, e.g. com.docker.compose.project.
	Labels map[string]string
	// HostIP is the host address the port is published on. If empty,
	// 127.0.0.1.
	HostIP string
	// HostPort is the host port. If zero, docker picks a free one.
	HostPort uint16
	// Cmd is the container's command. If nil, busybox httpd on port 8080.
	Cmd []string
}

// containerPort is where the default command listens inside the container.
const containerPort = "8080/tcp"

var nameRE = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// Run starts a container of Image publishing its port 8080/tcp on
// s.HostIP:s.HostPort and returns its id and the published host address. The
// container is removed (forced) when t ends.
func Run(t testing.TB, c *client.Client, s Spec) (id string, published netip.AddrPort) {
	t.Helper()
	ref := Image(t, c)
	if s.Name == "" {
		s.Name = "toybox-test"
	}
	if s.HostIP == "" {
		s.HostIP = "127.0.0.1"
	}
	if s.Cmd == nil {
		s.Cmd = []string{"/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/"}
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := nameRE.ReplaceAllString(s.Name, "-") + "-" + hex.EncodeToString(rnd[:])
	hostPort := ""
	if s.HostPort != 0 {
		hostPort = strconv.Itoa(int(s.HostPort))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.ContainerCreate(ctx,
		&container.Config{Image: ref, Cmd: s.Cmd, Labels: s.Labels, ExposedPorts: nat.PortSet{containerPort: {}}},
		&container.HostConfig{PortBindings: nat.PortMap{containerPort: {{HostIP: s.HostIP, HostPort: hostPort}}}},
		nil, nil, name)
	if err != nil {
		t.Fatalf("creating container %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Errorf("removing container %s: %v", name, err)
		}
	})
	if err := c.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatalf("starting container %s: %v", name, err)
	}
	ins, err := c.ContainerInspect(ctx, resp.ID)
	if err != nil {
		t.Fatalf("inspecting container %s: %v", name, err)
	}
	if ins.NetworkSettings == nil || len(ins.NetworkSettings.Ports[containerPort]) == 0 {
		t.Fatalf("container %s publishes no port (is the daemon's bridge up? see %s)", name, LogFile)
	}
	b := ins.NetworkSettings.Ports[containerPort][0]
	ip, err := netip.ParseAddr(b.HostIP)
	if err != nil {
		t.Fatalf("container %s: published host ip %q: %v", name, b.HostIP, err)
	}
	port, err := strconv.ParseUint(b.HostPort, 10, 16)
	if err != nil {
		t.Fatalf("container %s: published host port %q: %v", name, b.HostPort, err)
	}
	return resp.ID, netip.AddrPortFrom(ip, uint16(port))
}

// DeadHost returns a docker host address that answers nothing: a unix socket
// file whose listener has closed, exactly what a stopped dockerd leaves
// behind.
func DeadHost(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("making a dead docker socket: %v", err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	return "unix://" + path
}
