package doors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"
	rpccp "capnproto.org/go/capnp/v3/std/capnp/rpc"

	"toybox/schema"
	"toybox/schema/wire"
	"toybox/tests/testenv"
)

// socketPair returns a connected unix stream pair as files.
func socketPair(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	fds, err := testenv.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fds[0]), "supervisor-end"), os.NewFile(uintptr(fds[1]), "vat-end")
}

// serveDoors serves a new reference to gr's DoorSet as the bootstrap
// capability of a fresh connection, the way the supervisor serves a vat's fd
// 3, and returns the vat's end for a child process.
func serveDoors(t *testing.T, gr *Granted) *os.File {
	t.Helper()
	ours, theirs := socketPair(t)
	conn, err := wire.FromFile(ours, false)
	if err != nil {
		t.Fatal(err)
	}
	rc := conn.RPC(capnp.Client(gr.DoorSet()), nil)
	t.Cleanup(func() {
		_ = rc.Close()
		<-rc.Done()
	})
	return theirs
}

// syncBuffer is a log sink shared by the rpc goroutines and the test.
type syncBuffer struct{ testenv.Buffer }

// records returns the JSON log records with the given message.
func (b *syncBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// fixture starts the example backend on a unix socket and returns a table
// whose sets it serves.
func fixture(t *testing.T) (*Table, string) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "kiosk-doors.sock")
	startBackend(t, "unix:"+sock)
	tab, err := ParseTable([]byte(fmt.Sprintf(`{"sets": {
		"kiosk": {"firstParty": true, "backend": "unix:%[1]s",
			"entries": ["GET /kiosk/state", "POST /kiosk/state", "GET /bulk/1000", "GET /bulk/100000", "GET /slow/5000"]},
		"browser": {"firstParty": true, "backend": "unix:%[1]s", "entries": ["POST /browser/restart"]},
		"stranger": {"firstParty": false, "backend": "unix:%[1]s", "entries": ["GET /kiosk/state"]}
	}}`, sock)))
	if err != nil {
		t.Fatal(err)
	}
	tab.Limits = Limits{MaxRequestBody: 4096, MaxResponseBody: 10000, Timeout: 700 * time.Millisecond}
	return tab, sock
}

type backendAnswer struct {
	State    string `json:"state"`
	Restarts int    `json:"restarts"`
	Request  struct {
		Method     string              `json:"method"`
		RequestURI string              `json:"requestURI"`
		Host       string              `json:"host"`
		Vat        string              `json:"vat"`
		Headers    map[string][]string `json:"headers"`
		Body       string              `json:"body"`
	} `json:"request"`
}

func decodeAnswer(t *testing.T, r reply) backendAnswer {
	t.Helper()
	if r.Err != "" {
		t.Fatalf("call failed: %s", r.Err)
	}
	var a backendAnswer
	if err := json.Unmarshal([]byte(r.Body), &a); err != nil {
		t.Fatalf("backend answer %q: %v", r.Body, err)
	}
	return a
}

