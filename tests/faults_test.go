//go:build linux

package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// heldRemote accepts every connection and keeps it, reading until its end,
// then closes it (as a server does): accepted counts the connections,
// ended those whose other side ended.
type heldRemote struct {
	port            string
	accepted, ended atomic.Int64
}

func newHeldRemote(t *testing.T) *heldRemote {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &heldRemote{port: strconv.Itoa(l.Addr().(*net.TCPAddr).Port)}
	conns := make(chan net.Conn, 1<<16)
	t.Cleanup(func() {
		_ = l.Close()
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.accepted.Add(1)
			conns <- c
			go func() {
				buf := make([]byte, 512)
				for {
					if _, err := c.Read(buf); err != nil {
						r.ended.Add(1)
						_ = c.Close()
						return
					}
				}
			}()
		}
	}()
	return r
}

// TestRelayLimitRefusalIsShut: an app of a real wall holds MaxAppSockets
// (1024) relayed sockets; each connect past that is refused with its
// reason, and its connection, which the switchboard had already made, ends
// at once. It was only closed by the supervisor while the switchboard kept
// its duplicate: it stayed open at the remote and counted against the
// vat's connections at the switchboard (4096) until the vat restarted.
func TestRelayLimitRefusalIsShut(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	r := newHeldRemote(t)
	addr := "127.0.0.1:" + r.port
	s.mustInstall("cap", example(t, "capnp-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, r.port)))
	s.mustGet("/cap/hold?"+q("addr", addr, "n", "1024"), "got: held 1024, refused 0")
	_, body := s.get("/cap/hold?" + q("addr", addr, "n", "8"))
	if !strings.HasPrefix(body, "got: held 0, refused 8") || !strings.Contains(body, "too many relayed sockets open for this vat") {
		t.Fatalf("8 connects past the limit: %q; want all refused for the relayed sockets' limit", body)
	}
	waitFor(t, "the refused connections to end at the remote", 10*time.Second, func() bool { return r.ended.Load() >= 8 })
	if a, e := r.accepted.Load(), r.ended.Load(); a != 1032 || e != 8 {
		t.Errorf("the remote accepted %d connections and saw %d end; want 1032 and the 8 refused", a, e)
	}
	s.mustGet("/cap/release", "got: released 1024")
	waitFor(t, "the released connections to end at the remote", 10*time.Second, func() bool { return r.ended.Load() == 1032 })
}

// TestDamagedRecordKeepsItsUID: a vat record cut short (a full disk, a
// crash of the file system, a careless edit) made the vat vanish from
// GET / (GET and DELETE answered 404, the only trace a log line), and the
// next install got its host uid: once the record was repaired, two vats
// ran as one uid, each owning the other's data. A record that cannot be
// read falls back to its good copy; without one the vat is listed, off,
// with what is wrong and how to repair it, and its uid goes to no other
// vat. An install over it or its removal mends it.
func TestDamagedRecordKeepsItsUID(t *testing.T) {
	s := newStack(t, stackOpts{})
	alice := s.mustInstall("alice", example(t, "counter-v1"), "")
	uid := alice["uid"].(float64)
	s.mustGet("/alice/", "v1 count 1")
	rec := filepath.Join(s.state, "vats", "alice.json")
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	cut := func() {
		t.Helper()
		if err := os.WriteFile(rec, b[:len(b)/2], 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// Cut short, with its good copy: the vat runs from the copy.
	s.stopToybox()
	cut()
	s.startToybox()
	st := s.status("alice")
	if st["uid"] != uid || !strings.Contains(fmt.Sprint(st["damaged"]), "runs from the record's good copy") {
		t.Fatalf("alice with a cut record and its good copy: %v; want uid %v and the damage said", st, uid)
	}
	waitFor(t, "alice serving from its good copy", 15*time.Second, func() bool {
		_, body := s.get("/alice/")
		return body == "v1 count 2"
	})

	// Cut short, and no good copy: listed, off, uid reserved.
	s.stopToybox()
	cut()
	if err := os.Remove(rec + ".good"); err != nil {
		t.Fatal(err)
	}
	s.startToybox()
	code, list := s.adminDo("GET", "/", nil)
	var vats []struct{ ID string }
	if err := json.Unmarshal([]byte(list), &vats); code != http.StatusOK || err != nil || len(vats) != 1 || vats[0].ID != "alice" {
		t.Fatalf("GET / = %d %s; want alice listed", code, list)
	}
	st = s.status("alice")
	if st["status"] != "off: its record is damaged" || st["status_es"] != "apagado: su registro está dañado" || st["uid"] != uid {
		t.Errorf("alice with a cut record: %v; want off, damaged, uid %v", st, uid)
	}
	for _, want := range []string{"vats/alice.json cannot be read", "stays reserved", "PUT /alice", "DELETE /alice"} {
		if !strings.Contains(fmt.Sprint(st["last_error"]), want) {
			t.Errorf("alice's last_error %q does not say %q", st["last_error"], want)
		}
	}
	bob := s.mustInstall("bob", example(t, "counter-v1"), "")
	if bob["uid"] == uid {
		t.Fatalf("bob was given alice's uid %v while alice's record is damaged", uid)
	}

	// An install over it writes its record again: same uid, same data.
	again := s.mustInstall("alice", example(t, "counter-v1"), "")
	if again["uid"] != uid || again["damaged"] != nil {
		t.Errorf("alice installed again: %v; want uid %v, nothing damaged", again, uid)
	}
	s.mustGet("/alice/", "v1 count 3")

	// Removing a damaged vat works as removing any.
	s.stopToybox()
	cut()
	s.startToybox()
	if code, body := s.adminDo("DELETE", "/alice", nil); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("DELETE /alice with a cut record = %d %s", code, body)
	}
	if code, _ := s.adminDo("GET", "/alice", nil); code != http.StatusNotFound {
		t.Errorf("GET /alice after its removal = %d; want 404", code)
	}
	if _, err := os.Stat(rec + ".good"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("alice's good copy after its removal: %v; want it gone", err)
	}
}

// proxyStorm is an egress-probe vat granted a held remote, to connect to
// many times through its wall's proxy, and an echo server, to see its
// egress work.
type proxyStorm struct {
	s     *stack
	r     *heldRemote
	echo  string
	first map[string]any // its status once installed
}

func newProxyStorm(t *testing.T) *proxyStorm {
	t.Helper()
	p := &proxyStorm{s: newStack(t, stackOpts{handle: "local"}), r: newHeldRemote(t), echo: echoServer(t, "echo: ")}
	grant := fmt.Sprintf(`[{"host":"127.0.0.1","port":%s},{"host":"127.0.0.1","port":%s}]`, p.r.port, p.echo)
	p.first = p.s.mustInstall("erin", example(t, "egress-probe"), q("egress", grant))
	p.s.mustGet("/erin/tcp?"+q("addr", "127.0.0.1:"+p.echo, "send", "before"), "got: echo: before")
	return p
}

// hold has the app open n tunnels to the held remote and keep them.
func (p *proxyStorm) hold(t *testing.T, n int) (kept, refused int, body string) {
	t.Helper()
	_, body = p.s.get("/erin/hold?" + q("addr", "127.0.0.1:"+p.r.port, "n", strconv.Itoa(n)))
	t.Logf("holding %d: %s", n, body)
	if _, err := fmt.Sscanf(body, "got: held %d, refused %d", &kept, &refused); err != nil {
		t.Fatalf("/hold answered %q", body)
	}
	if strings.Contains(body, "connection closed") {
		t.Errorf("the entry lost its capability connection: %s", body)
	}
	return kept, refused, body
}

// release has the app close its kept tunnels, then checks that its egress
// works again in the same wall.
func (p *proxyStorm) release(t *testing.T, kept int) {
	t.Helper()
	p.s.mustGet("/erin/release", fmt.Sprintf("got: released %d", kept))
	var last string
	waitFor(t, "egress again once the app let go", 15*time.Second, func() bool {
		_, body := p.s.get("/erin/tcp?" + q("addr", "127.0.0.1:"+p.echo, "send", "after"))
		if body != last {
			t.Logf("after the release: %s", body)
			last = body
		}
		return body == "got: echo: after"
	})
	st := p.s.status("erin")
	if st["status"] != "walled" || st["restarts"] != float64(0) || st["pid"] != p.first["pid"] {
		t.Errorf("erin after the storm: %v; want the same wall, walled, no restart", st)
	}
}

// TestEntryKeepsItsEgressAtItsLimits: an app holding thousands of proxied
// connections ran toybox-entry out of descriptors (six for each: the
// client's, the switchboard's socket and a splice pipe each way) at about
// 3300 under this host's limit of 20000: its capability connection to the
// supervisor closed, every later connect failed with "rpc: connection
// closed" while the status still said walled, restarts 0, and the log
// tail filled with accept-retry lines. With the real default limits (the
// switchboard's 4096 connections per vat, the entry's descriptor limit as
// the host gives it), every connect past a limit is refused with its
// reason, and once the app lets go its egress works again, in the same
// wall.
func TestEntryKeepsItsEgressAtItsLimits(t *testing.T) {
	p := newProxyStorm(t)
	kept, refused, body := p.hold(t, 4400)
	if kept < 3500 || refused == 0 || !strings.Contains(body, "4096 connections open") {
		t.Errorf("held %d, refused %d: want most of the switchboard's 4096 held and the rest refused for that limit", kept, refused)
	}
	p.release(t, kept)
}

// wallEntry is the pid of toybox-entry in vat id's wall (its bwrap's child,
// the wall's pid 1).
func wallEntry(t *testing.T, s *stack, id string) int {
	t.Helper()
	bw := int(s.status(id)["pid"].(float64))
	var pid int
	waitFor(t, "the wall's pid 1", 10*time.Second, func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", bw, bw))
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return false
		}
		pid, _ = strconv.Atoi(f[0])
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return strings.TrimSpace(string(comm)) != "bwrap"
	})
	return pid
}

// TestEntryRefusesAtItsDescriptorLimit: with its descriptor limit lowered
// while it runs (an operator's LimitNOFILE, or a host's), toybox-entry
// refuses the connections past what its descriptors allow, each with a
// 503 that says why, and never runs out: its capability connection stays,
// and once the app lets go its egress works in the same wall.
func TestEntryRefusesAtItsDescriptorLimit(t *testing.T) {
	p := newProxyStorm(t)
	// As the wall's uid: root here may lack CAP_SYS_RESOURCE (a
	// container's), which another uid's limits need.
	pid := wallEntry(t, p.s, "erin")
	uid := strconv.Itoa(int(p.first["uid"].(float64)))
	if b, err := exec.Command("setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "prlimit", "--pid", strconv.Itoa(pid), "--nofile=600:600").CombinedOutput(); err != nil {
		t.Fatalf("prlimit: %v\n%s", err, b)
	}
	kept, refused, body := p.hold(t, 400)
	if kept < 150 || refused == 0 || !strings.Contains(body, "egress refused: toybox-entry holds") || !strings.Contains(body, "RLIMIT_NOFILE 600") {
		t.Errorf("held %d, refused %d: want the connections past the entry's descriptors refused with its reason", kept, refused)
	}
	p.release(t, kept)
	// The entry writes its records a few at a time (at most 20 ms late).
	var logs string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, logs = p.s.adminDo("GET", "/erin/logs", nil); strings.Contains(logs, "connection refused") {
			break
		}
	}
	if n := strings.Count(logs, "connection refused"); n < 1 || n > 3 {
		t.Errorf("the wall's log holds %d refusal records for %d refusals; want one per 10 s, saying how many more:\n%s", n, refused, logs)
	}
}

