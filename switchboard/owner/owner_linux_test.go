//go:build linux

package owner

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"toybox/labels"
	"toybox/tests/dockertest"
	"toybox/tests/testenv"
)

// world is one test's host: a toybox install and state dir, a checker, and
// helper binaries outside and inside toybox's tree.
type world struct {
	dir     string // world-readable scratch root
	install string // stands for /usr/local/lib/toybox
	state   string // stands for /var/lib/toybox
	outside string // a vat's own service, outside toybox's tree
	chk     *Checker
}

func newWorld(t *testing.T, dockerHost string, ttl time.Duration) *world {
	t.Helper()
	testenv.RequireRoot(t)
	w := &world{dir: helperTree(t)}
	w.install = filepath.Join(w.dir, "install")
	w.state = filepath.Join(w.dir, "state")
	for _, d := range []string{w.install, filepath.Join(w.state, "data", "myvat"), filepath.Join(w.state, "vats")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"myvat", "other-vat"} {
		if err := os.WriteFile(filepath.Join(w.state, "vats", id+".json"), []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w.outside = copyHelper(t, filepath.Join(w.dir, "home", "svc", "pgsvc"))
	chk, err := New(Config{
		ToyboxUID:     testUID,
		OwnRoots:      []string{w.install, w.state},
		DockerHost:    dockerHost,
		InstalledVats: StateVats(w.state, nil),
		Exceptions:    []string{"tts"},
		CacheTTL:      ttl,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { chk.Close() })
	w.chk = chk
	return w
}

func check(t *testing.T, c *Checker, target string, vat string, typed bool, allow bool, reason string) {
	t.Helper()
	ap, err := netip.ParseAddrPort(target)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Check(context.Background(), ap, vat, typed)
	if d.Allow != allow || !strings.Contains(d.Reason, reason) {
		t.Errorf("Check(%s, vat %q, typed %v) = {%v, %q}; want {%v, ...%q...}", target, vat, typed, d.Allow, d.Reason, allow, reason)
	}
}

// freePort returns a loopback port nothing listens on right now.
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := portOf(t, ln.Addr().String())
	ln.Close()
	return p
}

// TestProcessListeners runs real listeners as the test toybox user (and as
// root) and judges them.
func TestProcessListeners(t *testing.T) {
	dockertest.Require(t) // a root listener is judged against docker
	w := newWorld(t, dockertest.Host, -1)

	t.Run("nothing listening", func(t *testing.T) {
		p := freePort(t)
		check(t, w.chk, fmt.Sprintf("127.0.0.1:%d", p), "myvat", true, false, fmt.Sprintf("nothing listens on 127.0.0.1:%d", p))
	})

	t.Run("own service outside toybox's tree", func(t *testing.T) {
		pid, addr, _ := listener{bin: w.outside, addr: "127.0.0.1:0", uid: testUID}.start(t)
		check(t, w.chk, addr, "myvat", true, true, fmt.Sprintf("held by pid %d (%s) of the toybox user, outside toybox's own tree", pid, w.outside))
		check(t, w.chk, addr, "myvat", false, false, "never a manifest default")
		check(t, w.chk, addr, "", true, false, "a handle of no vat")
		mapped := fmt.Sprintf("[::ffff:127.0.0.1]:%d", portOf(t, addr))
		check(t, w.chk, mapped, "myvat", true, true, "outside toybox's own tree")
	})

	t.Run("dual-stack wildcard answers 127.0.0.1 and ::1", func(t *testing.T) {
		pid, addr, _ := listener{bin: w.outside, addr: "[::]:0", uid: testUID}.start(t)
		port := portOf(t, addr)
		check(t, w.chk, fmt.Sprintf("127.0.0.1:%d", port), "myvat", true, true, fmt.Sprintf("pid %d", pid))
		check(t, w.chk, fmt.Sprintf("[::1]:%d", port), "myvat", true, true, fmt.Sprintf("pid %d", pid))
		check(t, w.chk, fmt.Sprintf("127.0.0.1:%d", port), "myvat", false, false, "never a manifest default")
	})

	t.Run("executable inside the install dir", func(t *testing.T) {
		bin := copyHelper(t, filepath.Join(w.install, "bin", "helper"))
		_, addr, _ := listener{bin: bin, dir: "/", addr: "127.0.0.1:0", uid: testUID}.start(t)
		check(t, w.chk, addr, "myvat", true, false, "whose executable "+bin+" lies under toybox's own "+w.install)
	})

	t.Run("working directory inside the state dir", func(t *testing.T) {
		_, addr, _ := listener{bin: w.outside, dir: filepath.Join(w.state, "data", "myvat"), addr: "127.0.0.1:0", uid: testUID}.start(t)
		check(t, w.chk, addr, "myvat", true, false, "whose working directory "+filepath.Join(w.state, "data", "myvat")+" lies under toybox's own "+w.state)
	})

	t.Run("argument naming the state dir", func(t *testing.T) {
		_, addr, _ := listener{bin: w.outside, argv: []string{"pgsvc", "--data=" + w.state + "/data/myvat"}, addr: "127.0.0.1:0", uid: testUID}.start(t)
		check(t, w.chk, addr, "myvat", true, false, "whose argument --data="+w.state+"/data/myvat lies under")
	})

	t.Run("symlink into the install dir", func(t *testing.T) {
		link := filepath.Join(w.dir, "innocent")
		if err := os.Symlink(w.install, link); err != nil {
			t.Fatal(err)
		}
		_, addr, _ := listener{bin: w.outside, argv: []string{"pgsvc", link + "/conf"}, addr: "127.0.0.1:0", uid: testUID}.start(t)
		check(t, w.chk, addr, "myvat", true, false, "lies under toybox's own "+w.install)
	})

	for _, tc := range []struct {
		name string // the binary's base name
		argv []string
		role Role
	}{
		{"toybox", []string{"toybox", "serve", "--state", "/elsewhere"}, RoleSupervisor},
		{"switchboard", []string{"switchboard", "--listen", "local=/x"}, RoleSwitchboard},
		{"toybox-entry", []string{"toybox-entry"}, RoleEntry},
		{"bwrap", []string{"bwrap", "--unshare-all"}, RoleBwrap},
	} {
		t.Run(tc.name+" of another install", func(t *testing.T) {
			// Outside this install's roots: refused for what it is.
			bin := copyHelper(t, filepath.Join(w.dir, "other-install", "bin", tc.name))
			pid, addr, _ := listener{bin: bin, argv: tc.argv, addr: "127.0.0.1:0", uid: testUID}.start(t)
			check(t, w.chk, addr, "myvat", true, false, fmt.Sprintf("is held by %s (pid %d)", tc.role, pid))
		})
	}

	t.Run("supervisor renamed, argv0 still says toybox", func(t *testing.T) {
		pid, addr, _ := listener{bin: w.outside, argv: []string{"/usr/local/bin/toybox", "serve"}, addr: "127.0.0.1:0", uid: testUID}.start(t)
		check(t, w.chk, addr, "myvat", true, false, fmt.Sprintf("held by the toybox supervisor (pid %d)", pid))
	})

	t.Run("socket shared after fork with the switchboard", func(t *testing.T) {
		sb := copyHelper(t, filepath.Join(w.dir, "other-install", "bin", "switchboard"))
		pid, addr, _ := listener{bin: w.outside, addr: "127.0.0.1:0", uid: testUID, share: sb}.start(t)
		d := w.chk.Check(context.Background(), netip.MustParseAddrPort(addr), "myvat", true)
		if d.Allow || !strings.Contains(d.Reason, "held by the toybox switchboard (pid ") {
			t.Errorf("Check(%s) = {%v, %q}; want a refusal naming the switchboard (the service itself is pid %d)", addr, d.Allow, d.Reason, pid)
		}
	})

	t.Run("SO_REUSEPORT shared with the supervisor", func(t *testing.T) {
		_, addr, _ := listener{bin: w.outside, addr: "127.0.0.1:0", uid: testUID, reusePort: true}.start(t)
		check(t, w.chk, addr, "myvat", true, true, "outside toybox's own tree")
		sup := copyHelper(t, filepath.Join(w.dir, "other-install", "bin", "toybox"))
		pid, _, _ := listener{bin: sup, argv: []string{"toybox", "serve"}, addr: addr, uid: testUID, reusePort: true}.start(t)
		check(t, w.chk, addr, "myvat", true, false, fmt.Sprintf("held by the toybox supervisor (pid %d)", pid))
	})

	t.Run("another user's listener", func(t *testing.T) {
		_, addr, _ := listener{bin: w.outside, addr: "127.0.0.1:0", uid: testUID + 1}.start(t)
		check(t, w.chk, addr, "myvat", true, false, fmt.Sprintf("held by uid %d, neither the toybox user nor root", testUID+1))
	})

	t.Run("plain root daemon", func(t *testing.T) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		check(t, w.chk, ln.Addr().String(), "myvat", true, false, "is held by root and no running container publishes it")
	})

	t.Run("this host's own address, and a foreign one", func(t *testing.T) {
		pid, addr, _ := listener{bin: w.outside, addr: "0.0.0.0:0", uid: testUID}.start(t)
		port := portOf(t, addr)
		own := ownV4(t)
		check(t, w.chk, netip.AddrPortFrom(own, port).String(), "myvat", true, true, fmt.Sprintf("is held by pid %d", pid))
		check(t, w.chk, fmt.Sprintf("203.0.113.9:%d", port), "myvat", true, false, "neither a loopback address nor one of this host's")
	})

	t.Run("the switchboard hook", func(t *testing.T) {
		_, addr, _ := listener{bin: w.outside, addr: "127.0.0.1:0", uid: testUID}.start(t)
		ap := netip.MustParseAddrPort(addr)
		h := labels.Set{Network: labels.NetworkLocal, Vat: "myvat"}
		if ok, why := w.chk.LoopbackFunc(nil)(context.Background(), ap, h); ok || !strings.Contains(why, "never a manifest default") {
			t.Errorf("LoopbackFunc(nil) = %v, %q; want a refusal: nil ownerTyped means never typed", ok, why)
		}
		typed := func(labels.Set) bool { return true }
		if ok, why := w.chk.LoopbackFunc(typed)(context.Background(), ap, h); !ok {
			t.Errorf("LoopbackFunc(typed) = %v, %q; want allowed", ok, why)
		}
	})
}

// ownV4 returns a non-loopback IPv4 address of this host (one always exists
// on the machines these tests run on; the loopback-only case would make the
// subtest meaningless, so it fails).
func ownV4(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() && !ip.IsLoopback() {
				return ip.Unmap()
			}
		}
	}
	t.Fatal("this host has no non-loopback IPv4 address")
	return netip.Addr{}
}