// TestDoorCalls serves a vat's DoorSet over a real unix socket to a vat in
// another process, backed by the real example backend, and checks what is
// answered and what is refused, and that each call is one log record.
func TestDoorCalls(t *testing.T) {
	tab, _ := fixture(t)
	var logs syncBuffer
	gr := tab.Grant("kiosk", slog.New(slog.NewJSONHandler(&logs, nil)))
	defer gr.Revoke()
	vat := startHelper(t, "vat", serveDoors(t, gr))

	if got, want := strings.Join(gr.Names(), ","), "GET /kiosk/state,POST /kiosk/state,GET /bulk/1000,GET /bulk/100000,GET /slow/5000"; got != want {
		t.Errorf("Names() = %s; want %s", got, want)
	}
	r := vat.do(command{Op: "list"})
	if got, want := strings.Join(r.Entries, ","), strings.Join(gr.Names(), ","); r.Err != "" || got != want {
		t.Fatalf("list = %q, %q; want %q", got, r.Err, want)
	}
	if r := vat.do(command{Op: "all", As: "all"}); r.Err != "" {
		t.Fatalf("all: %s", r.Err)
	}

	t.Run("the backend's answer arrives", func(t *testing.T) {
		r := vat.do(command{Op: "call", Door: "all", Method: "POST", Path: "/kiosk/state", Body: "showing-clock"})
		if r.Status != 200 {
			t.Fatalf("POST status = %d (%s); want 200", r.Status, r.Err)
		}
		a := decodeAnswer(t, vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/kiosk/state"}))
		if a.State != "showing-clock" {
			t.Errorf("state = %q; want showing-clock", a.State)
		}
		if a.Request.Vat != "kiosk" || a.Request.RequestURI != "/kiosk/state" || a.Request.Method != "GET" {
			t.Errorf("backend saw vat %q %s %s; want kiosk GET /kiosk/state", a.Request.Vat, a.Request.Method, a.Request.RequestURI)
		}
	})

	t.Run("headers are filtered", func(t *testing.T) {
		r := vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/kiosk/state", Headers: [][2]string{
			{"Host", "admin.internal"},
			{"X-Toybox-Vat", "browser"},
			{"Connection", "X-Secret"},
			{"X-Secret", "named by Connection: hop-by-hop"},
			{"Upgrade", "websocket"},
			{"X-Forwarded-For", "10.0.0.1"},
			{"X-HTTP-Method-Override", "DELETE"},
			{"X-HTTP-Method", "DELETE"},
			{"X-Method-Override", "DELETE"},
			{"X-Original-Method", "POST"},
			{"X-Original-URL", "/browser/restart"},
			{"X-Rewrite-URL", "/browser/restart"},
			// The same names with underscores: a CGI or WSGI backend
			// reads them as the dashed ones.
			{"X_Toybox_Vat", "admin"},
			{"X_Forwarded_For", "10.0.0.1"},
			{"X_HTTP_Method_Override", "DELETE"},
			{"X_Original_URL", "/browser/restart"},
			// And with other characters PHP and others read as '_'.
			{"X.Toybox.Vat", "admin"},
			{"X-Toybox.Vat", "admin"},
			{"X.Forwarded.For", "10.0.0.1"},
			{"X.HTTP.Method.Override", "DELETE"},
			{"X!Original~URL", "/browser/restart"},
			// Identity an authenticating proxy or a CDN would set.
			{"Remote-User", "admin"},
			{"X-Remote-User", "admin"},
			{"True-Client-IP", "10.0.0.1"},
			{"CF-Connecting-IP", "10.0.0.1"},
			{"X-Auth-Request-Email", "admin@example.org"},
			{"Accept", "application/json"},
		}})
		a := decodeAnswer(t, r)
		if a.Request.Host != "localhost" {
			t.Errorf("backend saw Host %q; want localhost", a.Request.Host)
		}
		if a.Request.Vat != "kiosk" {
			t.Errorf("backend saw X-Toybox-Vat %q; want kiosk", a.Request.Vat)
		}
		h := a.Request.Headers
		for _, k := range []string{"Connection", "X-Secret", "Upgrade", "X-Forwarded-For", "X-Http-Method-Override", "X-Http-Method", "X-Method-Override", "X-Original-Method", "X-Original-Url", "X-Rewrite-Url", "Remote-User", "X-Remote-User", "True-Client-Ip", "Cf-Connecting-Ip", "X-Auth-Request-Email"} {
			if _, ok := h[k]; ok {
				t.Errorf("backend saw %s: %v; want it dropped", k, h[k])
			}
		}
		for k, v := range h {
			if strings.ContainsAny(k, "_.!~") {
				t.Errorf("backend saw %s: %v; want every name with a character other than a letter, digit or '-' dropped", k, v)
			}
		}
		if got := strings.Join(h["Accept"], ","); got != "application/json" {
			t.Errorf("backend saw Accept %q; want application/json", got)
		}
		var sawBackendHeader bool
		for _, kv := range r.Headers {
			if kv[0] == "X-Door-Backend" && kv[1] == "example" {
				sawBackendHeader = true
			}
		}
		if !sawBackendHeader {
			t.Errorf("answer headers %v lack X-Door-Backend: example", r.Headers)
		}
	})

	refused := []struct {
		name, method, path, want string
	}{
		{"another vat's path", "POST", "/browser/restart", "door refused: POST /browser/restart is not one of this door's entries"},
		{"outside the set", "DELETE", "/kiosk/state", "not one of this door's entries"},
		{"trailing slash", "GET", "/kiosk/state/", "not one of this door's entries"},
		{"dot-dot", "GET", "/kiosk/../browser/restart", "door refused: the path has a '..' segment"},
		{"dot-dot at the end", "GET", "/kiosk/state/..", "'..' segment"},
		{"dot", "GET", "/kiosk/./state", "'.' segment"},
		{"double slash", "GET", "//kiosk/state", "door refused: the path has an empty segment ('//')"},
		{"inner double slash", "GET", "/kiosk//state", "('//')"},
		{"encoded dot", "GET", "/kiosk/%2e%2e/state", "door refused: the path has a percent sign"},
		{"encoded slash", "GET", "/kiosk%2fstate", "percent sign"},
		{"query", "GET", "/kiosk/state?x=1", "door refused: the path has a query"},
		{"empty query", "GET", "/kiosk/state?", "query"},
		{"fragment", "GET", "/kiosk/state#top", "fragment"},
		{"backslash", "GET", "/kiosk\\state", "backslash"},
		{"CRLF", "GET", "/kiosk/state\r\nX-Evil: 1", "control character"},
		{"NUL", "GET", "/kiosk/state\x00", "control character"},
		{"space", "GET", "/kiosk/state HTTP/1.1", "character ' '"},
		{"no leading slash", "GET", "kiosk/state", "does not start with a slash"},
		{"absolute URL", "GET", "http://127.0.0.1/kiosk/state", "does not start with a slash"},
		{"empty path", "GET", "", "the path is empty"},
		{"lower-case method", "get", "/kiosk/state", "method \"get\" is not one a door accepts"},
		{"CONNECT", "CONNECT", "/kiosk/state", "is not one a door accepts"},
		{"non-ASCII", "GET", "/kiosk/stäte", "non-ASCII"},
	}
	for _, tt := range refused {
		t.Run("refused/"+tt.name, func(t *testing.T) {
			r := vat.do(command{Op: "call", Door: "all", Method: tt.method, Path: tt.path})
			if !strings.Contains(r.Err, tt.want) {
				t.Errorf("call(%q, %q) error = %q (status %d); want it to contain %q", tt.method, tt.path, r.Err, r.Status, tt.want)
			}
		})
	}

	t.Run("get narrows to one entry", func(t *testing.T) {
		if r := vat.do(command{Op: "get", Name: "GET /kiosk/state", As: "one"}); r.Err != "" {
			t.Fatalf("get: %s", r.Err)
		}
		r := vat.do(command{Op: "list", Door: "one"})
		if got := strings.Join(r.Entries, ","); got != "GET /kiosk/state" {
			t.Errorf("narrowed entries = %q; want GET /kiosk/state", got)
		}
		if a := decodeAnswer(t, vat.do(command{Op: "call", Door: "one", Method: "GET", Path: "/kiosk/state"})); a.Request.RequestURI != "/kiosk/state" {
			t.Errorf("narrowed call reached %q", a.Request.RequestURI)
		}
		r = vat.do(command{Op: "call", Door: "one", Method: "POST", Path: "/kiosk/state", Body: "x"})
		if want := "door refused: POST /kiosk/state is not one of this door's entries (GET /kiosk/state)"; !strings.Contains(r.Err, want) {
			t.Errorf("narrowed POST error = %q; want %q", r.Err, want)
		}
	})

	t.Run("get of another vat's entry", func(t *testing.T) {
		r := vat.do(command{Op: "get", Name: "POST /browser/restart", As: "x"})
		if want := "door refused: vat kiosk has no door \"POST /browser/restart\""; !strings.Contains(r.Err, want) {
			t.Errorf("get error = %q; want %q", r.Err, want)
		}
	})

	t.Run("bounds", func(t *testing.T) {
		r := vat.do(command{Op: "call", Door: "all", Method: "POST", Path: "/kiosk/state", Body: strings.Repeat("a", 5000)})
		if want := "door refused: the request body is 5000 bytes; at most 4096"; !strings.Contains(r.Err, want) {
			t.Errorf("big body error = %q; want %q", r.Err, want)
		}
		if r := vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/bulk/1000"}); r.Err != "" || len(r.Body) != 1000 {
			t.Errorf("bulk/1000 = %d bytes, %q; want 1000 bytes", len(r.Body), r.Err)
		}
		r = vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/bulk/100000"})
		if want := "door failed: the backend's answer is larger than 10000 bytes"; !strings.Contains(r.Err, want) {
			t.Errorf("big answer error = %q; want %q", r.Err, want)
		}
		start := time.Now()
		r = vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/slow/5000"})
		if want := "door failed: the backend did not answer within 700ms"; !strings.Contains(r.Err, want) {
			t.Errorf("slow error = %q; want %q", r.Err, want)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("slow call took %v; want about 700ms", d)
		}
	})

	t.Run("one log record per call", func(t *testing.T) {
		recs := logs.records(t, "door call")
		// 2 + 1 + len(refused) + 2 + 2 + 4 calls reached the supervisor.
		if want := 2 + 1 + len(refused) + 2 + 4; len(recs) != want {
			t.Errorf("%d door call records; want %d", len(recs), want)
		}
		for _, rec := range recs {
			for _, k := range []string{keyVat, keyDoor, keyMethod, keyPath, keyStatus, keyDurationMS, keyReason} {
				if _, ok := rec[k]; !ok {
					t.Errorf("record %v has no %q", rec, k)
				}
			}
			if rec[keyVat] != "kiosk" {
				t.Errorf("record vat = %v; want kiosk", rec[keyVat])
			}
			reason, _ := rec[keyReason].(string)
			status, _ := rec[keyStatus].(float64)
			if (reason == "") != (status == 200) {
				t.Errorf("record status %v with reason %q: want a reason exactly when not 200", status, reason)
			}
		}
		var sawRefusal bool
		for _, rec := range recs {
			if rec[keyPath] == "/kiosk/%2e%2e/state" && strings.HasPrefix(rec[keyReason].(string), "door refused: the path has a percent sign") && rec[keyDoor] == "all" {
				sawRefusal = true
			}
		}
		if !sawRefusal {
			t.Errorf("no record of the refused %%2e call with its reason")
		}
	})
}

