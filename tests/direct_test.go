//go:build linux

package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestInWallConnectTakesOneHop: a connect through the wall's proxy goes
// from toybox-entry straight to the switchboard, on a connection the
// supervisor asked for the vat (the switchboard's record of it names the
// supervisor's socket with +direct and carries the vat's labels); each
// member of a list grant is reached, and what no member admits is refused
// with the relay's words. A member whose labels refuse a target is never
// asked for it (the entry judges the labels as the switchboard first
// would): no round trip brings back a refusal the entry could see. The
// supervisor still counts the direct connects in the vat's status.
func TestInWallConnectTakesOneHop(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	a, b, other := echoServer(t, "a: "), echoServer(t, "b: "), echoServer(t, "other: ")
	grant := fmt.Sprintf(`[{"host":"127.0.0.1","port":%s},{"host":"127.0.0.1","port":%s}]`, a, b)
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", grant))
	s.mustGet("/erin/tcp?"+q("addr", "127.0.0.1:"+a, "send", "one"), "got: a: one")
	s.mustGet("/erin/tcp?"+q("addr", "127.0.0.1:"+b, "send", "two"), "got: b: two")
	body := wantPrefix(t, s, "/erin/tcp?"+q("addr", "127.0.0.1:"+other, "send", "three"), "got: egress refused:")
	if strings.Contains(body, "other:") || !strings.Contains(body, "not granted") {
		t.Errorf("the ungranted port: %q; want refused, not granted", body)
	}
	// The switchboard's log comes through a pipe: its last records may
	// come a moment after the answers.
	_ = sbLogged(s, 5*time.Second, func() bool { return directAllowed(s, a) > 0 && directAllowed(s, b) > 0 })
	var direct []map[string]any
	for _, line := range strings.Split(s.sbLog.String(), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) != nil || r["msg"] != "egress decision" || r["op"] != "connect" {
			continue
		}
		if sock, _ := r["socket"].(string); strings.HasSuffix(sock, "+direct") {
			direct = append(direct, r)
		}
	}
	var sawA, sawB bool
	for _, r := range direct {
		l, _ := r["labels"].(string)
		if !strings.Contains(l, `"vat":"erin"`) {
			t.Errorf("a direct decision without the vat's label: %v", r)
		}
		target, _ := r["target"].(string)
		if r["allow"] == true && strings.HasSuffix(target, ":"+a) {
			sawA = true
		}
		if r["allow"] == true && strings.HasSuffix(target, ":"+b) {
			sawB = true
		}
		if r["allow"] == true && strings.HasSuffix(target, ":"+other) {
			t.Errorf("a direct connection admitted the ungranted port: %v", r)
		}
		if r["allow"] != true {
			t.Errorf("a member was asked for a target its labels refuse: %v", r)
		}
	}
	if !sawA || !sawB {
		t.Fatalf("no allowed direct connect to both members (a %v, b %v) in the switchboard's log:\n%s", sawA, sawB, tail(s.sbLog))
	}
	waitFor(t, "the supervisor to count the direct connects", 5*time.Second, func() bool {
		_, m := s.adminDo("GET", "/metrics", nil)
		for _, line := range strings.Split(m, "\n") {
			if strings.HasPrefix(line, `toybox_egress_decisions_total{vat="erin",outcome="allowed"`) && strings.HasSuffix(line, " 2") {
				return true
			}
		}
		return false
	})
}

// sbLogged reports whether ok holds of the switchboard's log within d. The
// log comes through a pipe, so a record may come a moment after the
// answer of the call it records.
func sbLogged(s *stack, d time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(d); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// directAllowed counts the switchboard's allowed connects to port on a
// direct connection (its socket named with +direct).
func directAllowed(s *stack, port string) int { return directDecisions(s, "connect", port) }

// directDecisions counts the switchboard's allowed op calls for port on a
// direct connection.
func directDecisions(s *stack, op, port string) int {
	n := 0
	for _, line := range strings.Split(s.sbLog.String(), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) != nil || r["msg"] != "egress decision" || r["op"] != op || r["allow"] != true {
			continue
		}
		sock, _ := r["socket"].(string)
		target, _ := r["target"].(string)
		if strings.HasSuffix(sock, "+direct") && strings.HasSuffix(target, ":"+port) {
			n++
		}
	}
	return n
}

// TestRegrantTakesOneHop: a live regrant reaches toybox-entry's direct
// connections both ways. A member the regrant adds is connected in one hop
// within moments (the entry's grantChanged call answers, and it asks for
// its connections again), not through the supervisor's relay for as long
// as the old members last. A member the next regrant removes is refused
// by the very next connect (the supervisor revokes it at the switchboard
// before the regrant returns), while the member kept goes on.
func TestRegrantTakesOneHop(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	a, b := echoServer(t, "a: "), echoServer(t, "b: ")
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, a)))
	s.mustGet("/erin/tcp?"+q("addr", "127.0.0.1:"+a, "send", "one"), "got: a: one")
	if !sbLogged(s, 5*time.Second, func() bool { return directAllowed(s, a) > 0 }) {
		t.Fatalf("no direct connect to the granted port:\n%s", tail(s.sbLog))
	}

	code, body := s.adminDo("PATCH", "/erin?"+q("egress", fmt.Sprintf(`[{"host":"127.0.0.1","port":%s},{"host":"127.0.0.1","port":%s}]`, a, b)), nil)
	if code != 200 || !strings.Contains(body, `"restarted": false`) {
		t.Fatalf("PATCH /erin = %d %s; want 200, not restarted", code, body)
	}
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; directAllowed(s, b) == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the member the regrant added took no direct connect in 2 s (%d connects through the relay):\n%s", i, tail(s.sbLog))
		}
		s.mustGet("/erin/tcp?"+q("addr", "127.0.0.1:"+b, "send", "two"), "got: b: two")
	}

	code, body = s.adminDo("PATCH", "/erin?"+q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, b)), nil)
	if code != 200 || !strings.Contains(body, `"restarted": false`) {
		t.Fatalf("PATCH /erin = %d %s; want 200, not restarted", code, body)
	}
	got := wantPrefix(t, s, "/erin/tcp?"+q("addr", "127.0.0.1:"+a, "send", "three"), "got: egress refused:")
	if strings.Contains(got, "a: three") || !strings.Contains(got, "not granted") {
		t.Errorf("the removed member right after the regrant: %q; want refused, not granted", got)
	}
	s.mustGet("/erin/tcp?"+q("addr", "127.0.0.1:"+b, "send", "four"), "got: b: four")
}
