//go:build linux

package tests

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// echoServer runs a line echo server on 127.0.0.1 and returns its port.
func echoServer(t testing.TB, prefix string) string {
	return tcpServer(t, func(c net.Conn) {
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if _, err := io.WriteString(c, prefix+line); err != nil {
				return
			}
		}
	})
}

// tcpServer serves each connection to 127.0.0.1 with serve, on a
// goroutine of its own, and returns the port.
func tcpServer(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// webServer runs an HTTP server on 127.0.0.1 with / (a page) and /ws (a
// WebSocket echo), and returns its port.
func webServer(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<p>hello from the local web server</p>")
	})
	mux.Handle("/ws", websocket.Server{Handler: func(ws *websocket.Conn) {
		var msg string
		if err := websocket.Message.Receive(ws, &msg); err != nil {
			return
		}
		_ = websocket.Message.Send(ws, "echo: "+msg)
	}})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

func q(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v.Encode()
}

func wantPrefix(t *testing.T, s *stack, path, prefix string) string {
	t.Helper()
	code, body := s.get(path)
	if code != http.StatusOK || !strings.HasPrefix(body, prefix) {
		t.Errorf("GET %s = %d %q; want 200 starting %q", path, code, body, prefix)
	}
	return body
}

// TestEgressGrants: a granted local echo server is reachable through the
// wall's proxy; an ungranted one is refused with a reason; fetch and a
// WebSocket go out through the switchboard too.
func TestEgressGrants(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	granted := echoServer(t, "echo: ")
	other := echoServer(t, "other: ")
	web := webServer(t)
	grant := fmt.Sprintf(`[{"host":"127.0.0.1","port":%s},{"host":"127.0.0.1","port":%s}]`, granted, web)
	st := s.mustInstall("erin", example(t, "egress-probe"), q("egress", grant))
	if st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	if g := fmt.Sprint(st["grant"]); !strings.Contains(g, granted) || !strings.Contains(g, web) {
		t.Errorf("grant = %s; want both ports", g)
	}
	t.Run("raw TCP granted", func(t *testing.T) {
		s := s.in(t)
		s.mustGet("/erin/tcp?"+q("addr", "127.0.0.1:"+granted, "send", "ping"), "got: echo: ping")
	})
	t.Run("raw TCP ungranted", func(t *testing.T) {
		s := s.in(t)
		body := wantPrefix(t, s, "/erin/tcp?"+q("addr", "127.0.0.1:"+other, "send", "ping"), "got: egress refused:")
		if strings.Contains(body, "other:") {
			t.Errorf("the ungranted server answered: %q", body)
		}
	})
	t.Run("fetch granted", func(t *testing.T) {
		s := s.in(t)
		s.mustGet("/erin/?"+q("url", "http://127.0.0.1:"+web+"/"), "got: <p>hello from the local web server</p>")
	})
	t.Run("fetch absolute-form through the proxy", func(t *testing.T) {
		// What curl and most HTTP clients do with HTTP_PROXY for http://.
		s := s.in(t)
		s.mustInstall("hugo", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"scheme":"http","host":"127.0.0.1","port":%s}`, web)))
		s.mustGet("/hugo/?"+q("url", "http://127.0.0.1:"+web+"/", "proxy", "absolute"), "got: <p>hello from the local web server</p>")
	})
	t.Run("fetch ungranted name", func(t *testing.T) {
		s := s.in(t)
		body := wantPrefix(t, s, "/erin/?"+q("url", "https://example.org/"), "got: egress refused:")
		if !strings.Contains(body, "example.org") {
			t.Errorf("refusal %q does not name the host", body)
		}
	})
	t.Run("websocket", func(t *testing.T) {
		s := s.in(t)
		// The WebSocket goes as a TCP stream through the proxy: grant it.
		s.mustInstall("wendy", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, web)))
		s.mustGet("/wendy/ws?"+q("url", "ws://127.0.0.1:"+web+"/ws", "send", "hi"), "got: echo: hi")
	})
	// The grant the owner typed carries over an upgrade that sends no
	// ?egress= (as env does); an empty ?egress= takes it away.
	t.Run("upgrade keeps the owner's grant", func(t *testing.T) {
		s := s.in(t)
		s.mustInstall("uma", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, granted)))
		st := s.mustInstall("uma", example(t, "egress-probe"), "")
		if g := fmt.Sprint(st["grant"]); !strings.Contains(g, granted) {
			t.Fatalf("grant after an upgrade without egress = %s; want the owner's, port %s", g, granted)
		}
		s.mustGet("/uma/tcp?"+q("addr", "127.0.0.1:"+granted, "send", "ping"), "got: echo: ping")
		st = s.mustInstall("uma", example(t, "egress-probe"), "egress=")
		if g := fmt.Sprint(st["grant"]); strings.Contains(g, granted) {
			t.Fatalf("grant after ?egress= (empty) = %s; want none", g)
		}
		body := wantPrefix(t, s, "/uma/tcp?"+q("addr", "127.0.0.1:"+granted, "send", "ping"), "got: ")
		if strings.Contains(body, "echo:") {
			t.Errorf("the grant taken away still reached the echo server: %q", body)
		}
	})
	t.Run("no grant no way out", func(t *testing.T) {
		s := s.in(t)
		s.mustInstall("nora", example(t, "egress-probe"), "")
		body := wantPrefix(t, s, "/nora/tcp?"+q("addr", "127.0.0.1:"+granted, "send", "ping"), "got: ")
		if strings.Contains(body, "echo:") {
			t.Errorf("a vat with no grant reached the echo server: %q", body)
		}
	})
}

// TestCapabilityConstrain: a vat using fd 3 directly connects with the
// socket handed over; a handle it narrowed itself is enforced.
func TestCapabilityConstrain(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	a := echoServer(t, "a: ")
	b := echoServer(t, "b: ")
	grant := fmt.Sprintf(`[{"host":"127.0.0.1","port":%s},{"host":"127.0.0.1","port":%s}]`, a, b)
	s.mustInstall("cap", example(t, "capnp-probe"), q("egress", grant))
	s.mustGet("/cap/connect?"+q("addr", "127.0.0.1:"+a, "send", "x"), "got: a: x")
	s.mustGet("/cap/connect?"+q("addr", "127.0.0.1:"+b, "send", "y"), "got: b: y")
	narrow := fmt.Sprintf(`{"port":%s}`, b)
	s.mustGet("/cap/connect?"+q("addr", "127.0.0.1:"+b, "send", "z", "constrain", narrow), "got: b: z")
	body := wantPrefix(t, s, "/cap/connect?"+q("addr", "127.0.0.1:"+a, "send", "z", "constrain", narrow), "got: egress refused:")
	if strings.Contains(body, "a: z") {
		t.Errorf("the narrowed handle reached a: %q", body)
	}
	desc := wantPrefix(t, s, "/cap/describe?"+q("constrain", narrow), "got: ")
	if !strings.Contains(desc, "port="+b) || !strings.Contains(desc, "vat=cap") {
		t.Errorf("describe = %q; want the narrowed port and vat=cap", desc)
	}
	// Widening is impossible: a network the handle does not have.
	wantPrefix(t, s, "/cap/connect?"+q("addr", "127.0.0.1:"+a, "send", "z", "constrain", `{"host":"10.0.0.1"}`), "got: ")
	if _, body := s.get("/cap/connect?" + q("addr", "127.0.0.1:"+a, "send", "z", "constrain", `{"host":"10.0.0.1"}`)); strings.Contains(body, "a: z") {
		t.Errorf("a conflicting constrain still reached a: %q", body)
	}
}

// TestPublicHandleNeverReachesLocal: a supervisor holding only the public
// switchboard socket cannot reach a local echo server, whatever the grant.
func TestPublicHandleNeverReachesLocal(t *testing.T) {
	s := newStack(t, stackOpts{handle: "public"})
	port := echoServer(t, "echo: ")
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, port)))
	body := wantPrefix(t, s, "/erin/tcp?"+q("addr", "127.0.0.1:"+port, "send", "ping"), "got: egress refused:")
	if strings.Contains(body, "echo:") {
		t.Errorf("reached the local echo server through the public handle: %q", body)
	}
	s.mustInstall("cap", example(t, "capnp-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, port)))
	body = wantPrefix(t, s, "/cap/connect?"+q("addr", "127.0.0.1:"+port, "send", "ping"), "got: egress refused:")
	if strings.Contains(body, "echo:") {
		t.Errorf("fd 3 reached the local echo server through the public handle: %q", body)
	}
	// Asking for network local in the grant is a conflict, never a widening.
	code, out := s.install("lou", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s,"network":"local"}`, port)))
	if code == http.StatusCreated {
		_, body := s.get("/lou/tcp?" + q("addr", "127.0.0.1:"+port, "send", "ping"))
		if strings.Contains(body, "echo:") {
			t.Errorf("a grant naming network local widened a public handle: %q (install said %s)", body, out)
		}
	}
}

