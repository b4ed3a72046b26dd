package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// heldRemote accepts every connection and keeps it, reading until its end:
// accepted counts the connections, ended those whose other side ended.
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
	if _, err := os.Stat(rec + ".good"); !os.IsNotExist(err) {
		t.Errorf("alice's good copy after its removal: %v; want it gone", err)
	}
}