// TestLostCapabilityEndsTheWall: when toybox-entry's capability connection
// ends while the app runs (here it is shut down from outside, as running
// out of descriptors did), every later connect of the vat's failed with
// "rpc: connection closed" while the status said walled, restarts 0. The
// wall ends and starts again, and the status says why.
func TestLostCapabilityEndsTheWall(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	echo := echoServer(t, "echo: ")
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, echo)))
	path := "/erin/tcp?" + q("addr", "127.0.0.1:"+echo, "send", "ping")
	s.mustGet(path, "got: echo: ping")
	// The entry's capability connection is its one unix stream socket
	// whose peer is the supervisor (its listeners and proxied connections
	// are TCP, its helpers' sockets, the connector's, are SOCK_SEQPACKET,
	// and its direct switchboard connections are socket pairs the
	// switchboard made, so their peer is the switchboard).
	pid := wallEntry(t, s, "erin")
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	for _, e := range ents {
		n, _ := strconv.Atoi(e.Name())
		d, err := unix.PidfdGetfd(pfd, n, 0)
		if err != nil {
			continue
		}
		dom, err := unix.GetsockoptInt(d, unix.SOL_SOCKET, unix.SO_DOMAIN)
		typ, err2 := unix.GetsockoptInt(d, unix.SOL_SOCKET, unix.SO_TYPE)
		if err == nil && err2 == nil && dom == unix.AF_UNIX && typ == unix.SOCK_STREAM && peerPid(d) == s.tb.Process.Pid {
			if fd >= 0 {
				t.Fatal("the entry holds more than one unix stream socket to the supervisor")
			}
			fd = d
			continue
		}
		_ = unix.Close(d)
	}
	if fd < 0 {
		t.Fatal("the entry holds no unix stream socket to the supervisor")
	}
	if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(fd)
	waitFor(t, "the wall to end and start again", 20*time.Second, func() bool {
		st := s.status("erin")
		return st["restarts"] == float64(1) && st["status"] == "walled"
	})
	st := s.status("erin")
	if !strings.Contains(fmt.Sprint(st["last_error"]), "capability connection") {
		t.Errorf("erin after its entry lost its capability connection: %v; want last_error to say so", st)
	}
	waitFor(t, "egress in the new wall", 15*time.Second, func() bool {
		_, body := s.get(path)
		return body == "got: echo: ping"
	})
}

// peerPid reports the pid SO_PEERCRED names for the socket fd: for a
// socket pair, the process that made it. -1 when it cannot be read.
func peerPid(fd int) int {
	c, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return -1
	}
	return int(c.Pid)
}