// TestSwitchboardRestart: when the switchboard restarts, the supervisor
// dials it again and the vats' Handles keep working for new connections,
// without the vats restarting.
func TestSwitchboardRestart(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	port := echoServer(t, "echo: ")
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, port)))
	s.mustInstall("cap", example(t, "capnp-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, port)))
	path := "/erin/tcp?" + q("addr", "127.0.0.1:"+port, "send", "one")
	capPath := "/cap/connect?" + q("addr", "127.0.0.1:"+port, "send", "two")
	s.mustGet(path, "got: echo: one")
	s.mustGet(capPath, "got: echo: two")
	pids := []any{s.status("erin")["pid"], s.status("cap")["pid"]}

	s.stopSwitchboard()
	if _, body := s.get(path); strings.Contains(body, "echo:") {
		t.Fatalf("reached the echo server with the switchboard down: %q", body)
	}
	s.startSwitchboard()
	for _, p := range []struct{ path, want string }{{path, "got: echo: one"}, {capPath, "got: echo: two"}} {
		waitFor(t, "egress through the restarted switchboard: "+p.path, 15*time.Second, func() bool {
			_, body := s.get(p.path)
			return body == p.want
		})
	}
	if got := []any{s.status("erin")["pid"], s.status("cap")["pid"]}; fmt.Sprint(got) != fmt.Sprint(pids) {
		t.Errorf("vat pids %v -> %v; the vats must not restart with the switchboard", pids, got)
	}
}

// TestAttackReconnectHandedOverSocket: an app asks its Handle for a socket
// to the address it was granted, then disconnects it (connect with
// AF_UNSPEC) and connects it to one it was not. Were it the switchboard's
// own TCP socket, that second connect would be made from the switchboard's
// network, past every check. The app gets one end of a unix socketpair the
// supervisor relays instead, which can neither connect again nor be bound
// to a name of its choosing.
func TestAttackReconnectHandedOverSocket(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	granted := echoServer(t, "granted: ")
	secret := echoServer(t, "SECRET: ")
	s.mustInstall("mallory", example(t, "snoop"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, granted)))
	// fd 3 itself cannot be bound to a name of the app's choosing (asked
	// first: /reconnect uses fd 3 and closes it).
	if _, body := s.get("/mallory/bind3?" + q("name", "toybox-test-squat")); !strings.HasPrefix(body, "denied:") {
		t.Errorf("binding fd 3 to an abstract name: %q; want denied", body)
	}
	_, body := s.get("/mallory/reconnect?" + q("granted", "127.0.0.1:"+granted, "target", "127.0.0.1:"+secret))
	t.Logf("the attack:\n%s", body)
	if strings.Contains(body, "ok:") || strings.Contains(body, "SECRET") {
		t.Errorf("the app turned its granted socket elsewhere:\n%s", body)
	}
	if !strings.Contains(body, fmt.Sprintf("socket: domain %d", syscall.AF_UNIX)) {
		t.Errorf("the app's socket is not a unix one relayed by the supervisor:\n%s", body)
	}
	if !strings.Contains(body, "denied: connect(") {
		t.Errorf("the attack did not get as far as its second connect:\n%s", body)
	}
	// The relayed socket carries bytes both ways, as the socket itself did.
	s.mustInstall("cap", example(t, "capnp-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, granted)))
	s.mustGet("/cap/connect?"+q("addr", "127.0.0.1:"+granted, "send", "through the relay"), "got: granted: through the relay")
}

// TestReachSaysWhatTheSwitchboardDecides: GET /<vat>/reach listed a
// grant naming this computer as something the vat "can reach" whatever
// the switchboard would decide: through the public handle (which refuses
// every loopback address) it listed "this computer at 127.0.0.1:P" as
// reachable, and through a local handle it said a loopback listener
// "must pass the listener-owner check" though the switchboard here runs
// with --loopback unchecked and has none. Each grant that names an
// address on this computer is now asked of the switchboard through the
// vat's own handle: reach says the switchboard's own refusal, the same
// one `toybox egress check` gets, and claims no check the switchboard
// does not run.
func TestReachSaysWhatTheSwitchboardDecides(t *testing.T) {
	port := echoServer(t, "echo: ")
	grant := fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, port)
	reachOf := func(t *testing.T, s *stack, id string) string {
		t.Helper()
		code, body := s.adminDo("GET", "/"+id+"/reach", nil)
		if code != http.StatusOK {
			t.Fatalf("GET /%s/reach = %d %s", id, code, body)
		}
		var ans struct{ Lines []string }
		if err := json.Unmarshal([]byte(body), &ans); err != nil {
			t.Fatal(err)
		}
		return strings.Join(ans.Lines, "\n")
	}
	// What the switchboard itself answers for the vat's handle.
	switchboardSays := func(t *testing.T, sock, id string) (bool, string) {
		t.Helper()
		out, err := exec.Command(filepath.Join(bins, "toybox"), "egress", "--socket", sock,
			"--constrain", grant, "--constrain", `{"vat":"`+id+`"}`, "check", "127.0.0.1:"+port).CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return true, ""
		case errors.As(err, &exit) && exit.ExitCode() == 3:
			reason, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n") // then "addresses: ..."
			if i := strings.Index(reason, "egress refused: "); i >= 0 {
				reason = reason[i+len("egress refused: "):]
			}
			return false, reason
		}
		t.Fatalf("toybox egress check: %v\n%s", err, out)
		return false, ""
	}

	t.Run("public handle", func(t *testing.T) {
		s := newStack(t, stackOpts{handle: "public"})
		s.mustInstall("erin", example(t, "egress-probe"), q("egress", grant))
		allow, reason := switchboardSays(t, s.sbPublic, "erin")
		if allow || reason == "" {
			t.Fatalf("the switchboard's public handle admits 127.0.0.1:%s (%v %q); the test's premise is wrong", port, allow, reason)
		}
		got := reachOf(t, s, "erin")
		t.Logf("reach:\n%s", got)
		if !strings.Contains(got, reason) {
			t.Errorf("GET /erin/reach:\n%s\nwant the switchboard's refusal of its grant: %q", got, reason)
		}
		// And the vat is in fact refused.
		wantPrefix(t, s, "/erin/tcp?"+q("addr", "127.0.0.1:"+port, "send", "ping"), "got: egress refused:")

		// A grant that names network local conflicts with the public
		// handle: the switchboard refuses to make the vat's handle at
		// all, and reach says that refusal, not that it did not answer.
		local := fmt.Sprintf(`{"host":"127.0.0.1","port":%s,"network":"local"}`, port)
		if code, out := s.install("lou", example(t, "egress-probe"), q("egress", local)); code != http.StatusCreated {
			t.Logf("PUT /lou with %s = %d %s: refused at install, nothing for reach to say", local, code, out)
			return
		}
		got = reachOf(t, s, "lou")
		t.Logf("reach lou:\n%s", got)
		if !strings.Contains(got, "the switchboard refuses it now: ") || strings.Contains(got, "did not answer") || !strings.Contains(got, `network "public" cannot become "local"`) {
			t.Errorf("GET /lou/reach:\n%s\nwant the switchboard's refusal of a handle whose labels conflict", got)
		}
	})

	t.Run("local handle, loopback unchecked", func(t *testing.T) {
		s := newStack(t, stackOpts{}) // the harness's switchboard runs --loopback unchecked
		s.mustInstall("erin", example(t, "egress-probe"), q("egress", grant))
		if allow, reason := switchboardSays(t, s.sbLocal, "erin"); !allow {
			t.Fatalf("the switchboard's local handle refuses 127.0.0.1:%s: %s; the test's premise is wrong", port, reason)
		}
		got := reachOf(t, s, "erin")
		t.Logf("reach:\n%s", got)
		if strings.Contains(got, "must pass the listener-owner check") || strings.Contains(got, "refuses it now") {
			t.Errorf("GET /erin/reach:\n%s\nwant no listener-owner check claimed, and its grant not refused: the switchboard runs none and admits it", got)
		}
		wantPrefix(t, s, "/erin/tcp?"+q("addr", "127.0.0.1:"+port, "send", "ping"), "got: echo: ping")
	})

	t.Run("local handle, no listener-owner check configured", func(t *testing.T) {
		// The last --loopback wins: owner, with no config, refuses
		// every listener on this host.
		s := newStack(t, stackOpts{sbArgs: []string{"--loopback", "owner"}})
		s.mustInstall("erin", example(t, "egress-probe"), q("egress", grant))
		allow, reason := switchboardSays(t, s.sbLocal, "erin")
		if allow || !strings.Contains(reason, "no listener-owner check is configured") {
			t.Fatalf("the switchboard's local handle without an owner section: %v %q; the test's premise is wrong", allow, reason)
		}
		got := reachOf(t, s, "erin")
		t.Logf("reach:\n%s", got)
		if !strings.Contains(got, reason) || strings.Contains(got, "it can reach:") {
			t.Errorf("GET /erin/reach:\n%s\nwant the switchboard's refusal of its grant, %q, and no \"it can reach\"", got, reason)
		}
		wantPrefix(t, s, "/erin/tcp?"+q("addr", "127.0.0.1:"+port, "send", "ping"), "got: egress refused:")
	})
}
