package supervisor

import (
	"encoding/json"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// TestProxyFailuresAreRateLimited: every answer a vat broke off (or could
// not give) was one record of the supervisor's, and a broken-off body one
// more line on the standard logger, without the vat's name: a vat and its
// visitors made thousands a second, past journald's rate limit for the
// unit, which then drops the supervisor's other records. They are counted
// past a rate, per vat, and the next record says how many.
func TestProxyFailuresAreRateLimited(t *testing.T) {
	sock := appOnUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		if r.URL.Path == "/short" { // promises 100 bytes, sends 3
			fmt.Fprint(brw, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
			_ = brw.Flush()
		} // else: no answer at all
	}))
	var out testenv.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	var std testenv.Buffer
	stdlog.SetOutput(&std)
	defer stdlog.SetOutput(io.Discard) // as the test binary had it: nothing reads stderr
	tr := unixTransport(sock)
	defer tr.CloseIdleConnections()
	front := httptest.NewServer(newProxy("alice", tr, log))
	defer front.Close()

	const n = 400
	began := time.Now()
	for i := range n {
		p := "/alice/short"
		if i%2 == 1 {
			p = "/alice/none"
		}
		resp, err := http.Get(front.URL + p)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}
	if s := std.String(); s != "" {
		t.Errorf("the standard logger got lines: %.200q", s)
	}
	elapsed := time.Since(began)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if limit := proxyLogBurst + int(elapsed.Seconds()*proxyLogRate) + 1; len(lines) > limit || len(lines) >= n {
		t.Errorf("%d failed answers in %v made %d records; want at most the burst and the rate's (%d)", n, elapsed, len(lines), limit)
	}
	sawBody := false
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("record %q: %v", l, err)
		}
		if rec["vat"] != "alice" {
			t.Errorf("record without the vat: %s", l)
		}
		if strings.Contains(fmt.Sprint(rec["error"]), "body copy") {
			sawBody = true
		}
	}
	if !sawBody {
		t.Errorf("no record of a broken-off body among %d", len(lines))
	}
	// Past the rate, the next record that gets through says how many went
	// unlogged.
	pl := newProxyLog(log, "bob")
	for range proxyLogBurst + 50 {
		pl.warn("proxy to vat failed", "x")
	}
	time.Sleep(2 * time.Second / proxyLogRate) // a token back
	pl.warn("proxy to vat failed", "x")
	last := strings.TrimSpace(out.String())
	last = last[strings.LastIndex(last, "\n")+1:]
	if !strings.Contains(last, `"unlogged":50`) {
		t.Errorf("the record after 50 unlogged ones: %s; want \"unlogged\":50", last)
	}
	// When the instance ends, a count not yet written is.
	before := strings.Count(out.String(), "\n")
	for range 7 {
		pl.warn("proxy to vat failed", "x") // mostly past the rate
	}
	written := strings.Count(out.String(), "\n") - before
	pl.flush()
	last = strings.TrimSpace(out.String())
	last = last[strings.LastIndex(last, "\n")+1:]
	if want := fmt.Sprintf(`"unlogged":%d`, 7-written); written >= 7 || !strings.Contains(last, want) {
		t.Errorf("the record at the end, after 7 failures of which %d were written: %s; want %s", written, last, want)
	}
}
