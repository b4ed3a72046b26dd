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

// TestEntryHoldsNoDescriptorPerConnect: connects an app makes, allowed
// and refused, transparent (a plain connect()) and through the wall's
// proxy, leave its toybox-entry holding no more descriptors than after
// the first batch: the entry keeps a duplicate of every socket it put in
// place (to shut it on a revocation) and must let go of each once the
// app's copy is closed; a wall that lives for months would otherwise run
// out.
func TestEntryHoldsNoDescriptorPerConnect(t *testing.T) {
	s := newStack(t, stackOpts{handle: "local"})
	granted := helloServer(t, "hello")
	refused := helloServer(t, "refused")
	if st := s.mustInstall("nina", example(t, "netclient"), q("egress", fmt.Sprintf(`{"host":"127.0.0.1","port":%s}`, granted))); st["status"] != "walled" {
		t.Fatalf("status = %v; want walled", st)
	}
	s.waitEgress("nina", "transparent")
	const perBatch = 25
	// One batch: perBatch allowed and perBatch refused connects, each
	// closed at once, without the proxy (transparent) or through it.
	py := `import os, socket, sys, urllib.request
ok = bad = 0
for i in range(int(sys.argv[3])):
    for port in (sys.argv[1], sys.argv[2]):
        try:
            if os.environ.get("HTTP_PROXY"):
                urllib.request.urlopen("http://127.0.0.1:%s/" % port, timeout=20).read()
            else:
                socket.create_connection(("127.0.0.1", int(port)), timeout=20).close()
            ok += 1
        except Exception:
            bad += 1
print("ok", ok, "refused", bad)`
	want := fmt.Sprintf("ok %d refused %d", perBatch, perBatch)
	batch := func(proxy bool) {
		t.Helper()
		if r := s.runIn("nina", proxy, nil, "python3", "-c", py, granted, refused, fmt.Sprint(perBatch)); !strings.Contains(r.Out, want) {
			t.Fatalf("a batch of connects (proxy %v) = %+v; want %q", proxy, r, want)
		}
	}
	batch(false)
	batch(true)
	entry := wallEntry(t, s, "nina")
	after := openFDs(t, entry)
	const batches = 4
	for i := range batches {
		batch(i%2 == 0)
	}
	var now int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if now = openFDs(t, entry); now-after < perBatch/2 || time.Now().After(deadline) {
			break
		}
	}
	if now-after >= perBatch/2 {
		t.Errorf("toybox-entry held %d descriptors after 2 batches and %d after %d more (of %d connects each)", after, now, batches, 2*perBatch)
	}
	t.Logf("toybox-entry's descriptors after 2 batches and after %d more: %d → %d", batches, after, now)
}