// TestRevoke leaks a narrowed Door from the vat to a helper process, revokes
// the grant, and checks that the helper's Door, the vat's DoorSet and every
// Door from it fail with the reason, while a fresh grant works.
func TestRevoke(t *testing.T) {
	tab, _ := fixture(t)
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	gr := tab.Grant("kiosk", logger)
	defer gr.Revoke()

	toVat, toHelper := socketPair(t)
	vat := startHelper(t, "vat", serveDoors(t, gr), toVat)
	if r := vat.do(command{Op: "get", Name: "GET /kiosk/state", As: "k"}); r.Err != "" {
		t.Fatalf("get: %s", r.Err)
	}
	if r := vat.do(command{Op: "all", As: "all"}); r.Err != "" {
		t.Fatalf("all: %s", r.Err)
	}
	if r := vat.do(command{Op: "leak", Door: "k"}); r.Err != "" {
		t.Fatalf("leak: %s", r.Err)
	}
	helper := startHelper(t, "helper", toHelper)
	if a := decodeAnswer(t, helper.do(command{Op: "call", Door: "root", Method: "GET", Path: "/kiosk/state"})); a.Request.Vat != "kiosk" {
		t.Fatalf("leaked door reached the backend as %q; want kiosk", a.Request.Vat)
	}

	gr.RevokeBecause("deleted")
	if !gr.Revoked() {
		t.Errorf("Revoked() = false after RevokeBecause")
	}
	want := "door revoked: vat kiosk deleted"
	checks := []struct {
		name string
		p    *proc
		c    command
	}{
		{"leaked door in the helper", helper, command{Op: "call", Door: "root", Method: "GET", Path: "/kiosk/state"}},
		{"leaked door's entries", helper, command{Op: "list", Door: "root"}},
		{"vat's narrowed door", vat, command{Op: "call", Door: "k", Method: "GET", Path: "/kiosk/state"}},
		{"vat's whole door", vat, command{Op: "call", Door: "all", Method: "POST", Path: "/kiosk/state", Body: "x"}},
		{"vat's set list", vat, command{Op: "list"}},
		{"vat's set get", vat, command{Op: "get", Name: "GET /kiosk/state", As: "k2"}},
		{"vat's set all", vat, command{Op: "all", As: "all2"}},
	}
	for _, tt := range checks {
		t.Run(tt.name, func(t *testing.T) {
			if r := tt.p.do(tt.c); !strings.Contains(r.Err, want) {
				t.Errorf("after revoke: %+v = %+v; want error %q", tt.c, r, want)
			}
		})
	}
	gr.Revoke() // idempotent: the first reason stays
	if r := helper.do(command{Op: "call", Door: "root", Method: "GET", Path: "/kiosk/state"}); !strings.Contains(r.Err, want) {
		t.Errorf("after second revoke: %q; want %q", r.Err, want)
	}

	t.Run("a fresh grant works", func(t *testing.T) {
		gr2 := tab.Grant("kiosk", logger)
		defer gr2.Revoke()
		vat2 := startHelper(t, "vat", serveDoors(t, gr2))
		if r := vat2.do(command{Op: "all", As: "all"}); r.Err != "" {
			t.Fatalf("all: %s", r.Err)
		}
		if a := decodeAnswer(t, vat2.do(command{Op: "call", Door: "all", Method: "GET", Path: "/kiosk/state"})); a.Request.Vat != "kiosk" {
			t.Errorf("fresh grant reached the backend as %q", a.Request.Vat)
		}
		if r := helper.do(command{Op: "call", Door: "root", Method: "GET", Path: "/kiosk/state"}); !strings.Contains(r.Err, want) {
			t.Errorf("old leaked door after a fresh grant: %q; want %q", r.Err, want)
		}
	})

	// gr revoked once (deleted; the second Revoke is a no-op), gr2 once (stopped).
	if recs := logs.records(t, "doors revoked"); len(recs) != 2 || recs[0][keyReason] != "deleted" || recs[1][keyReason] != "stopped" {
		t.Errorf("revoke records = %v; want deleted, then stopped", recs)
	}
}

