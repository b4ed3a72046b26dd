package tests

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// TestRegrantUnconfirmedRestarts: a regrant whose revocations the
// switchboard does not answer in time (here it is stopped with SIGSTOP)
// answered 200, "restarted": false, as if the removed member were
// revoked. The wall now starts again, so nothing the old grant made
// outlives the change, and the answer says so.
func TestRegrantUnconfirmedRestarts(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	a, b := echoServer(t, "a: "), echoServer(t, "b: ")
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", fmt.Sprintf(`[{"host":"127.0.0.1","port":%s},{"host":"127.0.0.1","port":%s}]`, a, b)))
	s.mustGet("/erin/tcp?"+q("addr", "127.0.0.1:"+a, "send", "one"), "got: a: one")

	pid := s.sb.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(cont)
	testenv.WaitStopped(t, pid)
	type answer struct {
		code int
		body string
	}
	done := make(chan answer, 1)
	go func() {
		code, body := s.adminDo("PATCH", "/erin?"+q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, b)), nil)
		done <- answer{code, body}
	}()
	// The supervisor waits 5 s for the revocations; the switchboard runs
	// again just after, for the new wall's start.
	time.Sleep(5500 * time.Millisecond)
	cont()
	var got answer
	select {
	case got = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("PATCH /erin did not answer")
	}
	if got.code != 200 || !strings.Contains(got.body, `"restarted": true`) {
		t.Fatalf("PATCH /erin with the switchboard stopped = %d %s; want 200, restarted", got.code, got.body)
	}
	if !strings.Contains(s.tbLog.String(), "revocation is unconfirmed") {
		t.Errorf("no record of the unconfirmed revocation in the supervisor's log:\n%s", tail(s.tbLog))
	}
	body := wantPrefix(t, s, "/erin/tcp?"+q("addr", "127.0.0.1:"+a, "send", "two"), "got: egress refused:")
	if strings.Contains(body, "a: two") || !strings.Contains(body, "not granted") {
		t.Errorf("the removed member after the restart: %q; want refused, not granted", body)
	}
	s.mustGet("/erin/tcp?"+q("addr", "127.0.0.1:"+b, "send", "three"), "got: b: three")
}