// TestPortChangesHands: a decision is reused inside the cache window and
// asked again after it.
func TestPortChangesHands(t *testing.T) {
	dockertest.Require(t)
	const ttl = 1500 * time.Millisecond // a wide window: a loaded machine must not outrun it
	w := newWorld(t, dockertest.Host, ttl)
	_, addr, stop := listener{bin: w.outside, addr: "127.0.0.1:0", uid: testUID}.start(t)
	check(t, w.chk, addr, "myvat", true, true, "outside toybox's own tree")
	start := time.Now()
	stop()
	// A root daemon takes the port over at once.
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatalf("taking over %s: %v", addr, err)
	}
	defer ln.Close()
	if time.Since(start) < ttl/2 {
		// Still inside the window: the cached answer stands (this is the
		// documented window, not a wish).
		check(t, w.chk, addr, "myvat", true, true, "outside toybox's own tree")
	}
	time.Sleep(ttl - time.Since(start) + 50*time.Millisecond)
	check(t, w.chk, addr, "myvat", true, false, "held by root and no running container publishes it")
}

// TestContainers publishes real container ports with and without compose
// project labels.
func TestContainers(t *testing.T) {
	c := dockertest.Require(t)
	w := newWorld(t, dockertest.Host, -1)
	project := func(p string) map[string]string {
		return map[string]string{ComposeProjectLabel: p, "com.docker.compose.service": "db"}
	}
	tests := []struct {
		name   string
		labels map[string]string
		hostIP string
		vat    string
		typed  bool
		allow  bool
		reason string // %s is the container's name prefix
	}{
		{"this vat's container", project("myvat"), "127.0.0.1", "myvat", true, true, "of this vat's compose project \"myvat\""},
		{"this vat's container, manifest default", project("myvat"), "127.0.0.1", "myvat", false, true, "of this vat's compose project \"myvat\""},
		{"this vat's container on every address", project("myvat"), "0.0.0.0", "myvat", true, true, "of this vat's compose project \"myvat\""},
		{"another vat's container", project("other-vat"), "127.0.0.1", "myvat", true, false, "of compose project \"other-vat\", not this vat's"},
		{"a project of no installed vat", project("stranger"), "127.0.0.1", "myvat", true, false, "of compose project \"stranger\", which is no installed vat"},
		{"unlabelled container", nil, "127.0.0.1", "myvat", true, false, "which belongs to no compose project"},
		{"operator exception", project("tts"), "127.0.0.1", "myvat", true, true, "an operator-listed exception"},
		{"this vat's project from a handle of no vat", project("myvat"), "127.0.0.1", "", true, false, "not this vat's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, pub := dockertest.Run(t, c, dockertest.Spec{Name: "owner", Labels: tt.labels, HostIP: tt.hostIP})
			target := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), pub.Port())
			d := w.chk.Check(context.Background(), target, tt.vat, tt.typed)
			if d.Allow != tt.allow || !strings.Contains(d.Reason, tt.reason) || !strings.Contains(d.Reason, `container "owner-`) {
				t.Errorf("Check(%s, vat %q) = {%v, %q}; want {%v, ...%q...}", target, tt.vat, d.Allow, d.Reason, tt.allow, tt.reason)
			}
		})
	}

	t.Run("docker unreachable", func(t *testing.T) {
		// This vat's own container really publishes the port, but the
		// checker cannot ask docker: refused, never passed.
		_, pub := dockertest.Run(t, c, dockertest.Spec{Name: "owner", Labels: project("myvat")})
		dead := newWorld(t, dockertest.DeadHost(t), -1)
		target := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), pub.Port())
		check(t, w.chk, target.String(), "myvat", true, true, "this vat's compose project")
		check(t, dead.chk, target.String(), "myvat", true, false, "docker cannot be asked which container publishes it")
	})

	t.Run("container stopped, port gone", func(t *testing.T) {
		id, pub := dockertest.Run(t, c, dockertest.Spec{Name: "owner", Labels: project("myvat")})
		target := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), pub.Port())
		check(t, w.chk, target.String(), "myvat", true, true, "this vat's compose project")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.ContainerKill(ctx, id, "KILL"); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 30*time.Second, func() error {
			d := w.chk.Check(context.Background(), target, "myvat", true)
			if d.Allow {
				return fmt.Errorf("still admitted after the container was killed: %q", d.Reason)
			}
			if !strings.Contains(d.Reason, "nothing listens") {
				t.Errorf("after the container died: %q; want nothing listens", d.Reason)
			}
			return nil
		})
	})
}