// TestNoDoorsForStrangers: a vat that is not first-party, or not in the
// table, gets an empty set even if something asks Grant for it.
func TestNoDoorsForStrangers(t *testing.T) {
	tab, _ := fixture(t)
	for _, id := range []string{"stranger", "nobody"} {
		t.Run(id, func(t *testing.T) {
			gr := tab.Grant(id, nil)
			defer gr.Revoke()
			if n := gr.Names(); len(n) != 0 {
				t.Errorf("Names() = %v; want none", n)
			}
			vat := startHelper(t, "vat", serveDoors(t, gr))
			if r := vat.do(command{Op: "list"}); r.Err != "" || len(r.Entries) != 0 {
				t.Errorf("list = %v, %q; want empty", r.Entries, r.Err)
			}
			if r := vat.do(command{Op: "all", As: "all"}); r.Err != "" {
				t.Fatalf("all: %s", r.Err)
			}
			r := vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/kiosk/state"})
			if want := "door refused: GET /kiosk/state is not one of this door's entries"; !strings.Contains(r.Err, want) {
				t.Errorf("call = %q; want %q", r.Err, want)
			}
		})
	}
}

// TestLoopbackBackend serves a set from a loopback HTTP backend, then stops
// the backend: the call fails with a reason, and the details stay in the log.
func TestLoopbackBackend(t *testing.T) {
	addr, stop := startBackend(t, "127.0.0.1:0")
	tab, err := ParseTable([]byte(`{"sets": {"kiosk": {"firstParty": true, "backend": "http://` + addr + `", "entries": ["GET /kiosk/state"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	gr := tab.Grant("kiosk", slog.New(slog.NewJSONHandler(&logs, nil)))
	defer gr.Revoke()
	vat := startHelper(t, "vat", serveDoors(t, gr))
	if r := vat.do(command{Op: "get", Name: "GET /kiosk/state", As: "k"}); r.Err != "" {
		t.Fatalf("get: %s", r.Err)
	}
	a := decodeAnswer(t, vat.do(command{Op: "call", Door: "k", Method: "GET", Path: "/kiosk/state", Headers: [][2]string{{"Host", "evil.example"}}}))
	if a.Request.Host != addr || a.Request.Vat != "kiosk" {
		t.Errorf("backend saw Host %q, vat %q; want %q, kiosk", a.Request.Host, a.Request.Vat, addr)
	}
	stop()
	r := vat.do(command{Op: "call", Door: "k", Method: "GET", Path: "/kiosk/state"})
	if want := "door failed: the backend is unreachable or broke off"; !strings.Contains(r.Err, want) {
		t.Errorf("call to a stopped backend = %+v; want %q", r, want)
	}
	if strings.Contains(r.Err, addr) {
		t.Errorf("the vat learns the backend's address: %q", r.Err)
	}
	recs := logs.records(t, "door call")
	if len(recs) != 2 || !strings.Contains(recs[1][keyReason].(string), "connection refused") {
		t.Errorf("records = %v; want the second to carry the dial error", recs)
	}
}

// TestInFlightBound: with one call in flight allowed, a second call while a
// slow one runs is refused at once, and the grant works again afterwards.
func TestInFlightBound(t *testing.T) {
	tab, _ := fixture(t)
	tab.Limits = Limits{MaxInFlight: 1, Timeout: 3 * time.Second}
	gr := tab.Grant("kiosk", nil)
	defer gr.Revoke()
	ds := gr.DoorSet()
	defer ds.Release()
	ctx := context.Background()
	af, releaseAll := ds.All(ctx, nil)
	defer releaseAll()
	door := af.Door()
	call := func(path string) (capnp.ReleaseFunc, error) {
		f, release := door.Call(ctx, func(p schema.Door_call_Params) error {
			if err := p.SetMethod("GET"); err != nil {
				return err
			}
			return p.SetPath(path)
		})
		_, err := f.Struct()
		return release, err
	}
	slowDone := make(chan error, 1)
	go func() {
		release, err := call("/slow/5000")
		release()
		slowDone <- err
	}()
	testenv.WaitFor(t, 30*time.Second, func() error {
		if len(gr.g.sem) == 0 {
			return errors.New("the slow call never took its place in flight")
		}
		return nil
	})
	release, err := call("/kiosk/state")
	release()
	if want := "door refused: 1 calls of vat kiosk are already in flight"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("second call = %v; want %q", err, want)
	}
	if err := <-slowDone; err == nil || !strings.Contains(err.Error(), "did not answer within 3s") {
		t.Errorf("slow call = %v; want the timeout", err)
	}
	release, err = call("/kiosk/state")
	release()
	if err != nil {
		t.Errorf("call after the slow one = %v; want it answered", err)
	}
}

// allDoorsLogged grants kiosk its doors from tab, logged as JSON to the
// buffer it returns, and starts a vat process holding the whole set as
// "all". The caller revokes the grant.
func allDoorsLogged(t *testing.T, tab *Table) (*Granted, *syncBuffer, *proc) {
	t.Helper()
	logs := &syncBuffer{}
	gr := tab.Grant("kiosk", slog.New(slog.NewJSONHandler(logs, nil)))
	vat := startHelper(t, "vat", serveDoors(t, gr))
	if r := vat.do(command{Op: "all", As: "all"}); r.Err != "" {
		t.Fatalf("all: %s", r.Err)
	}
	return gr, logs, vat
}

// TestRefusedCallsLogBounded: a vat looping on refused calls gets at most
// the burst and the rate of records; every refused call is still accounted
// for, by its own record or by the "unlogged" count of the next one (or of
// the revocation record); a call that reaches the backend is logged against
// its own count, which the refusals did not spend. A long path is clipped in the reason too.
func TestRefusedCallsLogBounded(t *testing.T) {
	tab, _ := fixture(t)
	gr, logs, vat := allDoorsLogged(t, tab)
	long := "/" + strings.Repeat("a", 1020)
	const calls = 3 * refusalLogBurst
	start := time.Now()
	for range calls {
		if r := vat.do(command{Op: "call", Door: "all", Method: "POST", Path: long}); !strings.Contains(r.Err, "door refused") {
			t.Fatalf("call = %+v; want a refusal", r)
		}
	}
	elapsed := time.Since(start)
	recs := logs.records(t, "door call")
	if limit := refusalLogBurst + int(elapsed.Seconds()*refusalLogRate) + 1; len(recs) > limit {
		t.Errorf("%d refused calls in %v made %d records; at most %d", calls, elapsed, len(recs), limit)
	}
	for _, r := range recs {
		if reason, _ := r[keyReason].(string); len(reason) > 600 {
			t.Fatalf("a record's reason is %d bytes: the path is not clipped", len(reason))
		}
	}
	// With the refusals' bucket empty, calls that reach the backend are
	// logged all the same (their own bucket is full), failed (an answer over the limit) or answered, and the
	// first says how many refusals went unlogged since the last record
	// (a token that came back during the loop logged a refusal, which
	// carried the count until then).
	made := calls
	refuse := func() {
		made++
		if r := vat.do(command{Op: "call", Door: "all", Method: "POST", Path: long}); !strings.Contains(r.Err, "door refused") {
			t.Fatalf("call = %+v; want a refusal", r)
		}
	}
	unaccounted := func() int {
		n := made
		for _, r := range logs.records(t, "door call") {
			n--
			if u, ok := r[keyUnlogged].(float64); ok {
				n -= int(u)
			}
		}
		return n
	}
	// The loop's last refusal may have been logged (slow, a token back):
	// then one more, at once, is not.
	for i := 0; unaccounted() == 0 && i < 10; i++ {
		refuse()
	}
	pending := unaccounted()
	before := len(logs.records(t, "door call"))
	if r := vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/bulk/100000"}); !strings.Contains(r.Err, "door failed") {
		t.Fatalf("bulk call = %+v; want a failure after the backend answered", r)
	}
	if r := vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/kiosk/state"}); r.Err != "" {
		t.Fatalf("state call = %+v", r)
	}
	recs = logs.records(t, "door call")
	if len(recs) != before+2 || recs[before][keyPath] != "/bulk/100000" || recs[before+1][keyPath] != "/kiosk/state" {
		t.Fatalf("records after the refusals: %d new (%v); want the failed and the answered call's", len(recs)-before, recs[before:])
	}
	if pending == 0 {
		t.Fatalf("%d refused calls were all logged: the bucket never emptied", made)
	}
	if n, _ := recs[before][keyUnlogged].(float64); int(n) != pending {
		t.Errorf("the first record after the burst counts %d unlogged refusals; want %d: %v", int(n), pending, recs[before])
	}
	time.Sleep(2 * time.Second / refusalLogRate) // a token back
	if r := vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/nope"}); !strings.Contains(r.Err, "door refused") {
		t.Fatalf("call = %+v; want a refusal", r)
	}
	gr.RevokeBecause("deleted")
	accounted := 0
	for _, r := range append(logs.records(t, "door call"), logs.records(t, "doors revoked")...) {
		if r["msg"] == "door call" {
			accounted++
		}
		if n, ok := r[keyUnlogged].(float64); ok {
			accounted += int(n)
		}
	}
	if accounted != made+3 {
		t.Errorf("records and unlogged counts account for %d calls; made %d", accounted, made+3)
	}
}

// TestAllowedCallsLogBounded: a vat looping on calls a quick backend
// answers gets at most the burst and the rate of records, not one a call
// (the supervisor's log is every vat's, and journald's rate limit for the
// unit drops all of it past its burst); every call is still accounted for,
// by its own record or by the "unlogged_allowed" count of a later one. A
// refusal after the storm is logged at once, and carries that count.
func TestAllowedCallsLogBounded(t *testing.T) {
	tab, _ := fixture(t)
	gr, logs, vat := allDoorsLogged(t, tab)
	const calls = 3 * allowedLogBurst
	start := time.Now()
	for range calls {
		if r := vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/kiosk/state"}); r.Err != "" {
			t.Fatalf("state call = %+v", r)
		}
	}
	elapsed := time.Since(start)
	recs := logs.records(t, "door call")
	if limit := allowedLogBurst + int(elapsed.Seconds()*allowedLogRate) + 1; len(recs) > limit {
		t.Errorf("%d answered calls in %v made %d records; at most %d", calls, elapsed, len(recs), limit)
	}
	// A refusal now has its own count: logged, with the answered calls
	// not logged since the last record.
	if r := vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/nope"}); !strings.Contains(r.Err, "door refused") {
		t.Fatalf("call = %+v; want a refusal", r)
	}
	after := logs.records(t, "door call")
	if len(after) != len(recs)+1 || after[len(recs)][keyPath] != "/nope" {
		t.Fatalf("the refusal after %d answered calls made %d records; want its own", calls, len(after)-len(recs))
	}
	// The answered calls with no record are counted by the records after
	// them: a later answered call's (the window refilled while the calls
	// ran) or, when none came, the refusal's. Either way, all of them by now.
	said := 0
	for _, r := range after {
		if n, ok := r[keyUnloggedAllowed].(float64); ok {
			said += int(n)
		}
	}
	if said != calls-len(recs) {
		t.Errorf("%d of %d answered calls have no record, but the records after them count %d: %v", calls-len(recs), calls, said, after[len(recs)])
	}
	gr.RevokeBecause("deleted")
	accounted := 0
	for _, r := range append(logs.records(t, "door call"), logs.records(t, "doors revoked")...) {
		if r["msg"] == "door call" {
			accounted++
		}
		for _, k := range []string{keyUnlogged, keyUnloggedAllowed} {
			if n, ok := r[k].(float64); ok {
				accounted += int(n)
			}
		}
	}
	if accounted != calls+1 {
		t.Errorf("records and unlogged counts account for %d calls; made %d", accounted, calls+1)
	}
}

// TestRevokeEndsCallsInFlight: a call the backend is still answering when
// the grant is revoked fails at once with the revocation, not with the
// backend's answer or its timeout, and frees its place in flight.
func TestRevokeEndsCallsInFlight(t *testing.T) {
	tab, _ := fixture(t)
	tab.Limits = Limits{Timeout: 20 * time.Second}
	gr := tab.Grant("kiosk", nil)
	defer gr.Revoke()
	set := doorSetOverSocket(t, gr)
	ctx := context.Background()
	af, releaseAll := set.All(ctx, nil)
	defer releaseAll()
	door := af.Door()
	done := make(chan error, 1)
	go func() {
		f, release := door.Call(ctx, func(p schema.Door_call_Params) error {
			if err := p.SetMethod("GET"); err != nil {
				return err
			}
			return p.SetPath("/slow/5000")
		})
		_, err := f.Struct()
		release()
		done <- err
	}()
	testenv.WaitFor(t, 30*time.Second, func() error {
		if len(gr.g.sem) == 0 {
			return errors.New("the slow call never took its place in flight")
		}
		return nil
	})
	start := time.Now()
	gr.RevokeBecause("stopped")
	select {
	case err := <-done:
		if want := "door revoked: vat kiosk stopped"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("call in flight at the revocation = %v; want %q", err, want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("the call in flight ended %v after the revocation; want at once", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight at the revocation did not end")
	}
	testenv.WaitFor(t, 5*time.Second, func() error {
		if n := len(gr.g.sem); n != 0 {
			return fmt.Errorf("%d places in flight still taken after the revocation", n)
		}
		return nil
	})
}

// doorSetOverSocket serves a new reference to gr's DoorSet over a real
// unix socket pair and returns the vat's end of it, in this process.
func doorSetOverSocket(t *testing.T, gr *Granted) schema.DoorSet {
	t.Helper()
	ours, theirs := socketPair(t)
	served, err := wire.FromFile(ours, false)
	if err != nil {
		t.Fatal(err)
	}
	src := served.RPC(capnp.Client(gr.DoorSet()), nil)
	vatConn, err := wire.FromFile(theirs, true)
	if err != nil {
		t.Fatal(err)
	}
	rc := vatConn.RPC(capnp.Client{}, nil)
	set := schema.DoorSet(rc.Bootstrap(context.Background()))
	t.Cleanup(func() {
		set.Release()
		_ = rc.Close()
		_ = src.Close()
		<-src.Done()
	})
	return set
}

// lateConn notes each write made while *after is set.
type lateConn struct {
	net.Conn
	after *atomic.Bool
	late  *atomic.Int64
}

func (c lateConn) Write(p []byte) (int, error) {
	if c.after.Load() {
		c.late.Add(1)
	}
	return c.Conn.Write(p)
}

// TestNoCallAfterRevoke: once RevokeBecause returns, nothing more of the
// grant's calls is written to the backend, not even of calls admitted
// just before it. Eight callers race the revocation, round after round,
// and every write to the backend after RevokeBecause returned is counted.
func TestNoCallAfterRevoke(t *testing.T) {
	tab, _ := fixture(t)
	ctx := context.Background()
	const rounds, callers = 40, 8
	var revoked atomic.Bool
	var late, answered atomic.Int64
	for range rounds {
		revoked.Store(false)
		gr := tab.Grant("kiosk", nil)
		dial := gr.g.tr.DialContext
		gr.g.tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return lateConn{Conn: c, after: &revoked, late: &late}, nil
		}
		set := doorSetOverSocket(t, gr)
		af, releaseAll := set.All(ctx, nil)
		door := af.Door()
		var wg sync.WaitGroup
		var started atomic.Int64
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					started.Add(1)
					f, release := door.Call(ctx, func(p schema.Door_call_Params) error {
						if err := p.SetMethod("GET"); err != nil {
							return err
						}
						return p.SetPath("/kiosk/state")
					})
					_, err := f.Struct()
					release()
					if err == nil {
						answered.Add(1)
					} else if strings.Contains(err.Error(), "door revoked") {
						return
					}
				}
			}()
		}
		for started.Load() < 4*callers {
			time.Sleep(100 * time.Microsecond)
		}
		gr.RevokeBecause("stopped")
		revoked.Store(true)
		wg.Wait()
		releaseAll()
	}
	if answered.Load() == 0 {
		t.Fatal("no call was answered: the race was never run")
	}
	if n := late.Load(); n > 0 {
		t.Errorf("%d writes to the backend after RevokeBecause returned; want none", n)
	}
}

// rawMsg builds one Cap'n Proto RPC message.
func rawMsg(t *testing.T, fill func(rpccp.Message) error) *capnp.Message {
	t.Helper()
	msg, seg, err := capnp.NewMessage(capnp.SingleSegment(nil))
	if err != nil {
		t.Fatal(err)
	}
	m, err := rpccp.NewRootMessage(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := fill(m); err != nil {
		t.Fatal(err)
	}
	return msg
}

// forgedDoorCall is question q: Door.call("GET", "/kiosk/state") on a
// target the caller was never given.
func forgedDoorCall(t *testing.T, q uint32, target func(rpccp.MessageTarget)) *capnp.Message {
	return rawMsg(t, func(m rpccp.Message) error {
		c, err := m.NewCall()
		if err != nil {
			return err
		}
		c.SetQuestionId(q)
		c.SetInterfaceId(schema.Door_TypeID)
		c.SetMethodId(1)
		tg, err := c.NewTarget()
		if err != nil {
			return err
		}
		target(tg)
		p, err := c.NewParams()
		if err != nil {
			return err
		}
		args, err := schema.NewDoor_call_Params(p.Segment())
		if err != nil {
			return err
		}
		if err := args.SetMethod("GET"); err != nil {
			return err
		}
		if err := args.SetPath("/kiosk/state"); err != nil {
			return err
		}
		return p.SetContent(args.ToPtr())
	})
}

// TestForgedDoorIDs: a vat with no doors, speaking raw Cap'n Proto on its
// connection, guesses the ids under which another vat's connection holds
// Doors: imported capabilities 0 to 63, and the answer to a question it
// never asked. Capability ids are the connection's own: a guess reaches
// at most the guesser's own DoorSet (answered with an exception, it is no
// Door), and the first unknown id ends the guesser's connection. Nothing
// reaches either grant's doors, and the other vat's Doors still work.
func TestForgedDoorIDs(t *testing.T) {
	tab, _ := fixture(t)
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	kiosk := tab.Grant("kiosk", logger)
	defer kiosk.Revoke()
	set := doorSetOverSocket(t, kiosk)
	ctx := context.Background()
	af, releaseAll := set.All(ctx, nil)
	defer releaseAll()
	gf, releaseGet := set.Get(ctx, func(p schema.DoorSet_get_Params) error { return p.SetName("GET /kiosk/state") })
	defer releaseGet()
	if _, err := gf.Struct(); err != nil {
		t.Fatal(err)
	}

	nobody := tab.Grant("nobody", logger)
	defer nobody.Revoke()
	// guess opens a raw connection whose bootstrap is nobody's DoorSet,
	// asks for the bootstrap, then sends forged calls until one is not
	// answered with an exception, and returns why the connection ended.
	guess := func(t *testing.T, targets []func(rpccp.MessageTarget)) string {
		t.Helper()
		ours, theirs := socketPair(t)
		served, err := wire.FromFile(ours, false)
		if err != nil {
			t.Fatal(err)
		}
		src := served.RPC(capnp.Client(nobody.DoorSet()), nil)
		defer func() { _ = src.Close(); <-src.Done() }()
		nc, err := net.FileConn(theirs)
		if err != nil {
			t.Fatal(err)
		}
		_ = theirs.Close()
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
		enc, dec := capnp.NewEncoder(nc), capnp.NewDecoder(nc)
		// answer sends m and reads until its Return or an Abort.
		answer := func(m *capnp.Message) (rpccp.Message, bool) {
			if err := enc.Encode(m); err != nil {
				return rpccp.Message{}, false
			}
			for {
				msg, err := dec.Decode()
				if err != nil {
					return rpccp.Message{}, false
				}
				m, err := rpccp.ReadRootMessage(msg)
				if err == nil && (m.Which() == rpccp.Message_Which_return || m.Which() == rpccp.Message_Which_abort) {
					return m, true
				}
			}
		}
		if m, ok := answer(rawMsg(t, func(m rpccp.Message) error {
			b, err := m.NewBootstrap()
			b.SetQuestionId(0)
			return err
		})); !ok || m.Which() != rpccp.Message_Which_return {
			t.Fatal("no answer to the bootstrap")
		}
		for i, target := range targets {
			m, ok := answer(forgedDoorCall(t, uint32(i+1), target))
			if !ok {
				return "the connection ended"
			}
			if m.Which() == rpccp.Message_Which_abort {
				a, _ := m.Abort()
				why, _ := a.Reason()
				return why
			}
			if r, _ := m.Return(); r.Which() != rpccp.Return_Which_exception {
				t.Fatalf("forged call %d answered with %v; want an exception", i, r.Which())
			}
		}
		return ""
	}

	t.Run("imported capability ids", func(t *testing.T) {
		var targets []func(rpccp.MessageTarget)
		for id := uint32(0); id < 64; id++ {
			targets = append(targets, func(tg rpccp.MessageTarget) { tg.SetImportedCap(id) })
		}
		if why := guess(t, targets); !strings.Contains(why, "unknown export") {
			t.Errorf("guessing import ids 0-63 ended with %q; want the connection aborted for an unknown export", why)
		}
	})
	t.Run("answers never asked", func(t *testing.T) {
		targets := []func(rpccp.MessageTarget){func(tg rpccp.MessageTarget) {
			pa, err := tg.NewPromisedAnswer()
			if err != nil {
				t.Fatal(err)
			}
			pa.SetQuestionId(7)
		}}
		if why := guess(t, targets); !strings.Contains(why, "unknown or finished answer") {
			t.Errorf("a call on an answer never asked ended with %q; want the connection aborted", why)
		}
	})
	if recs := logs.records(t, "door call"); len(recs) != 0 {
		t.Errorf("forged ids reached a door: %v", recs)
	}
	cf, releaseCall := af.Door().Call(ctx, func(p schema.Door_call_Params) error {
		if err := p.SetMethod("GET"); err != nil {
			return err
		}
		return p.SetPath("/kiosk/state")
	})
	defer releaseCall()
	if res, err := cf.Struct(); err != nil || res.Status() != 200 {
		t.Errorf("kiosk's own door after the guesses: %v", err)
	}
}

// TestDoorCallHeaderBounds: a call's headers are bounded in number and in
// size, and each name and value must be one HTTP accepts; a call past any
// bound is refused, with the reason, before it reaches the backend.
func TestDoorCallHeaderBounds(t *testing.T) {
	tab, _ := fixture(t)
	gr := tab.Grant("kiosk", nil)
	defer gr.Revoke()
	vat := startHelper(t, "vat", serveDoors(t, gr))
	if r := vat.do(command{Op: "all", As: "all"}); r.Err != "" {
		t.Fatalf("all: %s", r.Err)
	}
	many := func(n int, value string) [][2]string {
		h := make([][2]string, n)
		for i := range h {
			h[i] = [2]string{fmt.Sprintf("X-H%d", i), value}
		}
		return h
	}
	tests := []struct {
		name    string
		headers [][2]string
		want    string // "" for answered
	}{
		{"64 headers", many(maxHeaders, "v"), ""},
		{"65 headers", many(maxHeaders+1, "v"), "door refused: 65 headers; at most 64"},
		{"64 KiB of headers", many(2, strings.Repeat("v", maxHeaderBytes/2)), "door refused: the headers are larger than 65536 bytes"},
		{"a name with a space", [][2]string{{"X Evil", "1"}}, "door refused: \"X Evil\" is not a valid header name"},
		{"a name with a colon", [][2]string{{"X-Evil:", "1"}}, "is not a valid header name"},
		{"an empty name", [][2]string{{"", "1"}}, "is not a valid header name"},
		{"CRLF in a value", [][2]string{{"X-A", "1\r\nX-Toybox-Vat: browser"}}, "door refused: header X-A has an invalid value"},
		{"NUL in a value", [][2]string{{"X-A", "1\x00"}}, "has an invalid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := vat.do(command{Op: "call", Door: "all", Method: "GET", Path: "/kiosk/state", Headers: tt.headers})
			if tt.want == "" {
				if a := decodeAnswer(t, r); a.Request.Vat != "kiosk" {
					t.Errorf("backend saw vat %q; want kiosk", a.Request.Vat)
				}
				return
			}
			if !strings.Contains(r.Err, tt.want) || r.Status != 0 {
				t.Errorf("call with %s = %d %q; want refused with %q", tt.name, r.Status, r.Err, tt.want)
			}
		})
	}
}
