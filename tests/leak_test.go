//go:build linux

package tests

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// openFDs counts the descriptors process pid holds.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestNoDescriptorLeaks: what a vat's life does over and over (an egress
// connect, an MCP session opened, used and ended, a restart of each vat)
// leaves the supervisor and the switchboard holding no more descriptors
// than after the first round: a descriptor kept per connect, session or
// wall would run a long-lived supervisor out of them (its limit is the
// host's), and every vat with it.
func TestNoDescriptorLeaks(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	echo := echoServer(t, "echo: ")
	s.mustInstall("erin", example(t, "egress-probe"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, echo)))
	if code, body := s.install("counter", example(t, "mcp-stdio"), "mcp=stdio"); code != http.StatusCreated {
		t.Fatalf("PUT /counter?mcp=stdio = %d %s", code, body)
	}
	round := func(i int) {
		t.Helper()
		s.mustGet("/erin/tcp?"+q("addr", "127.0.0.1:"+echo, "send", fmt.Sprintf("ping%d", i)), fmt.Sprintf("got: echo: ping%d", i))
		session := s.mcpSession("counter")
		call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add","arguments":{"a":%d,"b":1}}}`, 10+i, i)
		if code, _, body := s.mcpPost("counter", call, session...); code != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`"sum":%d`, i+1)) {
			t.Fatalf("round %d: tools/call add: %d %s", i, code, body)
		}
		if code := s.mcpDelete("counter", session...); code != http.StatusOK && code != http.StatusNoContent {
			t.Fatalf("round %d: DELETE of the session = %d", i, code)
		}
		for _, id := range []string{"erin", "counter"} {
			if code, body := s.adminDo("POST", "/"+id+"/restart", nil); code != http.StatusOK {
				t.Fatalf("round %d: POST /%s/restart = %d %s", i, id, code, body)
			}
			s.waitWord(id, "walled")
		}
	}
	round(0)
	round(1)
	sup, sb := s.tb.Process.Pid, s.sb.Process.Pid
	supAfter, sbAfter := openFDs(t, sup), openFDs(t, sb)
	const rounds = 20
	for i := 2; i < rounds+2; i++ {
		round(i)
	}
	// What a round holds goes once its walls and sessions have ended: a
	// moment after the last restart, not at once.
	var supNow, sbNow int
	deadline := time.Now().Add(15 * time.Second)
	for {
		supNow, sbNow = openFDs(t, sup), openFDs(t, sb)
		// Less than one descriptor for every two rounds: noise (a
		// keep-alive connection opened), not a leak of one a round.
		if supNow-supAfter < rounds/2 && sbNow-sbAfter < rounds/2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if supNow-supAfter >= rounds/2 {
		t.Errorf("the supervisor held %d descriptors after 2 rounds and %d after %d more", supAfter, supNow, rounds)
	}
	if sbNow-sbAfter >= rounds/2 {
		t.Errorf("the switchboard held %d descriptors after 2 rounds and %d after %d more", sbAfter, sbNow, rounds)
	}
	t.Logf("descriptors after 2 rounds and after %d more: supervisor %d → %d, switchboard %d → %d", rounds, supAfter, supNow, sbAfter, sbNow)
}

// mcpDelete ends an MCP session on vat id (DELETE /<vat>/mcp with its
// headers) and returns the status.
func (s *stack) mcpDelete(id string, headers ...string) int {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodDelete, "http://"+s.http+"/"+id+"/mcp", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