// TestConcurrentChecks: many callers at once, cached and not, agree.
func TestConcurrentChecks(t *testing.T) {
	dockertest.Require(t)
	w := newWorld(t, dockertest.Host, 50*time.Millisecond)
	pid, addr, _ := listener{bin: w.outside, addr: "127.0.0.1:0", uid: testUID}.start(t)
	ap := netip.MustParseAddrPort(addr)
	want := fmt.Sprintf("pid %d", pid)
	errs := make(chan string, 8*20)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				d := w.chk.Check(context.Background(), ap, "myvat", i%2 == 0)
				if typed := i%2 == 0; d.Allow != typed || (typed && !strings.Contains(d.Reason, want)) {
					errs <- fmt.Sprintf("Check(typed %v) = {%v, %q}", typed, d.Allow, d.Reason)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// BenchmarkCheckUncached measures one full look at /proc per check.
func BenchmarkCheckUncached(b *testing.B) {
	testenv.RequireRoot(b)
	chk, err := New(Config{ToyboxUID: testUID, OwnRoots: []string{"/var/lib/toybox"}, CacheTTL: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer chk.Close()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	// A root listener: /proc tables, every process's descriptors, then a
	// docker question (to the default socket, answered or refused).
	ap := netip.MustParseAddrPort(ln.Addr().String())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		chk.Check(context.Background(), ap, "myvat", true)
	}
}

// checkAs runs one check in a helper process of uid (the way a switchboard
// running as that user sees /proc and docker).
func checkAs(t *testing.T, bin string, uid int, req checkRequest) Decision {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), helperEnv+"=check", "TOYBOX_OWNER_TEST_CHECK="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("check helper as uid %d: %v", uid, err)
	}
	var d Decision
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("check helper output %q: %v", out, err)
	}
	return d
}

