package grant

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/labels"
	"toybox/schema"
	"toybox/tests/testenv"
)

// records returns the JSON records of the log l whose msg is msg.
func records(t *testing.T, l *testenv.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(l.String(), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %.80q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestRefusalRecordsAreBounded: what the supervisor keeps and logs of a
// vat's egress decisions is bounded, whatever the vat asks for. A scheme
// or URL of a megabyte is refused in words that do not carry it, and a
// flood of refusals is logged at a rate, the next record counting those
// that were not.
func TestRefusalRecordsAreBounded(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	port := echoServer(t)
	var logs testenv.Buffer
	var mu sync.Mutex
	var got []Decision
	v, _ := newVatWith(t, sock, VatConfig{
		ID: "mallory", Grants: []labels.Set{{Host: "127.0.0.1", Port: port}},
		Logger:     slog.New(slog.NewJSONHandler(&logs, nil)),
		OnDecision: func(d Decision) { mu.Lock(); got = append(got, d); mu.Unlock() },
	})
	vc, _ := vatClient(t, v)
	h := egress(t, vc)
	ctx := context.Background()

	huge := strings.Repeat("x", 1<<20)
	target := func(p interface {
		NewTarget() (schema.Target, error)
	},
	) error {
		tg, err := p.NewTarget()
		if err != nil {
			return err
		}
		_ = tg.SetScheme(huge)
		_ = tg.SetHost("127.0.0.1")
		tg.SetPort(port)
		return nil
	}
	const calls = 4
	for range calls {
		fut, release := h.Connect(ctx, func(p schema.Handle_connect_Params) error { return target(p) })
		if _, err := fut.Struct(); err == nil || len(err.Error()) > 1024 {
			t.Errorf("connect with a scheme of 1 MiB: error of %d bytes (%v); want a refusal of at most 1 KiB", len(errText(err)), err == nil)
		}
		release()
		cfut, crelease := h.Check(ctx, func(p schema.Handle_check_Params) error { return target(p) })
		if _, err := cfut.Struct(); err != nil {
			t.Fatalf("check: %v", err)
		}
		crelease()
		rfut, rrelease := h.Request(ctx, func(p schema.Handle_request_Params) error {
			_ = p.SetMethod("GET")
			return p.SetUrl(huge + "://127.0.0.1/")
		})
		_, _ = rfut.Struct()
		rrelease()
	}
	mu.Lock()
	kept := 0
	for _, d := range got {
		if n := len(d.TargetText()) + len(d.Reason); n > 1024 {
			t.Errorf("a %s decision keeps %d bytes (target %.40q, reason %.60q); want at most 1 KiB", d.Op, n, d.TargetText(), d.Reason)
		}
		kept += len(d.TargetText()) + len(d.Reason)
	}
	n := len(got)
	mu.Unlock()
	if n < 2*calls {
		t.Fatalf("%d decisions reported; want at least %d", n, 2*calls)
	}
	if r, ok := v.LastRefusal(); ok && len(r.Target)+len(r.Reason) > 1024 {
		t.Errorf("the last refusal keeps %d bytes; want at most 1 KiB", len(r.Target)+len(r.Reason))
	}
	if l := len(logs.String()); l > 64<<10 {
		t.Errorf("%d calls naming 1 MiB each wrote %d bytes of log; want at most 64 KiB", 3*calls, l)
	}
	t.Logf("%d decisions keep %d bytes; %d bytes of log", n, kept, len(logs.String()))
}

// TestRefusalFloodIsLoggedAtARate: a vat that loops on refused calls
// writes at most refusalLogBurst records and then refusalLogRate a
// second; the next record says how many went unlogged.
func TestRefusalFloodIsLoggedAtARate(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	port := echoServer(t)
	var logs testenv.Buffer
	v, _ := newVatWith(t, sock, VatConfig{
		ID: "mallory", Grants: []labels.Set{{Host: "127.0.0.1", Port: port}},
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	vc, cli := vatClient(t, v)
	h := egress(t, vc)
	const calls = 2000
	start := time.Now()
	for range calls {
		if _, err := connectFD(context.Background(), h, cli, "127.0.0.2", port); err == nil {
			t.Fatal("connect to 127.0.0.2 admitted; want refused")
		}
	}
	elapsed := time.Since(start)
	recs := records(t, &logs, decisionMsg)
	if limit := refusalLogBurst + int(elapsed.Seconds()*refusalLogRate) + 1; len(recs) > limit {
		t.Fatalf("%d refused calls in %v made %d records; want at most %d", calls, elapsed, len(recs), limit)
	}
	// A token comes back: the next refusal is logged with the count.
	time.Sleep(2 * time.Second / refusalLogRate)
	if _, err := connectFD(context.Background(), h, cli, "127.0.0.2", port); err == nil {
		t.Fatal("connect to 127.0.0.2 admitted; want refused")
	}
	recs = records(t, &logs, decisionMsg)
	total := 0
	for _, r := range recs {
		total++
		if u, ok := r[keyUnlogged].(float64); ok {
			total += int(u)
		}
	}
	if total != calls+1 {
		t.Fatalf("%d records and their unlogged counts account for %d refusals; want %d", len(recs), total, calls+1)
	}
	t.Logf("%d refused calls in %v: %d records", calls+1, elapsed, len(recs))
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestRefusalRecordsQuoteNoControls: a vat's scheme is its own bytes, up
// to maxSchemeBytes. One that is no URL scheme (an escape sequence, a
// bidi override) is refused in words that do not quote it: the last
// refusal (the status page, GET /<vat>) and the decisions hold none of it.
func TestRefusalRecordsQuoteNoControls(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sb.sock")
	startSwitchboard(t, sock)
	port := echoServer(t)
	var mu sync.Mutex
	var got []Decision
	v, _ := newVatWith(t, sock, VatConfig{
		ID: "mallory", Grants: []labels.Set{{Host: "127.0.0.1", Port: port}},
		OnDecision: func(d Decision) { mu.Lock(); got = append(got, d); mu.Unlock() },
	})
	vc, _ := vatClient(t, v)
	h := egress(t, vc)
	bad := func(s string) bool {
		return strings.ContainsAny(s, "\x1b\x07\r\n\u202e")
	}
	for _, scheme := range []string{"\x1b]52;c;aGk=\x07", "tcp\u202e", "h\rttp"} {
		fut, release := h.Connect(context.Background(), func(p schema.Handle_connect_Params) error {
			tg, err := p.NewTarget()
			if err != nil {
				return err
			}
			_ = tg.SetScheme(scheme)
			_ = tg.SetHost("127.0.0.1")
			tg.SetPort(port)
			return nil
		})
		_, err := fut.Struct()
		release()
		if err == nil || bad(err.Error()) {
			t.Errorf("connect with scheme %q: %v; want a refusal that does not quote it", scheme, err)
		}
		if r, ok := v.LastRefusal(); ok && (bad(r.Target) || bad(r.Reason)) {
			t.Errorf("connect with scheme %q: the last refusal is %q: %q", scheme, r.Target, r.Reason)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range got {
		if bad(d.TargetText()) || bad(d.Reason) {
			t.Errorf("a %s decision keeps %q: %q", d.Op, d.TargetText(), d.Reason)
		}
	}
}
