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
// with the relay's words. The supervisor still counts the direct connects
// in the vat's status.
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