// TestUnprivilegedChecker runs the checker as the toybox user itself, as a
// switchboard of that user would: it sees its own user's processes, cannot
// read a non-dumpable one's descriptors (refused: it might hold the port),
// and cannot reach a root-only docker socket (refused).
func TestUnprivilegedChecker(t *testing.T) {
	dockertest.Require(t)
	w := newWorld(t, dockertest.Host, -1)
	checker := copyHelper(t, filepath.Join(w.dir, "checker", "owner-check"))
	req := func(target string) checkRequest {
		return checkRequest{UID: testUID, Roots: []string{w.install, w.state}, DockerHost: dockertest.Host, Target: target, Vat: "myvat", Typed: true}
	}

	pid, addr, _ := listener{bin: w.outside, addr: "127.0.0.1:0", uid: testUID}.start(t)
	if d := checkAs(t, checker, testUID, req(addr)); !d.Allow || !strings.Contains(d.Reason, fmt.Sprintf("pid %d", pid)) {
		t.Errorf("own service seen by a checker of the toybox user = {%v, %q}; want allowed, naming pid %d", d.Allow, d.Reason, pid)
	}

	// A non-dumpable process of the toybox user: its descriptors are
	// unreadable, so it could be holding any socket of that user.
	hid, _, _ := listener{bin: w.outside, addr: "127.0.0.1:0", uid: testUID, noDump: true}.start(t)
	if d := checkAs(t, checker, testUID, req(addr)); d.Allow || !strings.Contains(d.Reason, fmt.Sprintf("pid %d of that user cannot be inspected", hid)) {
		t.Errorf("with a hidden process of the toybox user = {%v, %q}; want refused naming pid %d", d.Allow, d.Reason, hid)
	}

	// A root listener: the docker socket is root's, so docker cannot be
	// asked, and the answer is a refusal.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if d := checkAs(t, checker, testUID, req(ln.Addr().String())); d.Allow || !strings.Contains(d.Reason, "docker cannot be asked") {
		t.Errorf("root listener, docker out of reach = {%v, %q}; want refused: docker cannot be asked", d.Allow, d.Reason)
	}
}

