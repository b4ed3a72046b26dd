//go:build linux

package tests

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"toybox/tests/testenv"
)

// doorsBuild returns the binaries the doors test runs: toybox and
// toybox-entry from TestMain's build, the door examples built here into dir.
func doorsBuild(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{
		"toybox":       filepath.Join(bins, "toybox"),
		"toybox-entry": filepath.Join(bins, "toybox-entry"),
	}
	for name, pkg := range map[string]string{
		"door-vat":     "toybox/examples/door-vat",
		"door-backend": "toybox/examples/door-backend",
	} {
		p := filepath.Join(dir, name)
		if b, err := exec.Command("go", "build", "-o", p, pkg).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, b)
		}
		out[name] = p
	}
	return out
}

// doorsLog collects a child's output.
type doorsLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *doorsLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records returns the JSON log records with message msg.
func (l *doorsLog) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func (l *doorsLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// doorsBackend starts the example backend and returns its address.
func doorsBackend(t *testing.T, bin, listen string) string {
	t.Helper()
	cmd := exec.Command(bin, "-listen", listen)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("door-backend: %q, %v", line, err)
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "ready "))
}

// unixClient is an HTTP client for a unix socket.
func unixClient(path string) *http.Client {
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}

func doorsDo(t *testing.T, c *http.Client, method, url string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// doorsBundle is a tar holding manifest.json and the door-vat binary.
func doorsBundle(t *testing.T, vatBin, manifest string) []byte {
	t.Helper()
	exe, err := os.ReadFile(vatBin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"manifest.json", 0o644, []byte(manifest)}, {"door-vat", 0o755, exe}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestDoorsEndToEnd runs toybox serve with a door table, installs the example
// door-vat walled, and checks that it reaches the backend only through its
// door, that the door refuses what is not its own, that installs naming
// doors they may not have are refused, and that the doors go away with the
// vat.
func TestDoorsEndToEnd(t *testing.T) {
	testenv.RequireBwrap(t)
	tmp := t.TempDir()
	// The vats' uid must be able to search the path to the state dir.
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	bins := doorsBuild(t, filepath.Join(tmp, "bin"))

	backendDir := filepath.Join(tmp, "backend")
	if err := os.Mkdir(backendDir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(backendDir, "kiosk.sock")
	doorsBackend(t, bins["door-backend"], "unix:"+sock)
	tcpAddr := doorsBackend(t, bins["door-backend"], "127.0.0.1:0") // not a door: only to try around the wall

	table := filepath.Join(tmp, "doors.json")
	if err := os.WriteFile(table, []byte(fmt.Sprintf(`{"sets": {
		"kiosk":    {"firstParty": true,  "backend": "unix:%[1]s", "entries": ["GET /kiosk/state", "POST /kiosk/state"]},
		"browser":  {"firstParty": true,  "backend": "unix:%[1]s", "entries": ["POST /browser/restart"]},
		"stranger": {"firstParty": false, "backend": "unix:%[1]s", "entries": ["GET /kiosk/state"]}
	}}`, sock)), 0o600); err != nil {
		t.Fatal(err)
	}

	admin, pub := filepath.Join(tmp, "admin.sock"), filepath.Join(tmp, "http.sock")
	var logs doorsLog
	var serve *exec.Cmd
	start := func() {
		t.Helper()
		serve = exec.Command(bins["toybox"], "serve", "--state", filepath.Join(tmp, "state"), "--admin", admin,
			"--http", "unix:"+pub, "--entry", bins["toybox-entry"], "--doors", table, "--stop-grace", "1s", "--uid-base", fmt.Sprint(testUIDBase))
		serve.Env = append(os.Environ(), "TOYBOX_WALLS=", "TOYBOX_WALLS_DEFAULT=walled")
		serve.Stdout, serve.Stderr = &logs, &logs
		if err := serve.Start(); err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			if c, err := net.Dial("unix", admin); err == nil {
				_ = c.Close()
				return
			}
			if i > 200 {
				t.Fatalf("toybox serve did not listen on %s\n%s", admin, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	stop := func() {
		if serve != nil && serve.ProcessState == nil {
			_ = serve.Process.Signal(os.Interrupt)
			_ = serve.Wait()
		}
	}
	start()
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("toybox serve said:\n%s", logs.String())
		}
	})
	ac, pc := unixClient(admin), unixClient(pub)

	t.Run("installs naming doors they may not have are refused", func(t *testing.T) {
		tests := []struct {
			id, doors, want string
		}{
			{"stranger", `["stranger"]`, "doors refused: vat stranger is not first-party"},
			{"newcomer", `["newcomer"]`, "the operator's door table has none for it"},
			{"newcomer", `["kiosk"]`, "doors refused: vat newcomer names the door set \"kiosk\", which is not its own"},
			{"browser", `["kiosk"]`, "which is not its own"},
		}
		for _, tt := range tests {
			t.Run(tt.id+tt.doors, func(t *testing.T) {
				b := doorsBundle(t, bins["door-vat"], `{"command": ["./door-vat"], "doors": `+tt.doors+`}`)
				code, body := doorsDo(t, ac, http.MethodPut, "http://admin/"+tt.id, b)
				var e struct {
					Error string `json:"error"`
				}
				_ = json.Unmarshal([]byte(body), &e)
				if code != http.StatusBadRequest || !strings.Contains(e.Error, tt.want) {
					t.Errorf("PUT /%s doors %s = %d %s; want 400 with %q", tt.id, tt.doors, code, body, tt.want)
				}
			})
		}
	})

	code, body := doorsDo(t, ac, http.MethodPut, "http://admin/kiosk", doorsBundle(t, bins["door-vat"], `{"command": ["./door-vat"], "doors": ["kiosk"]}`))
	if code != http.StatusCreated {
		t.Fatalf("PUT /kiosk = %d %s; want 201", code, body)
	}
	var st struct {
		Status string   `json:"status"`
		Tier   string   `json:"tier"`
		Doors  []string `json:"doors"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(st.Doors, ","); got != "GET /kiosk/state,POST /kiosk/state" {
		t.Errorf("status doors = %q; want GET /kiosk/state,POST /kiosk/state", got)
	}
	if st.Tier == "" {
		t.Fatalf("kiosk runs with no wall tier (status %q); the test needs it walled", st.Status)
	}

	t.Run("the walled vat calls its door through fd 3", func(t *testing.T) {
		if code, body := doorsDo(t, pc, http.MethodGet, "http://localhost/kiosk/doors", nil); code != 200 || body != "GET /kiosk/state\nPOST /kiosk/state\n" {
			t.Errorf("GET /kiosk/doors = %d %q", code, body)
		}
		if code, body := doorsDo(t, pc, http.MethodPost, "http://localhost/kiosk/door/kiosk/state", []byte("clock")); code != 200 {
			t.Fatalf("POST through the door = %d %s", code, body)
		}
		code, body := doorsDo(t, pc, http.MethodGet, "http://localhost/kiosk/door/kiosk/state", nil)
		var a struct {
			State   string `json:"state"`
			Request struct {
				Vat  string `json:"vat"`
				Host string `json:"host"`
			} `json:"request"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &a) != nil || a.State != "clock" || a.Request.Vat != "kiosk" {
			t.Errorf("GET through the door = %d %s; want the backend's state clock, as vat kiosk", code, body)
		}
	})

	t.Run("the door refuses", func(t *testing.T) {
		tests := []struct {
			name, method, path, want string
		}{
			{"another vat's path", "POST", "/browser/restart", "door refused: POST /browser/restart is not one of this door's entries"},
			{"outside the set", "DELETE", "/kiosk/state", "is not one of this door's entries"},
			{"dot-dot", "GET", "/kiosk/../browser/restart", "door refused: the path has a '..' segment"},
			{"double slash", "GET", "//kiosk/state", "door refused: the path has an empty segment"},
			{"encoded dot", "GET", "/kiosk/%2e%2e/state", "door refused: the path has a percent sign"},
			{"query", "GET", "/kiosk/state?x=1", "door refused: the path has a query"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				code, body := doorsDo(t, pc, tt.method, "http://localhost/kiosk/door"+tt.path, nil)
				if code != http.StatusBadGateway || !strings.Contains(body, tt.want) {
					t.Errorf("%s %s = %d %q; want 502 with %q", tt.method, tt.path, code, body, tt.want)
				}
			})
		}
	})

	t.Run("nothing inside the wall reaches the backend directly", func(t *testing.T) {
		// From outside the wall both are reachable: the probe is real.
		for _, addr := range [][2]string{{"unix", sock}, {"tcp", tcpAddr}} {
			c, err := net.Dial(addr[0], addr[1])
			if err != nil {
				t.Fatalf("the backend at %s is not reachable even from the host: %v", addr[1], err)
			}
			_ = c.Close()
		}
		for _, q := range []string{"unix=" + sock, "tcp=" + tcpAddr} {
			code, body := doorsDo(t, pc, http.MethodGet, "http://localhost/kiosk/reach?"+q, nil)
			if code != 200 || !strings.HasPrefix(body, "unreachable: ") {
				t.Errorf("reach %s from inside the wall = %d %q; want unreachable", q, code, body)
			}
		}
	})

	t.Run("every call is one log record", func(t *testing.T) {
		var refused, answered int
		for _, rec := range logs.records("door call") {
			if rec["vat"] != "kiosk" {
				t.Errorf("door call record for vat %v", rec["vat"])
			}
			if r, _ := rec["reason"].(string); r != "" {
				refused++
			} else if rec["status"] == 200.0 {
				answered++
			}
		}
		if answered != 2 || refused != 6 {
			t.Errorf("door call records: %d answered, %d refused; want 2 and 6", answered, refused)
		}
	})

	t.Run("upgraded without the door, the doors are gone", func(t *testing.T) {
		code, body := doorsDo(t, ac, http.MethodPut, "http://admin/kiosk", doorsBundle(t, bins["door-vat"], `{"command": ["./door-vat"]}`))
		if code != http.StatusOK || strings.Contains(body, `"doors"`) {
			t.Fatalf("upgrade = %d %s; want 200 with no doors", code, body)
		}
		if code, body := doorsDo(t, pc, http.MethodGet, "http://localhost/kiosk/doors", nil); code != 200 || body != "" {
			t.Errorf("GET /kiosk/doors after the upgrade = %d %q; want an empty list", code, body)
		}
		if code, body := doorsDo(t, pc, http.MethodGet, "http://localhost/kiosk/door/kiosk/state", nil); code != http.StatusBadGateway || !strings.Contains(body, "door refused: this vat has no doors") {
			t.Errorf("call after the upgrade = %d %q; want refused", code, body)
		}
		recs := logs.records("doors revoked")
		if len(recs) != 1 || recs[0]["vat"] != "kiosk" {
			t.Errorf("doors revoked records = %v; want one for kiosk", recs)
		}
	})

	t.Run("deleted", func(t *testing.T) {
		code, body := doorsDo(t, ac, http.MethodPut, "http://admin/kiosk", doorsBundle(t, bins["door-vat"], `{"command": ["./door-vat"], "doors": ["kiosk"]}`))
		if code != http.StatusOK {
			t.Fatalf("upgrade back to doors = %d %s", code, body)
		}
		if code, _ := doorsDo(t, pc, http.MethodGet, "http://localhost/kiosk/door/kiosk/state", nil); code != 200 {
			t.Fatalf("a fresh grant after the upgrade does not work: %d", code)
		}
		if code, body := doorsDo(t, ac, http.MethodDelete, "http://admin/kiosk", nil); code != 200 {
			t.Fatalf("DELETE /kiosk = %d %s", code, body)
		}
		if recs := logs.records("doors revoked"); len(recs) != 2 {
			t.Errorf("doors revoked records = %d; want 2 (upgrade, delete)", len(recs))
		}
	})

	t.Run("the table is read again at start, and a refusal keeps the vat off", func(t *testing.T) {
		code, body := doorsDo(t, ac, http.MethodPut, "http://admin/kiosk", doorsBundle(t, bins["door-vat"], `{"command": ["./door-vat"], "doors": ["kiosk"]}`))
		if code != http.StatusCreated {
			t.Fatalf("install again = %d %s", code, body)
		}
		stop()
		if err := os.WriteFile(table, []byte(fmt.Sprintf(`{"sets": {
			"kiosk": {"firstParty": false, "backend": "unix:%s", "entries": ["GET /kiosk/state"]}}}`, sock)), 0o600); err != nil {
			t.Fatal(err)
		}
		start()
		var st struct {
			Status    string   `json:"status"`
			LastError string   `json:"last_error"`
			Doors     []string `json:"doors"`
		}
		// The vats start beside serving: wait for kiosk's start to end.
		for deadline := time.Now().Add(10 * time.Second); ; {
			code, body = doorsDo(t, ac, http.MethodGet, "http://admin/kiosk", nil)
			if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
				t.Fatalf("GET /kiosk = %d %s", code, body)
			}
			if st.Status != "starting" || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st.Status != "off: it stopped" || !strings.Contains(st.LastError, "doors refused: vat kiosk is not first-party") || len(st.Doors) != 0 {
			t.Errorf("kiosk after the table dropped it = %+v; want off with the doors refusal", st)
		}
		if code, _ := doorsDo(t, pc, http.MethodGet, "http://localhost/kiosk/door/kiosk/state", nil); code != http.StatusServiceUnavailable {
			t.Errorf("kiosk answers %d; want 503 (off)", code)
		}
	})
}