// TestDockerView: the checker works through the read-only view, and the view
// refuses everything but the container list.
func TestDockerView(t *testing.T) {
	c := dockertest.Require(t)
	sock := filepath.Join(t.TempDir(), "view.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: DockerView(dockertest.Socket, nil)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	id, pub := dockertest.Run(t, c, dockertest.Spec{Name: "owner", Labels: map[string]string{ComposeProjectLabel: "myvat"}})
	w := newWorld(t, "unix://"+sock, -1)
	target := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), pub.Port())
	check(t, w.chk, target.String(), "myvat", true, true, "this vat's compose project")
	check(t, w.chk, target.String(), "other-vat", true, false, "not this vat's")

	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	tests := []struct {
		method, path string
		want         int
	}{
		{"GET", "/_ping", 200},
		{"HEAD", "/_ping", 200},
		{"GET", "/v1.41/containers/json?all=1", 200},
		{"GET", "/version", 200},
		{"POST", "/v1.41/containers/create", 403},
		{"POST", "/containers/" + id + "/kill", 403},
		{"GET", "/v1.41/containers/" + id + "/json", 403},
		{"DELETE", "/containers/" + id, 403},
		{"POST", "/containers/json", 403},
		{"GET", "/v1.41/containers/json/../create", 403},
		{"GET", "/v1.41/containers%2fjson", 403},
		{"GET", "/images/json", 403},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, "http://docker"+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.URL.Opaque = tt.path // send the path exactly as written
			if i := strings.IndexByte(tt.path, '?'); i >= 0 {
				req.URL.Opaque, req.URL.RawQuery = tt.path[:i], tt.path[i+1:]
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("%s %s = %d; want %d", tt.method, tt.path, resp.StatusCode, tt.want)
			}
		})
	}
	// The container is still there: nothing got through.
	if _, err := c.ContainerInspect(context.Background(), id); err != nil {
		t.Errorf("container gone after the refused calls: %v", err)
	}
}
